"""tests/pallas/tpu_pallas_pipeline_test.py: ``emit_pipeline`` inside ``pl.kernel`` / ``core_map``.
Part 3 of 3."""

from __future__ import annotations

import functools

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _mm, _params
from mesh_corpus_upstream.pipeline_1 import (
    _P,
    _PARTITION_GRID_PARAMS,
    _pipe_add,
    _pipe_axis_queries,
    _pipe_axis_queries_ref,
    _pipe_bounded_slice_invalid_index,
    _pipe_bounded_slice_static,
    _pipe_can_partition_grid,
    _pipe_can_partition_grid_ref,
    _pipe_matmul_megacore,
    _pipe_megacore_matmul,
    _pipe_megacore_mul,
    _pipe_nondivisible_dynamic,
    _pipe_poison,
    _pipe_poison_ref,
    _pipe_single_buffered_output,
)
from mesh_corpus_upstream.pipeline_2 import (
    _NON_FLAT_OUT_TYPE,
    _non_flat_args,
    _pipe_bounded_slice_dynamic,
    _pipe_nested_bitcast_ref,
    _pipe_nested_uneven_ref,
    _pipe_non_flat_args,
    _pipe_non_flat_args_and_scratch,
    _pipe_non_flat_args_nested,
    _pipe_transformed_refs_as_inputs,
    _pipe_transformed_refs_as_inputs_nested,
    _pipe_transformed_refs_as_inputs_nested_3level,
    _pipe_transformed_refs_as_inputs_nested_bitcast,
    _pipe_transformed_refs_as_inputs_nested_hbm_passthrough,
    _pipe_transformed_refs_as_inputs_nested_mixed_grids,
    _pipe_transformed_refs_as_inputs_nested_sequential,
    _pipe_transformed_refs_as_inputs_nested_uneven,
    _tr_grid,
)


def _pipe_non_flat_args_and_scratch_nested(cores, dynamic_grid):
    out_type = _NON_FLAT_OUT_TYPE

    def outer_body(outer_in, outer_out):
        outer_scratch1 = jax.empty_ref(
            jax.ShapeDtypeStruct((256,), jnp.float32), memory_space=pltpu.VMEM
        )
        outer_scratch2 = jax.empty_ref(
            jax.ShapeDtypeStruct((256,), jnp.float32), memory_space=pltpu.VMEM
        )
        outer_scratch2_list = [outer_scratch2]
        outer_scratch1[...] = outer_in[0][0][...] + outer_in[2][0][...]
        outer_scratch2_list[0][...] = outer_in[2][1][...]

        def inner_body(in_refs, out_refs):
            inner_scratch = jax.empty_ref(
                jax.ShapeDtypeStruct((128,), jnp.float32), memory_space=pltpu.VMEM
            )
            inner_scratch[...] = in_refs[0][0][...]
            out_refs[1][0][...] = inner_scratch[...]
            out_refs[1][1][...] = in_refs[2][0][...]

        pltpu.emit_pipeline(
            inner_body,
            grid=_tr_grid(dynamic_grid, 2),
            in_specs=(
                [
                    (pl.BlockSpec((128,), lambda i: (i,)),),
                    (),
                    (pl.BlockSpec((128,), lambda i: (i,)),),
                ],
            ),
            out_specs=(
                [(), (pl.BlockSpec((128,), lambda i: (i,)), pl.BlockSpec((128,), lambda i: (i,)))],
            ),
        )([(outer_scratch1,), (), (outer_scratch2_list[0],)], outer_out)

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


