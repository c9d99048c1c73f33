"""tests/pallas/tpu_pallas_pipeline_test.py: ``emit_pipeline`` inside ``pl.kernel`` / ``core_map``.
Part 1 of 3."""

from __future__ import annotations

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _UP, _add, _arange_i32, _i32, _ints, _params
from minipallas.lowering.compat.jax_private import config as jax_config

# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_pallas_pipeline_test.py: emit_pipeline inside pl.kernel / core_map
# --------------------------------------------------------------------------------------------

_PIPE = _UP + "tpu_pallas_pipeline_test.py"

# upstream's ``...PrimitiveTest`` subclasses rerun each class under
# ``config.use_emit_pipeline_primitive(True)`` (tpu_pallas_pipeline_test.py:2259)
_PRIMITIVE_CLASS = {
    "PallasCallPipelinePoisonTest": "PallasCallPipelinePoisonPrimitiveTest",
    "PallasCallMultipleBufferedPipelineTest": "PallasCallMultipleBufferedPipelinePrimitiveTest",
    "PallasCallMegacoreTest": "PallasCallMegacorePrimitiveTest",
    "PallasCallBoundedSliceIndexingTest": "PallasCallBoundedSliceIndexingPrimitiveTest",
    "PallasCallPipelineTransformedRefsTest": "PallasCallPipelineTransformedRefsPrimitiveTest",
    "PallasCallPipelineNonFlatArgsTest": "PallasCallPipelineNonFlatArgsPrimitiveTest",
}


def _with_pipeline_primitive(build):
    """``build`` with its ``f`` traced under ``jax_use_emit_pipeline_primitive``."""

    def wrapped():
        f, args = build()

        def g(*a):
            with jax_config.use_emit_pipeline_primitive(True):
                return f(*a)

        return g, args

    return wrapped


def _pipe_add(cls, test, params, cores, build, reference, *, line, what, expect="ok", only=None):
    """Adds ``cls.test`` and its ``...PrimitiveTest`` twin (or only one, ``only`` in
    {"plain", "primitive"})."""
    p = params[:-1] + f",cores={cores}]" if params else _params(cores=cores)
    if only != "primitive":
        _add(
            f"{cls}.{test}{p}",
            cores,
            build,
            reference,
            expect=expect,
            what=f"{what}; {_PIPE}:{line}",
        )
    if only != "plain":
        _add(
            f"{_PRIMITIVE_CLASS[cls]}.{test}{p}",
            cores,
            _with_pipeline_primitive(build),
            reference,
            expect=expect,
            what=f"{what} (with jax_use_emit_pipeline_primitive); {_PIPE}:{line}",
        )


def _pipe_poison(cores, dtype, no_pipelining):
    def pipeline_body(x_ref, o_ref):
        o_ref[:4, :] = x_ref[:4, :]

    @pl.kernel(
        out_type=jax.ShapeDtypeStruct((8, 128), dtype),
        mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores),
    )
    def kernel(x_hbm_ref, o_hbm_ref):
        pltpu.emit_pipeline(
            pipeline_body,
            grid=(1,),
            in_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            out_specs=pl.BlockSpec((8, 128), lambda i: (0, 0)),
            no_pipelining=no_pipelining,
        )(x_hbm_ref, o_hbm_ref)

    def f(x):
        # upstream: @jtu.with_config(jax_pallas_poison_buffers=True) on the class
        with jax_config.jax_pallas_poison_buffers(True):
            return kernel(x)

    return f, (np.ones((8, 128), dtype=dtype),)


def _pipe_poison_ref(x):
    out = x.copy()
    if jnp.issubdtype(x.dtype, jnp.floating):
        out[4:, :] = np.nan
    else:
        out[4:, :] = np.iinfo(x.dtype).min
    return (out,)


