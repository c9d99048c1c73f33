"""tests/pallas/tpu_pallas_pipeline_test.py: ``emit_pipeline`` inside ``pl.kernel`` / ``core_map``.
Part 2 of 3."""

from __future__ import annotations

import functools

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _arange_i32
from minipallas.lowering.compat.jax_private import state_utils


def _pipe_bounded_slice_dynamic(cores):
    slices = np.array([[0, 3], [3, 8], [8, 11], [11, 16]], dtype=np.int32)[::-1].copy()

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def main(refs):
        x_ref, y_ref, slices_ref = refs

        @pl.core_map(pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def _():
            @functools.partial(pl.run_scoped, slices_smem=pltpu.SMEM(slices.shape, slices.dtype))
            def _(slices_smem):
                pltpu.sync_copy(slices_ref, slices_smem)

                def index_map(i):
                    return (
                        pl.ds(slices_smem[i, 0], slices_smem[i, 1] - slices_smem[i, 0]),
                        0,
                        0,
                    )

                block_spec = pl.BlockSpec(
                    (pl.BoundedSlice(16), 8, 128),
                    index_map,
                )
                pltpu.emit_pipeline(
                    kernel,
                    grid=(slices.shape[0],),
                    in_specs=(block_spec,),
                    out_specs=block_spec,
                )(x_ref, y_ref)

    @jax.jit
    def f(x, slices):
        y = pl.empty_like(x)
        _, y, _ = pl.run_state(main)((x, y, slices))
        return y

    return f, (_arange_i32(16, 8, 128), slices)


def _tr_grid(dynamic_grid, *n):
    """``(jnp.array(n),) if dynamic_grid else (n,)`` as upstream writes each grid."""
    return tuple(jnp.array(v) for v in n) if dynamic_grid else n


def _pipe_transformed_refs_as_inputs(cores, dynamic_grid):
    def body(x, o):
        o[...] = x[...]

    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]
            bs = x_ref.shape[:-1] + (256,)
            idx_map = lambda i: (0,) * (x_ref.ndim - 1) + (i,)  # noqa: E731
            pltpu.emit_pipeline(
                body,
                grid=_tr_grid(dynamic_grid, 2),
                in_specs=[pl.BlockSpec(bs, idx_map)],
                out_specs=[pl.BlockSpec(bs, idx_map)],
                dimension_semantics=(pltpu.ARBITRARY,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 16 * 512, dtype=np.float32).reshape((2, 16, 512)),)


def _pipe_transformed_refs_as_inputs_nested(cores, dynamic_grid):
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]

            def outer_body(outer_x, outer_o):
                def inner_body(x, o):
                    o[...] = x[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 2),
                    in_specs=[pl.BlockSpec((16, 128), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 128), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 2),
                in_specs=[pl.BlockSpec((16, 256), lambda i: (0, i))],
                out_specs=[pl.BlockSpec((16, 256), lambda i: (0, i))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 16 * 512, dtype=np.float32).reshape((2, 16, 512)),)


def _pipe_transformed_refs_as_inputs_nested_uneven(cores, dynamic_grid):
    def fn(x):
        out_type = jax.ShapeDtypeStruct((256, 128), x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            def outer_body(outer_x, outer_o):
                outer_o[...] = jnp.zeros(outer_o.shape, outer_o.dtype)
                tx = outer_x.at[0:128, :].at[pl.ds(0, 64), :]
                to = outer_o.at[pl.ds(0, 64), :]

                def inner_body(x, o):
                    o[...] = x[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 2),
                    in_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                    out_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(tx, to)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 2),
                in_specs=[pl.BlockSpec((256, 128), lambda i: (i, 0))],
                out_specs=[pl.BlockSpec((128, 128), lambda i: (i, 0))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(512 * 128, dtype=np.float32).reshape((512, 128)),)


def _pipe_nested_uneven_ref(x):
    expected = np.zeros((256, 128), dtype=np.float32)
    expected[0:64, :] = x[0:64, :]
    expected[128:192, :] = x[256:320, :]
    return (expected,)


