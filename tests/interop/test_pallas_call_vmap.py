"""``jax.vmap`` of an upstream ``pallas_call`` imports: upstream's batching rule puts the batch
axes in the grid (``vmapped_dims``), gives the batched operands leading squeezed block
dimensions, and keeps the body, whose ``program_id(k)`` counts the other axes. Each program
is compared bit for bit with upstream's own result (``interpret=True`` on the CPU)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import assert_same
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.interop import from_jaxpr
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.kernels.batching import batched_kernel
from minipallas.kernels.programs.choose import lower_for_target

F32 = jnp.float32
RNG = np.random.default_rng(27)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def check(make, *args):
    """``make(interpret)`` builds the (vmapped) upstream function: its imported jaxpr, compiled,
    gives upstream's interpret-mode bits (both XLA; the reference interpreter rounds each op
    where XLA may fuse a multiply-add)."""
    fn = from_jaxpr(jax.make_jaxpr(make(False))(*args))
    want = jax.tree.leaves(jax.jit(make(True))(*args))
    got = mp.compile(fn)(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_same(g, np.asarray(w))
    return fn


def _grid_kernel(x_ref, o_ref):
    i = pl.program_id(0)
    o_ref[...] = x_ref[...] * 2.0 + i.astype(F32) * 100.0 + pl.num_programs(0)


def grid_call(interpret):
    return pl.pallas_call(
        _grid_kernel,
        jax.ShapeDtypeStruct((16, 128), F32),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        interpret=interpret,
    )


def test_vmap_imports_with_the_body_counting_the_unbatched_axes():
    fn = check(lambda it: jax.vmap(grid_call(it)), rand(3, 16, 128))
    assert any(op.name == "call" for op in fn.walk())
    kernel = kernel_from_jaxpr(jax.make_jaxpr(jax.vmap(grid_call(False)))(rand(3, 16, 128)))
    assert kernel.grid == (3, 2)
    assert {op.attrs["axis"] for op in kernel.body.walk() if op.name == "program_id"} == {1}


@pytest.mark.parametrize("axes", [(0, 0), (1, 0), (2, 1)])
def test_double_vmap_on_any_axes(axes):
    inner, outer = axes
    shape = [16, 128]
    shape.insert(inner, 3)
    shape.insert(outer, 2)
    check(lambda it: jax.vmap(jax.vmap(grid_call(it), inner), outer), rand(*shape))


def test_quadruple_vmap():
    def make(it):
        f = grid_call(it)
        for axis in (0, 1, 0, 2):
            f = jax.vmap(f, in_axes=axis)
        return f

    check(make, rand(2, 2, 3, 2, 16, 128))


def _mixed_kernel(x_ref, w_ref, o_ref):
    o_ref[...] = x_ref[...] * w_ref[0:1, :] + pl.program_id(1).astype(F32)


def mixed_call(interpret):
    return pl.pallas_call(
        _mixed_kernel,
        jax.ShapeDtypeStruct((16, 256), F32),
        grid=(2, 2),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i, j: (i, j)),
            pl.BlockSpec((8, 128), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
        interpret=interpret,
    )


def test_vmap_with_an_unbatched_operand_and_dimension_semantics():
    x, w = rand(4, 16, 256), rand(8, 256)
    check(lambda it: jax.vmap(mixed_call(it), in_axes=(0, None)), x, w)
    check(lambda it: jax.vmap(jax.vmap(mixed_call(it), (None, 0)), (0, None)), x, rand(2, 8, 256))
    kernel = kernel_from_jaxpr(jax.make_jaxpr(jax.vmap(mixed_call(False), (0, None)))(x, w))
    assert kernel.dimension_semantics == ("parallel", "parallel", "arbitrary")
    assert [s.block_shape for s in kernel.in_specs] == [(None, 8, 128), (8, 128)]


def _accumulate(x_ref, acc_ref, o_ref):
    o_ref[...] = acc_ref[...] + x_ref[...] * 3.0


def aliased_call(interpret):
    return pl.pallas_call(
        _accumulate,
        jax.ShapeDtypeStruct((8, 128), F32),
        input_output_aliases={1: 0},
        interpret=interpret,
    )


@pytest.mark.parametrize("acc_axis", [0, 1, None])
def test_vmap_with_an_aliased_input_batched_on_another_axis_or_not_at_all(acc_axis):
    """Upstream moves (or broadcasts) the aliased input to the output's batch axis 0 before the
    call; the imported program does what the jaxpr says."""
    acc = rand(8, 128) if acc_axis is None else rand(*np.insert([8, 128], acc_axis, 3))
    check(lambda it: jax.vmap(aliased_call(it), in_axes=(0, acc_axis)), rand(3, 8, 128), acc)


def _halve_until_small(x_ref, o_ref):
    """A while on a condition read from the block: each batch element loops its own count."""

    def cond(carry):
        k, v = carry
        return (jnp.max(jnp.abs(v)) > 1.0) & (k < 20)

    def body(carry):
        k, v = carry
        return k + 1, v * 0.5

    k, v = jax.lax.while_loop(cond, body, (jnp.int32(0), x_ref[...]))
    o_ref[...] = v + k.astype(F32) + pl.program_id(0).astype(F32)


def test_vmap_of_a_kernel_with_a_while_on_a_dynamic_condition():
    def make(it):
        return jax.vmap(
            pl.pallas_call(
                _halve_until_small,
                jax.ShapeDtypeStruct((16, 128), F32),
                grid=(2,),
                in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                interpret=it,
            )
        )

    x = rand(3, 16, 128) * np.array([1.0, 50.0, 3000.0], np.float32)[:, None, None]
    check(make, x)


def _matmul(x_ref, y_ref, o_ref, acc_ref):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=F32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...]


def matmul_call(interpret, *, dims=("parallel", "parallel", "arbitrary")):
    return pl.pallas_call(
        _matmul,
        jax.ShapeDtypeStruct((16, 256), F32),
        grid=(2, 2, 3),
        in_specs=[
            pl.BlockSpec((8, 128), lambda i, j, k: (i, k)),
            pl.BlockSpec((128, 128), lambda i, j, k: (k, j)),
        ],
        out_specs=pl.BlockSpec((8, 128), lambda i, j, k: (i, j)),
        scratch_shapes=[pltpu.VMEM((8, 128), F32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=dims),
        interpret=interpret,
    )


def test_vmap_of_a_kernel_with_scratch_shapes():
    x, y = rand(2, 16, 384), rand(384, 256)
    check(lambda it: jax.vmap(matmul_call(it), in_axes=(0, None)), x, y)
    check(
        lambda it: jax.vmap(jax.vmap(matmul_call(it), (None, 1)), (None, 1)),
        x[0],
        rand(384, 2, 3, 256),
    )


def test_minipallas_vmap_of_its_own_kernel_with_scratch_shapes_equals_upstream():
    """minipallas's batching rule (one more grid axis) with a scratch accumulator."""

    def kernel(x_ref, y_ref, o_ref, acc_ref):
        @mp.when(mp.program_id(2) == 0)
        def _():
            acc_ref[...] = mp.numpy.zeros(acc_ref.shape, "float32")

        acc_ref[...] += mp.numpy.dot(x_ref[...], y_ref[...], preferred_element_type="float32")

        @mp.when(mp.program_id(2) == mp.num_programs(2) - 1)
        def _():
            o_ref[...] = acc_ref[...]

    call = mp.pallas_call(
        kernel,
        jax.ShapeDtypeStruct((16, 256), F32),
        grid=(2, 2, 3),
        in_specs=[
            mp.BlockSpec((8, 128), lambda i, j, k: (i, k)),
            mp.BlockSpec((128, 128), lambda i, j, k: (k, j)),
        ],
        out_specs=mp.BlockSpec((8, 128), lambda i, j, k: (i, j)),
        scratch_shapes=[mp.tpu.VMEM((8, 128), "float32")],
        dimension_semantics=("parallel", "parallel", "arbitrary"),
    )
    x, y = rand(3, 16, 384), rand(3, 384, 256)
    for in_axes in (0, (0, None)):
        ys = y if in_axes == 0 else y[0]
        got = jax.vmap(call, in_axes=in_axes)(x, ys)
        assert_same(got, jax.vmap(matmul_call(True), in_axes=in_axes)(x, ys))
        assert_same(jax.jit(jax.vmap(call, in_axes=in_axes))(x, ys), got)
    x2, y2 = rand(2, 3, 16, 384), rand(2, 3, 384, 256)
    twice = jax.vmap(jax.vmap(call))(x2, y2)
    assert_same(twice, jax.vmap(jax.vmap(matmul_call(True)))(x2, y2))