def _pipe_matmul_megacore(cores, x_buffer_count, y_buffer_count, out_buffer_count):
    block_shape = (128, 128)

    def matmul_kernel(x_hbm_ref, y_hbm_ref, o_hbm_ref):
        def pipeline_step(x_ref, y_ref, o_ref):
            @pl.when(pl.program_id(2) == 0)
            def _():
                o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)

            o_ref[...] += x_ref[...] @ y_ref[...]

        pltpu.emit_pipeline(
            pipeline_step,
            core_axis_name="core",
            grid=(
                512 // block_shape[0],
                512 // block_shape[0],
                512 // block_shape[0],
            ),
            dimension_semantics=(pltpu.PARALLEL, pltpu.PARALLEL, pltpu.ARBITRARY),
            in_specs=[
                pl.BlockSpec(
                    block_shape,
                    lambda i, j, k: (i, k),
                    pipeline_mode=pl.Buffered(buffer_count=x_buffer_count),
                ),
                pl.BlockSpec(
                    block_shape,
                    lambda i, j, k: (k, j),
                    pipeline_mode=pl.Buffered(buffer_count=y_buffer_count),
                ),
            ],
            out_specs=pl.BlockSpec(
                block_shape,
                lambda i, j, k: (i, j),
                pipeline_mode=pl.Buffered(buffer_count=out_buffer_count),
            ),
        )(x_hbm_ref, y_hbm_ref, o_hbm_ref)

    @jax.jit
    def fn(x, y):
        x_ref = jax.new_ref(x)
        y_ref = jax.new_ref(y)
        o_ref = jax.empty_ref(jax.ShapeDtypeStruct(x.shape, jnp.float32))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            matmul_kernel(x_ref, y_ref, o_ref)

        return jax.freeze(o_ref)

    return fn, (_ints((512, 512), 0), _ints((512, 512), 1))


def _pipe_single_buffered_output(cores):
    def body(o_ref):
        @pl.when(pl.program_id(1) == 0)
        def _():
            o_ref[...] = jnp.zeros_like(o_ref)

        o_ref[...] += 1.0

    spec = pl.BlockSpec(
        (1, 8, 128),
        lambda b, _: (b, 0, 0),
        memory_space=pltpu.VMEM,
        pipeline_mode=pl.Buffered(buffer_count=1),
    )

    @pl.kernel(
        out_type=jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        mesh=pltpu.create_tensorcore_mesh("core", num_cores=cores),
    )
    def run_kernel(o_ref):
        pltpu.emit_pipeline(
            body,
            grid=(2, 3),
            out_specs=(spec,),
        )(o_ref)

    return run_kernel, ()


def _pipe_nondivisible_dynamic(cores):
    def mul_pipeline(x_ref, y_ref):
        y_ref[...] = x_ref[...] * 2

    def mul_kernel(i, x_ref, y_ref):
        pltpu.emit_pipeline(
            mul_pipeline,
            grid=(i, 5),
            in_specs=[
                pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            ],
            out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            core_axis_name="core",
            dimension_semantics=(pltpu.PARALLEL, pltpu.PARALLEL),
        )(x_ref, y_ref)

    @jax.jit
    def func(x, i):
        x_ref = jax.new_ref(x)
        y_ref = jax.empty_ref(jax.ShapeDtypeStruct.like(x))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            mul_kernel(i, x_ref, y_ref)

        return jax.freeze(y_ref)

    return func, (_ints((640, 640), 0), _i32(5))


_P, _A = pltpu.PARALLEL, pltpu.ARBITRARY

_PARTITION_GRID_PARAMS = [
    # 1D scenarios
    ((8,), (_P,), None),
    ((5,), (_P,), None),
    ((8,), (_P,), 0),
    ((5,), (_P,), 0),
    # 2D scenarios (1 Parallel, 1 Arbitrary)
    ((8, 3), (_P, _A), None),
    ((5, 3), (_P, _A), None),
    ((8, 3), (_P, _A), 0),
    ((5, 3), (_P, _A), 0),
    ((2, 7), (_A, _P), 1),
    # 2D Two Parallel (Static)
    ((8, 8), (_P, _P), None),
    ((5, 7), (_P, _P), None),
    ((1, 1), (_P, _P), None),
]