def _pipe_transformed_refs_as_inputs_nested_bitcast(cores, dynamic_grid):
    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct((128, 128), x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            def outer_body(outer_x, outer_o):
                tx = outer_x.at[0:64, :].bitcast(jnp.int16)
                to = outer_o.bitcast(jnp.int16)

                def inner_body(x, o):
                    o[...] = x[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 4),
                    in_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                    out_specs=[pl.BlockSpec((32, 128), lambda i: (i, 0))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(tx, to)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 2),
                in_specs=[pl.BlockSpec((128, 128), lambda i: (i, 0))],
                out_specs=[pl.BlockSpec((64, 128), lambda i: (i, 0))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(256 * 128, dtype=np.float32).reshape((256, 128)),)


def _pipe_nested_bitcast_ref(x):
    """Upstream's expectation, written through state_utils.bitcast (TPU packing: int16 rows
    2r and 2r + 1 hold float32 row r), is rows 0:64 and 128:192 of x."""
    x_i16 = np.asarray(state_utils.bitcast(jnp.asarray(x), jnp.int16))
    expected_i16 = np.zeros((256, 128), dtype=np.int16)
    expected_i16[0:128, :] = x_i16[0:128, :]
    expected_i16[128:256, :] = x_i16[256:384, :]
    out = np.asarray(state_utils.bitcast(jnp.asarray(expected_i16), jnp.float32))
    assert np.array_equal(out, np.concatenate([x[0:64], x[128:192]]))
    return (out,)


def _pipe_transformed_refs_as_inputs_nested_3level(cores, dynamic_grid):
    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]

            def outer_body(outer_x, outer_o):
                def middle_body(middle_x, middle_o):
                    def inner_body(x, o):
                        o[...] = x[...]

                    pltpu.emit_pipeline(
                        inner_body,
                        grid=_tr_grid(dynamic_grid, 8),
                        in_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                        out_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                        dimension_semantics=(pltpu.PARALLEL,),
                    )(middle_x, middle_o)

                pltpu.emit_pipeline(
                    middle_body,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 8),
                in_specs=[pl.BlockSpec((16, 32768), lambda i: (0, i))],
                out_specs=[pl.BlockSpec((16, 32768), lambda i: (0, i))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 16 * 262144, dtype=np.float32).reshape((2, 16, 262144)),)


def _pipe_transformed_refs_as_inputs_nested_hbm_passthrough(cores, dynamic_grid):
    @jax.jit
    def fn(x, y):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, y_ref, o_ref):
            x_ref = x_ref.at[1, ...]
            y_scratch = jax.empty_ref(jax.ShapeDtypeStruct((16, 512), jnp.float32), pltpu.VMEM)

            def outer_body(outer_x, outer_o):
                pltpu.sync_copy(y_ref, y_scratch)

                def inner_body(x, o):
                    o[...] = x[...] + y_scratch[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 8),
                in_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                out_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x, y)

    x = np.arange(2 * 16 * 32768, dtype=np.float32).reshape((2, 16, 32768))
    return fn, (x, np.ones((16, 512), dtype=np.float32))


def _pipe_transformed_refs_as_inputs_nested_mixed_grids(cores, dynamic_grid):
    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]

            def outer_body(outer_x, outer_o):
                def inner_body(x, o):
                    o[...] = x[...]

                pltpu.emit_pipeline(
                    inner_body,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((32, 512), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((32, 512), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 8, 8),
                in_specs=[pl.BlockSpec((32, 4096), lambda i, j: (i, j))],
                out_specs=[pl.BlockSpec((32, 4096), lambda i, j: (i, j))],
                dimension_semantics=(pltpu.PARALLEL, pltpu.PARALLEL),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 256 * 32768, dtype=np.float32).reshape((2, 256, 32768)),)


