"""``interpret(..., checks=True)`` inside a kernel's loop program (``grid_program``): an upstream
``pallas_call`` imported with ``from_jaxpr``, or minipallas's own.

The program leaves outputs and scratch unwritten (their allocation holds upstream's fill), so
a read before any write is an uninitialized read; an index map's block outside its array is an
error; each names the user's line and the grid point. Reading a partial block's padding is not
an error (the kernel may drop it), and a max over that padding gives upstream's bits on every
path (``ir/interpret/xla/extremes.py``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from kernel_helpers import assert_same_bits

import minipallas as mp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import InterpretError
from minipallas.ir.interpret.grid_steps import role_of
from minipallas.kernels.programs.grid import grid_program
from minipallas.lowering.runtime.compiled import compile

F32 = jnp.float32
X = np.arange(256 * 128, dtype=np.float32).reshape(256, 128) / 7


def line_of(marker: str) -> int:
    """The line of this file holding ``marker`` (the statement a check must point at)."""
    with open(__file__) as f:
        lines = [n for n, text in enumerate(f, 1) if text.rstrip().endswith(f"# {marker}")]
    assert len(lines) == 1, marker
    return lines[0]


def imported(f, *args):
    return mp.from_jaxpr(jax.make_jaxpr(f)(*args))


def raised(f, *args) -> InterpretError:
    fn = imported(f, *args)
    mp.interpret(fn, *args)  # without checks: upstream's semantics, no error
    with pytest.raises(InterpretError) as e:
        mp.interpret(fn, *args, checks=True)
    return e.value


def rows(index_map, grid=2, shape=(256, 128)):
    """``x * 2`` over row blocks of 128, the input's blocks picked by ``index_map``."""

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def f(x):
        return pl.pallas_call(
            kernel,
            grid=(grid,),
            in_specs=[pl.BlockSpec((128, 128), index_map)],
            out_specs=pl.BlockSpec((128, 128), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct(shape, F32),
            interpret=True,
        )(x)

    return f


def accumulate_without_init(x):
    def kernel(x_ref, o_ref):
        o_ref[...] += x_ref[...]  # accumulates into o_ref

    return pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[pl.BlockSpec((128, 128), lambda k: (k, 0))],
        out_specs=pl.BlockSpec((128, 128), lambda k: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((128, 128), F32),
        interpret=True,
    )(x)


def scratch_without_init(x):
    def kernel(x_ref, o_ref, acc_ref):
        acc_ref[...] += x_ref[...]  # accumulates into scratch
        o_ref[...] = acc_ref[...]

    return pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[pl.BlockSpec((128, 128), lambda k: (k, 0))],
        out_specs=pl.BlockSpec((128, 128), lambda k: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((128, 128), F32),
        scratch_shapes=[pltpu.VMEM((128, 128), F32)],
        interpret=True,
    )(x)


def test_accumulating_into_an_output_never_initialized_is_reported_at_its_line_and_point():
    e = raised(accumulate_without_init, X)
    assert (e.loc.file, e.loc.line) == (__file__, line_of("accumulates into o_ref"))
    assert "never written" in e.message and "grid point (0,)" in e.message


def test_reading_scratch_never_initialized_is_reported_at_its_line_and_point():
    e = raised(scratch_without_init, X)
    assert (e.loc.file, e.loc.line) == (__file__, line_of("accumulates into scratch"))
    assert "never written" in e.message and "grid point (0,)" in e.message


def test_a_negative_block_index_is_reported_at_the_index_map():
    e = raised(rows(lambda i: (i - 1, 0)), X)  # one block before
    assert (e.loc.file, e.loc.line) == (__file__, line_of("one block before"))
    assert "block [-1, 0] at grid point (0,)" in e.message and "before the array" in e.message


def test_a_block_past_the_end_is_reported_at_the_index_map():
    e = raised(rows(lambda i: (i + 1, 0)), X)  # one block after
    assert (e.loc.file, e.loc.line) == (__file__, line_of("one block after"))
    assert "block [2, 0] at grid point (1,)" in e.message and "past its end" in e.message


def test_a_grid_longer_than_the_array_is_reported_at_the_pallas_call():
    """The identity map makes no op of its own: the error points at the ``pallas_call``."""
    e = raised(rows(lambda i: (i, 0), grid=3, shape=(384, 128)), X)
    assert e.loc.file == __file__ and "grid point (2,)" in e.message


def test_an_output_element_no_grid_point_writes_is_reported():
    e = raised(rows(lambda i: (i, 0), grid=1), X)
    assert "element [128, 0] of output 0" in e.message and "never written" in e.message


def matmul(a, b):
    def kernel(a_ref, b_ref, o_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=F32)

    return pl.pallas_call(
        kernel,
        grid=(2, 2, 2),
        in_specs=[
            pl.BlockSpec((64, 64), lambda i, j, k: (i, k)),
            pl.BlockSpec((64, 64), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((64, 64), lambda i, j, k: (i, j)),
        out_shape=jax.ShapeDtypeStruct((128, 128), F32),
        interpret=True,
    )(a, b)


def scratch_sum(x):
    def kernel(x_ref, o_ref, acc_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            acc_ref[...] = jnp.zeros_like(acc_ref)

        acc_ref[...] += x_ref[...]
        o_ref[...] = acc_ref[...]

    return pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[pl.BlockSpec((128, 128), lambda k: (k, 0))],
        out_specs=pl.BlockSpec((128, 128), lambda k: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((128, 128), F32),
        scratch_shapes=[pltpu.VMEM((128, 128), F32)],
        interpret=True,
    )(x)


def aliased_update(x):
    """Adds 1 to the first row block of ``x`` in place: the other block keeps ``x``."""

    def kernel(x_ref, o_ref):
        o_ref[...] = o_ref[...] + 1  # reads the aliased output first

    return pl.pallas_call(
        kernel,
        grid=(1,),
        in_specs=[pl.BlockSpec((128, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((128, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((256, 128), F32),
        input_output_aliases={0: 0},
        interpret=True,
    )(x)


CORRECT = {
    "partial_block_elementwise": (rows(lambda i: (i, 0), shape=(200, 128)), (X[:200],)),
    "accumulator_with_init": (scratch_sum, (X,)),
    "matmul_with_a_k_axis": (matmul, (X[:128], X[128:])),
    "aliased_output_read_first": (aliased_update, (X,)),
}


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_kernels_pass_the_checks_with_upstreams_bits(name):
    f, args = CORRECT[name]
    fn = imported(f, *args)
    (checked,) = mp.interpret(fn, *args, checks=True)
    assert_same_bits(checked, f(*args))
    assert_same_bits(compile(fn)(*args)[0], checked)


def test_minipallas_kernels_run_by_the_loop_program_are_checked_too():
    def kernel(x_ref, o_ref):
        o_ref[...] += x_ref[...]  # minipallas kernel accumulating

    call = mp.pallas_call(
        kernel,
        mp.ArrayType((128, 128), "float32"),
        grid=(2,),
        in_specs=[mp.BlockSpec((128, 128), lambda k: (k, 0))],
        out_specs=mp.BlockSpec((128, 128), lambda k: (0, 0)),
    )
    program = grid_program(call.trace(X))
    with pytest.raises(InterpretError, match=r"never written \(at grid point \(0,\)") as e:
        mp.interpret(program, X, checks=True)
    assert e.value.loc.line == line_of("minipallas kernel accumulating")


def test_an_explicit_fill_is_written_so_it_is_read_without_error():
    """The difftest's two-fill runs (``fill=``) store the fill: outputs and scratch then hold
    it, as defined memory."""
    kernel = kernel_from_jaxpr(jax.make_jaxpr(scratch_without_init)(X))
    program = grid_program(kernel, fill=lambda dtype: np.float32(0.5))
    (out,) = mp.interpret(program, X, checks=True)
    assert_same_bits(out, 0.5 + X[:128] + X[128:])


def test_the_loop_program_marks_its_body_and_maps_for_the_interpreter():
    kernel = kernel_from_jaxpr(jax.make_jaxpr(rows(lambda i: (i, 0)))(X))
    grid_program(kernel)
    assert role_of(kernel.in_specs[0].index_map).operand == "input 0"


def column_max(x):
    """One row of column maxima per 128-row block: the last block is partial."""

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.max(x_ref[...], axis=0, keepdims=True)

    return pl.pallas_call(
        kernel,
        grid=(2,),
        in_specs=[pl.BlockSpec((128, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((1, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((2, 128), F32),
        interpret=True,
    )(x)


def test_a_max_over_a_partial_blocks_padding_has_upstreams_bits_interpreted_and_compiled():
    """Upstream pads with NaN, but XLA:CPU's max over 128x128 (YNNPACK's) drops NaN rows four
    at a time: the partial block's 72 real rows give their maximum. The interpreter used to
    propagate the NaN. Each block's maximum is its first row, which no way XLA's threads may
    split the rows among them moves."""
    x = -X[:200]
    fn = imported(column_max, x)
    (interpreted,) = mp.interpret(fn, x)
    expected = np.asarray(column_max(x))
    assert not np.isnan(expected).any()
    assert_same_bits(interpreted, expected)
    assert_same_bits(compile(fn)(x)[0], expected)