def _pipe_can_partition_grid(cores, grid_vals, dimension_semantics, dynamic_grid_index):
    def mul_kernel(grid, o_vmem_ref):
        def mul_pipeline():
            o_vmem_ref[...] += 1

        pltpu.emit_pipeline(
            mul_pipeline,
            grid=grid,
            out_specs=[],
            core_axis_name="core",
            dimension_semantics=dimension_semantics,
        )()

    num_cores = cores  # upstream: pltpu.get_tpu_info().num_cores

    @jax.jit
    def func(*args):
        o_ref = jax.empty_ref(jax.ShapeDtypeStruct((num_cores, 8, 128), jnp.int32))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            def run(o_vmem_ref):
                o_vmem_ref[...] = jnp.zeros_like(o_vmem_ref)
                if dynamic_grid_index is None:
                    grid = grid_vals
                else:
                    grid = list(grid_vals)
                    grid[dynamic_grid_index] = args[0]
                    grid = tuple(grid)
                mul_kernel(grid, o_vmem_ref)
                pltpu.sync_copy(o_vmem_ref, o_ref.at[jax.lax.axis_index("core")])

            pl.run_scoped(run, pltpu.VMEM((8, 128), jnp.int32))

        return jax.freeze(o_ref)

    if dynamic_grid_index is not None:
        return func, (_i32(grid_vals[dynamic_grid_index]),)
    return func, ()


def _pipe_can_partition_grid_ref(num_cores, grid_vals, dimension_semantics):
    """Upstream's expected value (it mirrors pipeline._partition_grid)."""
    parallel_dims = [i for i, d in enumerate(dimension_semantics) if d == pltpu.PARALLEL]
    div_dims = [
        i for i in parallel_dims if isinstance(grid_vals[i], int) and grid_vals[i] % num_cores == 0
    ]
    if div_dims:
        partition_dim = min(div_dims)
    else:
        static_parallel_dims = [
            i for i in parallel_dims if isinstance(grid_vals[i], int) and grid_vals[i] > 1
        ]
        if not static_parallel_dims:
            partition_dim = parallel_dims[0]  # Must be dynamic (if mixed)
        else:
            max_val = max(grid_vals[i] for i in static_parallel_dims)
            partition_dim = min(i for i in static_parallel_dims if grid_vals[i] == max_val)
    dim_size = grid_vals[partition_dim]
    other_dims_prod = int(np.prod([v for i, v in enumerate(grid_vals) if i != partition_dim]))
    q, r = divmod(dim_size, num_cores)
    expected = np.empty((num_cores, 8, 128), np.int32)
    for c in range(num_cores):
        count = q + (1 if c < r else 0)
        expected[c] = count * other_dims_prod

    def ref(*args):
        return (expected,)

    return ref


def _pipe_megacore_mul(cores):
    def matmul_pipeline(x_ref, y_ref):
        y_ref[...] = x_ref[...] * 2

    def matmul_kernel(x_ref, y_ref):
        pltpu.emit_pipeline(
            matmul_pipeline,
            grid=(4, 4),
            in_specs=[
                pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            ],
            out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
            core_axis_name="core",
            dimension_semantics=(pltpu.ARBITRARY, pltpu.PARALLEL),
        )(x_ref, y_ref)

    @jax.jit
    def func(x):
        x_ref = jax.new_ref(x)
        y_ref = jax.empty_ref(jax.ShapeDtypeStruct.like(x))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            matmul_kernel(x_ref, y_ref)

        return jax.freeze(y_ref)

    return func, (_ints((512, 512), 0),)