def test_an_imported_vmapped_kernel_emits_the_module_of_minipallas_own_batching():
    """On a TPU both are one Mosaic kernel over the grid ``(batch, *grid)``, the batch axis
    ``parallel``."""
    x, y = rand(2, 16, 384), rand(384, 256)
    vmapped = jax.make_jaxpr(jax.vmap(matmul_call(False), (0, None)))(x, y)
    imported = kernel_from_jaxpr(vmapped, memory_space=mp.tpu.VMEM)
    one = kernel_from_jaxpr(jax.make_jaxpr(matmul_call(False))(x[0], y), memory_space=mp.tpu.VMEM)
    ours = batched_kernel(one, 2, [True, False])
    assert imported.grid == ours.grid == (2, 2, 2, 3)
    assert imported.dimension_semantics == ("parallel", "parallel", "parallel", "arbitrary")
    texts = [lower_for_target(k, "tpu").as_text(debug_info=False) for k in (imported, ours)]
    assert texts[0] == texts[1]


def _rows_kernel(x_ref, o_ref):
    i, n = pl.program_id(0), pl.num_programs(0)
    o_ref[...] = x_ref[...] + i.astype(F32) + 10 * n.astype(F32)


def rows_call(n, interpret):
    return pl.pallas_call(
        _rows_kernel,
        jax.ShapeDtypeStruct((32, 128), F32),
        grid=(n,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        interpret=interpret,
    )


def test_vmap_of_a_dynamic_grid_reads_its_own_size():
    """A traced grid size, unbatched: the vmapped call has grid ``(batch, None)``. Each slice
    equals upstream's unbatched call. Upstream's vmapped interpret mode does not: discharging
    the body outside its grid environment, ``num_programs(0)`` reads axis 0 of the full grid
    (the batch axis) instead of the first axis that is not vmapped, so it equals the unbatched
    calls only when the size happens to equal the batch."""
    xs = rand(3, 32, 128)
    theirs = jax.jit(jax.vmap(lambda x, n: rows_call(n, True)(x), in_axes=(0, None)))
    closed = jax.make_jaxpr(jax.vmap(lambda x, n: rows_call(n, False)(x), in_axes=(0, None)))(
        xs, np.int32(2)
    )
    assert kernel_from_jaxpr(closed).grid == (3, None)
    program = mp.compile(from_jaxpr(closed))
    one = jax.jit(lambda x, n: rows_call(n, True)(x))
    for n in (1, 3, 4):
        (got,) = program(xs, np.int32(n))
        for b in range(3):
            assert_same(got[b], np.asarray(one(xs[b], np.int32(n))))
        if n == 3:  # the batch's size: upstream's vmapped reading happens to be right
            assert_same(got, np.asarray(theirs(xs, np.int32(n))))