def _pipe_transformed_refs_as_inputs_nested_sequential(cores, dynamic_grid):
    @jax.jit
    def fn(x):
        out_type = jax.ShapeDtypeStruct(x.shape[1:], x.dtype)

        @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def run_kernel(x_ref, o_ref):
            x_ref = x_ref.at[1, ...]

            def outer_body(outer_x, outer_o):
                tmp = jax.empty_ref(jax.ShapeDtypeStruct((16, 4096), jnp.float32), pltpu.VMEM)

                def inner_body_1(x, o):
                    o[...] = x[...] * 2

                def inner_body_2(x, o):
                    o[...] = x[...] + 1

                pltpu.emit_pipeline(
                    inner_body_1,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(outer_x, tmp)
                pltpu.emit_pipeline(
                    inner_body_2,
                    grid=_tr_grid(dynamic_grid, 8),
                    in_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    out_specs=[pl.BlockSpec((16, 512), lambda i: (0, i))],
                    dimension_semantics=(pltpu.PARALLEL,),
                )(tmp, outer_o)

            pltpu.emit_pipeline(
                outer_body,
                grid=_tr_grid(dynamic_grid, 8),
                in_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                out_specs=[pl.BlockSpec((16, 4096), lambda i: (0, i))],
                dimension_semantics=(pltpu.PARALLEL,),
            )(x_ref, o_ref)

        return run_kernel(x)

    return fn, (np.arange(2 * 16 * 32768, dtype=np.float32).reshape((2, 16, 32768)),)


_NON_FLAT_OUT_TYPE = [
    (),
    (
        jax.ShapeDtypeStruct((512,), jnp.float32),
        jax.ShapeDtypeStruct((512,), jnp.float32),
    ),
]


def _non_flat_args(run_kernel):
    """f(x, y, z) = upstream's run_kernel(x, x * 2, x * 3), its two leaves."""

    def f(x, y, z):
        out = run_kernel(x, y, z)
        assert len(out) == 2 and out[0] == ()
        return out[1][0], out[1][1]

    x = np.arange(512, dtype=np.float32)
    return f, (x, x * 2, x * 3)


def _pipe_non_flat_args(cores, dynamic_grid):
    out_type = _NON_FLAT_OUT_TYPE

    def body(in_refs, out_refs):
        out_refs[1][0][...] = in_refs[0][0][...] + in_refs[2][0][...]
        out_refs[1][1][...] = in_refs[2][1][...]

    @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
    def run_kernel(x_ref, y_ref, z_ref, out_xy_ref, out_z_ref):
        in_specs = (
            [
                (pl.BlockSpec((256,), lambda i: (i,)),),
                (),
                (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,))),
            ],
        )
        out_specs = (
            [(), (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,)))],
        )
        pltpu.emit_pipeline(
            body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=in_specs,
            out_specs=out_specs,
        )([(x_ref,), (), (y_ref, z_ref)], [out_xy_ref, out_z_ref])

    return _non_flat_args(run_kernel)


def _pipe_non_flat_args_and_scratch(cores, dynamic_grid):
    out_type = _NON_FLAT_OUT_TYPE

    def body(in_refs, out_refs):
        scratch1 = jax.empty_ref(jax.ShapeDtypeStruct((256,), jnp.float32), memory_space=pltpu.VMEM)
        scratch2 = jax.empty_ref(jax.ShapeDtypeStruct((256,), jnp.float32), memory_space=pltpu.VMEM)
        scratch2_list = [scratch2]
        scratch1[...] = in_refs[0][0][...] + in_refs[2][0][...]
        out_refs[1][0][...] = scratch1[...]
        scratch2_list[0][...] = in_refs[2][1][...]
        out_refs[1][1][...] = scratch2_list[0][...]

    @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
    def run_kernel(x_ref, y_ref, z_ref, out_xy_ref, out_z_ref):
        in_specs = (
            [
                (pl.BlockSpec((256,), lambda i: (i,)),),
                (),
                (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,))),
            ],
        )
        out_specs = (
            [(), (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,)))],
        )
        pltpu.emit_pipeline(
            body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=in_specs,
            out_specs=out_specs,
        )([(x_ref,), (), (y_ref, z_ref)], [out_xy_ref, out_z_ref])

    return _non_flat_args(run_kernel)


def _pipe_non_flat_args_nested(cores, dynamic_grid):
    out_type = _NON_FLAT_OUT_TYPE

    def outer_body(outer_in, outer_out):
        def inner_body(in_refs, out_refs):
            out_refs[1][0][...] = in_refs[0][0][...] + in_refs[2][0][...]
            out_refs[1][1][...] = in_refs[2][1][...]

        pltpu.emit_pipeline(
            inner_body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=(
                [
                    (pl.BlockSpec((128,), lambda i: (i,)),),
                    (),
                    (pl.BlockSpec((128,), lambda i: (i,)), pl.BlockSpec((128,), lambda i: (i,))),
                ],
            ),
            out_specs=(
                [(), (pl.BlockSpec((128,), lambda i: (i,)), pl.BlockSpec((128,), lambda i: (i,)))],
            ),
        )(outer_in, outer_out)

    @pl.kernel(out_type=out_type, mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores))
    def run_kernel(x_ref, y_ref, z_ref, out_xy_ref, out_z_ref):
        in_specs = (
            [
                (pl.BlockSpec((256,), lambda i: (i,)),),
                (),
                (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,))),
            ],
        )
        out_specs = (
            [(), (pl.BlockSpec((256,), lambda i: (i,)), pl.BlockSpec((256,), lambda i: (i,)))],
        )

        pltpu.emit_pipeline(
            outer_body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=in_specs,
            out_specs=out_specs,
        )([(x_ref,), (), (y_ref, z_ref)], [out_xy_ref, out_z_ref])

    return _non_flat_args(run_kernel)