def _pipe_megacore_matmul(cores, m, k, n, bm, bk, bn):
    def matmul_pipeline(x_ref, y_ref, z_ref):
        @pl.when(pl.program_id(2) == 0)
        def _():
            z_ref[...] = jnp.zeros_like(z_ref)

        z_ref[...] += x_ref[...] @ y_ref[...]

    def matmul_kernel(x_ref, y_ref, z_ref, *, bm, bk, bn):
        m, k = x_ref.shape
        _, n = y_ref.shape
        assert k % bk == 0
        pltpu.emit_pipeline(
            matmul_pipeline,
            grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(k, bk)),
            in_specs=[
                pl.BlockSpec((bm, bk), lambda i, j, k: (i, k)),
                pl.BlockSpec((bk, bn), lambda i, j, k: (k, j)),
            ],
            out_specs=pl.BlockSpec((bm, bn), lambda i, j, k: (i, j)),
            core_axis_name="core",
            dimension_semantics=(pltpu.PARALLEL, pltpu.PARALLEL, pltpu.ARBITRARY),
        )(x_ref, y_ref, z_ref)

    @jax.jit
    def func(x, y):
        x_ref = jax.new_ref(x)
        y_ref = jax.new_ref(y)
        o_ref = jax.empty_ref(jax.ShapeDtypeStruct((m, n), jnp.float32))
        mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        @pl.core_map(mesh)
        def _():
            matmul_kernel(x_ref, y_ref, o_ref, bm=bm, bk=bk, bn=bn)

        return jax.freeze(o_ref)

    return func, (_ints((m, k), 42), _ints((k, n), 43))


def _pipe_axis_queries(cores):
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)
    grid_size = 8

    def kernel(o_ref):
        def pipeline_body(o_smem_ref):
            pid = pl.program_id(0)
            nprogs = pl.num_programs(0)
            asize = jax.lax.axis_size("core")
            aindex = jax.lax.axis_index("core")
            o_smem_ref[0], o_smem_ref[1] = pid, nprogs
            o_smem_ref[2], o_smem_ref[3] = asize, aindex

        pltpu.emit_pipeline(
            pipeline_body,
            grid=(grid_size,),
            out_specs=pl.BlockSpec((None, 128), lambda i: (i, 0), memory_space=pltpu.SMEM),
            core_axis_name="core",
            dimension_semantics=(pltpu.PARALLEL,),
        )(o_ref)

    @jax.jit
    def func():
        o_ref = jax.empty_ref(jax.ShapeDtypeStruct((grid_size, 128), jnp.int32))

        @pl.core_map(mesh)
        def _():
            kernel(o_ref)

        return jax.freeze(o_ref)

    def f():
        # upstream asserts columns 0..3 only; the rest of each SMEM block is never written
        return (func()[:, :4],)

    return f, ()


def _pipe_axis_queries_ref(num_cores):
    grid_size = 8
    local_nprogs = grid_size // num_cores
    rows = [[i, local_nprogs, num_cores, i // local_nprogs] for i in range(grid_size)]
    out = np.asarray(rows, np.int32)
    return lambda: (out,)


def _pipe_bounded_slice_invalid_index(cores):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def main(refs):
        x_ref, y_ref = refs

        @pl.core_map(pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def _():
            pltpu.emit_pipeline(
                kernel,
                grid=(1,),
                in_specs=(
                    pl.BlockSpec(
                        (pl.BoundedSlice(8), 8, 128),
                        lambda i: (0, 0, 0),  # first index needs to be a pl.ds
                    ),
                ),
                out_specs=pl.BlockSpec(
                    (8, 8, 128),
                    lambda i: (0, 0, 0),
                ),
            )(x_ref, y_ref)

    @jax.jit
    def f(x):
        y = jnp.ones((8, 8, 128), dtype=jnp.int32)
        _, y = pl.run_state(main)((x, y))
        return y

    return f, (_arange_i32(16, 8, 128),)


def _pipe_bounded_slice_static(cores):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    def main(refs):
        x_ref, y_ref = refs

        @pl.core_map(pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def _():
            pltpu.emit_pipeline(
                kernel,
                grid=(1,),
                in_specs=(
                    pl.BlockSpec(
                        (pl.BoundedSlice(8), 8, 128),
                        lambda i: (pl.ds(4, 8), 0, 0),
                    ),
                ),
                out_specs=pl.BlockSpec(
                    (8, 8, 128),
                    lambda i: (0, 0, 0),
                ),
            )(x_ref, y_ref)

    @jax.jit
    def f(x):
        y = jnp.ones((8, 8, 128), dtype=jnp.int32)
        _, y = pl.run_state(main)((x, y))
        return y

    return f, (_arange_i32(16, 8, 128),)