def _cases_pipeline():
    for cores in (2, 1):
        c = cores
        cls = "PallasCallPipelinePoisonTest"
        for dtype in ("float32", "int32", "int8", "float8_e4m3fn"):
            for no_pipelining in (False, True):
                _pipe_add(
                    cls,
                    "test_poison_buffers",
                    _params(dtype=dtype, no_pipelining=no_pipelining),
                    c,
                    functools.partial(_pipe_poison, c, getattr(jnp, dtype), no_pipelining),
                    _pipe_poison_ref,
                    line=528,
                    what="emit_pipeline writes half of its output block; the other half is the "
                    "poison a VMEM buffer gets under jax_pallas_poison_buffers=True (f sets it "
                    "around its call; it acts when Mosaic lowers): NaN for floats (upstream "
                    "asserts isnan, any payload), iinfo.min for ints",
                )
        cls = "PallasCallMultipleBufferedPipelineTest"
        for xb in (2, 4):
            for yb in (2, 4):
                _pipe_add(
                    cls,
                    "test_matmul_megacore",
                    _params(x_buffer_count=xb, y_buffer_count=yb, out_buffer_count=2),
                    c,
                    functools.partial(_pipe_matmul_megacore, c, xb, yb, 2),
                    lambda x, y: (_mm(x, y),),
                    line=665,
                    what="512^3 matmul, emit_pipeline with pl.Buffered(n) specs and "
                    "core_axis_name='core' inside a core_map over new_ref/empty_ref refs",
                )
        _pipe_add(
            cls,
            "test_single_buffered_output",
            "",
            c,
            functools.partial(_pipe_single_buffered_output, c),
            lambda: (np.full((2, 8, 128), 3, np.float32),),
            line=876,
            what="a Buffered(1) VMEM output block accumulated over the 3-step inner grid axis",
        )
        cls = "PallasCallMegacoreTest"
        _pipe_add(
            cls,
            "test_can_partition_nondivisible_grid_with_dynamic_dimensions",
            "",
            c,
            functools.partial(_pipe_nondivisible_dynamic, c),
            lambda x, i: (x * 2,),
            line=929,
            what="grid (i, 5) with traced i = 5 split over the core axis, y = 2x",
        )
        for grid_vals, sems, dyn in _PARTITION_GRID_PARAMS:
            p = _params(
                grid_vals="x".join(map(str, grid_vals)),
                dimension_semantics="/".join("P" if s == _P else "A" for s in sems),
                dynamic_grid_index=dyn,
            )
            _pipe_add(
                cls,
                "test_can_partition_grid",
                p,
                c,
                functools.partial(_pipe_can_partition_grid, c, grid_vals, sems, dyn),
                _pipe_can_partition_grid_ref(c, grid_vals, sems),
                line=1027,
                what="each core counts the grid steps emit_pipeline gives it (the split of a "
                "parallel axis over core_axis_name); upstream mirrors _partition_grid",
            )
        _pipe_add(
            cls,
            "test_megacore_mul",
            "",
            c,
            functools.partial(_pipe_megacore_mul, c),
            lambda x: (x * 2,),
            line=1109,
            what="y = 2x through a (4, 4) grid whose second axis is split over the cores",
        )
        for m, k, n, bm, bk, bn in (
            (1024, 1024, 1024, 256, 512, 256),
            (768, 1024, 1024, 256, 512, 256),
            (1024, 1024, 768, 256, 512, 256),
            (768, 1024, 768, 256, 512, 256),
        ):
            _pipe_add(
                cls,
                "test_megacore_matmul",
                _params(m=m, k=k, n=n, bm=bm, bk=bk, bn=bn),
                c,
                functools.partial(_pipe_megacore_matmul, c, m, k, n, bm, bk, bn),
                lambda x, y: (_mm(x, y),),
                line=1147,
                what="blocked matmul, (i, j) parallel over the core axis",
            )
        _pipe_add(
            cls,
            "test_pipeline_axis_queries",
            "",
            c,
            functools.partial(_pipe_axis_queries, c),
            _pipe_axis_queries_ref(c),
            line=1189,
            what="program_id, num_programs, axis_size, axis_index seen inside a core-split "
            "emit_pipeline, written to SMEM blocks (f returns the 4 columns upstream checks)",
        )
        cls = "PallasCallBoundedSliceIndexingTest"
        _pipe_add(
            cls,
            "test_block_spec_bounded_slice_invalid_index",
            "",
            c,
            functools.partial(_pipe_bounded_slice_invalid_index, c),
            None,
            expect="raises_at_trace:ValueError:Must return a (pl\\.)?ds from the index_map for a "
            "BoundedSlice dimension.|when it should be pl.Slice",
            line=1327,
            what="a BoundedSlice block dimension whose index_map returns an int",
        )
        _pipe_add(
            cls,
            "test_block_spec_bounded_slice_static",
            "",
            c,
            functools.partial(_pipe_bounded_slice_static, c),
            lambda x: (x[4:12],),
            line=1367,
            what="a BoundedSlice(8) block at pl.ds(4, 8) copies rows 4..11",
        )
        _pipe_add(
            cls,
            "test_block_spec_bounded_slice_dynamic",
            "",
            c,
            functools.partial(_pipe_bounded_slice_dynamic, c),
            lambda x, slices: (x,),
            line=1408,
            what="BoundedSlice(16) blocks of varying size from an SMEM table cover x",
        )
        cls = "PallasCallPipelineTransformedRefsTest"
        for dyn in (True, False):
            dp = _params(dynamic_grid=dyn)
            for test, build, ref, line, what, only in (
                (
                    "test_transformed_refs_as_inputs",
                    _pipe_transformed_refs_as_inputs,
                    lambda x: (x[1],),
                    1733,
                    "emit_pipeline over x_ref.at[1]",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested",
                    _pipe_transformed_refs_as_inputs_nested,
                    lambda x: (x[1],),
                    1758,
                    "nested emit_pipelines over x_ref.at[1]",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested_uneven",
                    _pipe_transformed_refs_as_inputs_nested_uneven,
                    _pipe_nested_uneven_ref,
                    1789,
                    "the inner pipeline runs over .at[0:128].at[pl.ds(0, 64)] of the outer block",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested_bitcast",
                    _pipe_transformed_refs_as_inputs_nested_bitcast,
                    _pipe_nested_bitcast_ref,
                    1826,
                    "the inner pipeline runs over int16 bitcasts of float32 blocks (upstream "
                    "skips it without the primitive)",
                    "primitive",
                ),
                (
                    "test_transformed_refs_as_inputs_nested_3level",
                    _pipe_transformed_refs_as_inputs_nested_3level,
                    lambda x: (x[1],),
                    1867,
                    "three nested emit_pipelines (upstream skips it without the primitive)",
                    "primitive",
                ),
                (
                    "test_transformed_refs_as_inputs_nested_hbm_passthrough",
                    _pipe_transformed_refs_as_inputs_nested_hbm_passthrough,
                    lambda x, y: (x[1] + 1,),
                    1909,
                    "the outer body copies y to a jax.empty_ref VMEM buffer the inner body adds",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested_mixed_grids",
                    _pipe_transformed_refs_as_inputs_nested_mixed_grids,
                    lambda x: (x[1],),
                    1946,
                    "a 2-D outer grid around a 1-D inner grid",
                    None,
                ),
                (
                    "test_transformed_refs_as_inputs_nested_sequential",
                    _pipe_transformed_refs_as_inputs_nested_sequential,
                    lambda x: (x[1] * 2 + 1,),
                    1979,
                    "two inner pipelines in sequence through a jax.empty_ref VMEM temporary",
                    None,
                ),
            ):
                _pipe_add(
                    cls,
                    test,
                    dp,
                    c,
                    functools.partial(build, c, dyn),
                    ref,
                    line=line,
                    what=what,
                    only=only,
                )
        cls = "PallasCallPipelineNonFlatArgsTest"
        for dyn in (True, False):
            dp = _params(dynamic_grid=dyn)
            for test, build, line, what in (
                ("test_non_flat_args", _pipe_non_flat_args, 2032, "nested list/tuple refs"),
                (
                    "test_non_flat_args_and_scratch",
                    _pipe_non_flat_args_and_scratch,
                    2061,
                    "nested refs, jax.empty_ref scratch in the body",
                ),
                (
                    "test_non_flat_args_nested",
                    _pipe_non_flat_args_nested,
                    2100,
                    "nested refs through two pipelines",
                ),
                (
                    "test_non_flat_args_and_scratch_nested",
                    _pipe_non_flat_args_and_scratch_nested,
                    2139,
                    "nested refs and scratch in both pipelines",
                ),
            ):
                _pipe_add(
                    cls,
                    test,
                    dp,
                    c,
                    functools.partial(build, c, dyn),
                    lambda x, y, z: (x + y, z),
                    line=line,
                    what="emit_pipeline over pytrees of refs with empty tuples, out_type "
                    f"[(), (a, b)] (f returns a and b): {what}",
                )
