"""``input_output_aliases``: an aliased output starts as its input, as upstream's.

Each kernel writes only part of its aliased output (or adds into it); the rest must keep the
input's contents. Results of the CPU program (batched where it can be), of the loop program
(``grid_program``) and of upstream ``pallas_call(..., input_output_aliases=...,
interpret=True)`` agree bit for bit. Bad mappings raise upstream's errors as
``MiniPallasError``s with a location and a fix.
"""

import numpy as np
import pytest
from kernel_helpers import as_tuple, assert_same_bits

import minipallas as mp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import MiniPallasError
from minipallas.kernels.programs.choose import cpu_program
from minipallas.kernels.programs.grid import grid_program
from minipallas.kernels.programs.vectorized_grid import vectorized_grid_plan
from minipallas.lowering.runtime.compiled import compile
from minipallas.tools.corpora.suite import Case


def double_block(ns, x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def double_first_row(ns, x_ref, o_ref):
    o_ref[0] = x_ref[0] * 2


def accumulate(ns, x_ref, acc_ref, o_ref):
    """Adds each block of x into the aliased accumulator (upstream's atomic-add pattern): the
    input first, since a TPU never loads an output block (reading it unwritten is refused)."""

    @ns.when(ns.program_id(0) == 0)
    def _():
        o_ref[...] = acc_ref[...]

    o_ref[...] += x_ref[...]


def swap_halves(ns, x_ref, y_ref, a_ref, b_ref):
    """Two aliased outputs, each written in one half only: the other half stays its input."""
    a_ref[:4] = y_ref[:4]
    b_ref[4:] = x_ref[4:]


def second_input_into_first_output(ns, s_ref, x_ref, o_ref, p_ref):
    i = ns.program_id(0)
    o_ref[...] = x_ref[...] + s_ref[0]
    p_ref[...] = x_ref[...] * 0 + i.astype(ns.np.float32)


def rng_inputs(*shapes):
    return lambda rng: tuple(rng.standard_normal(s).astype(np.float32) for s in shapes)


ROW = ((1, 128), lambda i: (i, 0))
CASES = [
    # a grid over rows 0 and 1 of 8: rows 2..7 keep the input (batched program)
    (Case("rows", double_block, ((8, 128), "float32"), rng_inputs((8, 128)), grid=(2,),
          in_specs=[ROW], out_specs=ROW), {0: 0}, True),
    # ints, blocks that pad the array: rows 8..9 are in the padded last block, never visited
    (Case("padded", double_block, ((10, 128), "int32"),
          lambda rng: (rng.integers(-9, 9, (10, 128), dtype=np.int32),), grid=(2,),
          in_specs=[((4, 128), lambda i: (i, 0))], out_specs=((4, 128), lambda i: (i, 0))),
     {0: 0}, True),
    (Case("first_row", double_first_row, ((4, 8), "float32"), rng_inputs((4, 8))), {0: 0},
     False),
    (Case("accumulate", accumulate, ((8, 128), "float32"), rng_inputs((4, 8, 128), (8, 128)),
          grid=(4,), in_specs=[((None, 8, 128), lambda i: (i, 0, 0)), ((8, 128), lambda i: (0, 0))],
          out_specs=((8, 128), lambda i: (0, 0))), {1: 0}, False),
    (Case("swap_halves", swap_halves, (((8, 16), "float32"), ((8, 16), "float32")),
          rng_inputs((8, 16), (8, 16))), {0: 0, 1: 1}, False),
    (Case("second_input", second_input_into_first_output,
          (((8, 128), "float32"), ((8, 128), "float32")), rng_inputs((1,), (8, 128)), grid=(3,),
          in_specs=[((1,), lambda i: (0,)), ROW], out_specs=(ROW, ROW)), {1: 0}, True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "aliases", "batched"), CASES, ids=lambda c: getattr(c, "name", "")
)
def test_aliased_outputs_match_upstream(case, aliases, batched):
    args = case.inputs()
    expected = as_tuple(case.upstream(input_output_aliases=aliases)(*args))
    call = case.minipallas(input_output_aliases=aliases)
    kernel = call.trace(*args)
    assert kernel.input_output_aliases == tuple(sorted(aliases.items()))
    assert (vectorized_grid_plan(kernel) is not None) == batched
    cpu = as_tuple(call(*args))
    loops = compile(grid_program(kernel))(*args)
    for got in (cpu, loops):
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert_same_bits(g, e)


def test_the_unwritten_rows_are_the_input():
    (case, aliases, _), *_ = CASES
    (x,) = case.inputs()
    out = np.asarray(case.minipallas(input_output_aliases=aliases)(x))
    np.testing.assert_array_equal(out[:2], x[:2] * 2)
    np.testing.assert_array_equal(out[2:], x[2:])
    unaliased = np.asarray(case.minipallas()(x))
    assert np.isnan(unaliased[2:]).all()  # without the alias they hold the fill value


def test_from_jaxpr_imports_the_aliases():
    import jax

    (case, aliases, _), *_ = CASES
    args = case.inputs()
    upstream = case.upstream(input_output_aliases=aliases)
    kernel = kernel_from_jaxpr(jax.make_jaxpr(upstream)(*args))
    assert kernel.input_output_aliases == ((0, 0),)
    (got,) = compile(cpu_program(kernel))(*args)
    assert_same_bits(got, upstream(*args))
    (imported,) = compile(mp.from_jaxpr(jax.make_jaxpr(upstream)(*args)))(*args)
    assert_same_bits(imported, got)


X = mp.ArrayType((8, 128), "float32")


@pytest.mark.parametrize(
    ("aliases", "out_shape", "message"),
    [
        ({1: 0}, X, "input index 1 outside the range [0, 1)"),
        ({0: 1}, X, "output index 1 outside the range [0, 1)"),
        ({-1: 0}, X, "input index -1 outside the range [0, 1)"),
        ({0: 0}, mp.ArrayType((8, 64), "float32"), "a different abstract value"),
        ({0: 0}, mp.ArrayType((8, 128), "int32"), "a different abstract value"),
        ({0: "0"}, X, "indices must be ints"),
        ({True: 0}, X, "indices must be ints"),
        ({np.int32(0): np.int64(1)}, X, "output index 1 outside the range [0, 1)"),
    ],
)
def test_bad_aliases_are_errors_with_a_fix(aliases, out_shape, message):
    with pytest.raises(MiniPallasError) as err:
        call = mp.pallas_call(lambda x_ref, o_ref: None, out_shape, input_output_aliases=aliases)
        call.trace(X)
    assert message in err.value.message
    assert err.value.message.startswith("input_output_aliases contains the mapping")
    assert err.value.fix and err.value.loc is not None


def test_upstream_raises_for_the_same_mismatch():
    import jax
    from jax.experimental import pallas as pl

    call = pl.pallas_call(
        lambda x_ref, o_ref: None,
        jax.ShapeDtypeStruct((8, 64), np.float32),
        input_output_aliases={0: 0},
        interpret=True,
    )
    with pytest.raises(ValueError, match="a different abstract value"):
        call(np.zeros((8, 128), np.float32))


def test_two_inputs_into_one_output_is_an_error():
    call = mp.pallas_call(lambda x, y, o: None, X, input_output_aliases={0: 0, 1: 0})
    with pytest.raises(MiniPallasError, match="aliased to output 0 too"):
        call.trace(X, X)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_the_kernel_module_is_the_same_with_aliases(target):
    """Upstream's aliasing is a property of the call (XLA's ``output_operand_aliases`` on the
    Mosaic/Triton custom call), not of the kernel module: the module is unchanged."""
    (case, aliases, _) = CASES[3]  # accumulate: blocks Mosaic takes
    args = case.inputs()
    plain = case.minipallas().lower(*args, target=target).as_text(debug_info=False)
    aliased = case.minipallas(input_output_aliases=aliases).lower(*args, target=target)
    assert aliased.as_text(debug_info=False) == plain


def test_upstream_puts_the_aliases_on_the_custom_call_only():
    """What the test above relies on: upstream's TPU lowering of the same call carries the
    alias as the custom call's ``output_operand_aliases``."""
    (case, aliases, _) = CASES[3]
    args = case.inputs()
    upstream = case.upstream(interpret=False, input_output_aliases=aliases)
    text = upstream.trace(*args).lower(lowering_platforms=("tpu",)).as_text()
    alias = "#stablehlo.output_operand_alias<output_tuple_indices = [], operand_index = 1,"
    assert f"output_operand_aliases = [{alias}" in text


def test_aliases_under_jax_jit_and_vmap_match_upstream():
    """On JAX values the call runs as JAX ops (``jax_call``): the alias holds there too."""
    import jax

    (case, aliases, _), *_ = CASES
    (x,) = case.inputs()
    call = case.minipallas(input_output_aliases=aliases)
    upstream = case.upstream(input_output_aliases=aliases)
    assert_same_bits(jax.jit(call)(x), upstream(x))
    xs = np.stack([x, -x])
    assert_same_bits(jax.vmap(call)(xs), jax.vmap(upstream)(xs))
