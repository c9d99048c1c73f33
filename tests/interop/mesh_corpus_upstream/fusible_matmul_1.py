"""tests/pallas/tpu_fusible_matmul_test.py and tpu_fusible_matmul_with_stateful_fusions_test.py.
Part 1 of 4."""

from __future__ import annotations

import enum
import functools
from typing import Any

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import fuser
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _UP

# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_fusible_matmul_test.py and tpu_fusible_matmul_with_stateful_fusions_test.py
# (the CORE_MAP and KERNEL implementations; the PALLAS_CALL one uses no mesh)
# --------------------------------------------------------------------------------------------

_FM = _UP + "tpu_fusible_matmul_test.py"
_FMS = _UP + "tpu_fusible_matmul_with_stateful_fusions_test.py"

# upstream's run_matmul is jit_no_excess_precision = partial(jax.jit, compiler_options=
# {'xla_allow_excess_precision': False}); jax refuses compiler_options on a jit traced inside
# another trace (make_jaxpr), and the option only tunes XLA's compilation, so these use jax.jit.


class KernelImpl(enum.Enum):
    PALLAS_CALL = enum.auto()  # upstream's third implementation, not ported (no mesh)
    CORE_MAP = enum.auto()
    KERNEL = enum.auto()


# Upstream's helpers, verbatim but for: the PALLAS_CALL branch dropped, and num_cores threaded
# to create_tensorcore_mesh('core'). matmul_kernel (line 42) is the same in both files;
# _fm_plain_impl and _fm_plain are tpu_fusible_matmul_test.py:84 and :293, _fm_stateful_impl
# and _fm_stateful tpu_fusible_matmul_with_stateful_fusions_test.py:84 and :372.


def _fm_matmul_kernel(
    x_scalar_prefetch,
    y_scalar_prefetch,
    z_scalar_prefetch,
    x_value_refs,
    y_value_refs,
    z_value_refs,
    o_ref,
    acc_ref,
    *,
    x_fn: Any,
    y_fn: Any,
    z_fn: Any,
    out_dtype: jnp.dtype,
):
    @pl.when(pl.program_id(2) == 0)
    def _():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    pids = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    scalar_prefetch = (x_scalar_prefetch, y_scalar_prefetch, z_scalar_prefetch)

    x_values = jax.tree.map(lambda ref: ref.get(), x_value_refs)
    x = x_fn(pids, scalar_prefetch, x_values)
    y_values = jax.tree.map(lambda ref: ref.get(), y_value_refs)
    y = y_fn(pids, scalar_prefetch, y_values)
    acc_ref[...] += jnp.dot(x, y, preferred_element_type=jnp.float32)

    @pl.when(pl.program_id(2) == pl.num_programs(2) - 1)
    def _():
        acc = acc_ref[...].astype(out_dtype)
        z_values = jax.tree.map(lambda ref: ref.get(), z_value_refs)
        out = z_fn(pids, scalar_prefetch, z_values, acc)
        jax.tree.map(lambda ref, x: ref.set(x), o_ref, out)


def _fm_plain_impl(
    x: fuser.Fusion[[], jax.Array],
    y: fuser.Fusion[[], jax.Array],
    z: fuser.Fusion[[jax.Array], jax.Array] | None,
    *,
    bm: int,
    bk: int,
    bn: int,
    interpret: bool,
    debug: bool,
    impl: KernelImpl,
    num_cores: int,
) -> jax.Array:
    m, k = x.shape
    k_, n = y.shape
    out_dtype = jnp.float32
    z_type = jax.ShapeDtypeStruct((m, n), dtype=out_dtype)
    if not z:
        z = lambda x: x  # noqa: E731
    if k != k_:
        raise ValueError(f"X and Y shapes must be compatible. Got {k} != {k_}")

    assert m % bm == 0
    assert k % bk == 0
    assert n % bn == 0
    grid = (m // bm, n // bn, k // bk)

    def x_index_map(i, j, k, *_):
        del j
        return i, k

    x_block_spec = pl.BlockSpec(block_shape=(bm, bk), index_map=x_index_map)

    def y_index_map(i, j, k, *_):
        del i
        return k, j

    y_block_spec = pl.BlockSpec(block_shape=(bk, bn), index_map=y_index_map)

    def z_index_map(i, j, k, *_):
        del k
        return i, j

    z_block_spec = pl.BlockSpec(block_shape=(bm, bn), index_map=z_index_map)
    dimension_semantics = (pltpu.PARALLEL, pltpu.PARALLEL, pltpu.ARBITRARY)

    z_out_type = jax.eval_shape(z, z_type)

    # First thing we do is extract the values from the fusions. These will be
    # values that are passed in directly and values that are passed in via
    # scalar prefetch.
    x_fn, x_values, x_scalar_prefetch = fuser.get_fusion_values(x)
    y_fn, y_values, y_scalar_prefetch = fuser.get_fusion_values(y)
    z_fn, z_values, z_scalar_prefetch = fuser.get_fusion_values(z, z_type)

    # We construct the set of scalar prefetch arguments that will be passed to
    # the kernel.
    scalar_prefetch = (x_scalar_prefetch, y_scalar_prefetch, z_scalar_prefetch)

    x_fn, (x_value_block_specs,), _ = fuser.pull_block_spec(
        x_fn,
        x_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(0),
        grid_len=len(grid),
    )(x_values)

    y_fn, (y_value_block_specs,), _ = fuser.pull_block_spec(
        y_fn,
        y_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(1),
        grid_len=len(grid),
    )(y_values)

    z_out_block_spec = fuser.push_block_spec(z, z_block_spec)(z_type)
    z_fn, (z_value_block_specs, _), _ = fuser.pull_block_spec(
        z_fn,
        z_out_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(2),
        grid_len=len(grid),
    )(z_values, z_type)

    # TODO(sharadmv): This is a hack. We should be able to pass in the scalar
    # prefetch arguments directly to the kernel but don't have Mosaic support atm.
    scalar_prefetch = jax.tree.map(lambda x: x[None], scalar_prefetch)

    if impl == KernelImpl.CORE_MAP:
        out = jax.tree.map(jnp.empty_like, z_out_type)

        (x_values_refs, y_values_refs, z_values_refs, scalar_prefetch_refs, out_ref) = jax.tree.map(
            jax.new_ref, (x_values, y_values, z_values, scalar_prefetch, out)
        )

        @pl.core_map(
            pltpu.create_tensorcore_mesh("core", num_cores=num_cores),
            interpret=interpret,
            debug=debug,
        )
        def _():
            def _f(acc_ref, scalar_prefetch_smem_refs):
                pltpu.sync_copy(scalar_prefetch_refs, scalar_prefetch_smem_refs)

                def block_spec_with_prefetch(bs):
                    if bs is pl.no_block_spec:
                        return pl.BlockSpec()
                    if bs.index_map is None:
                        return bs
                    return bs.replace(
                        index_map=lambda *args: bs.index_map(*args, *scalar_prefetch_smem_refs)
                    )

                in_specs_ = jax.tree.map(
                    block_spec_with_prefetch,
                    (x_value_block_specs, y_value_block_specs, z_value_block_specs),
                )
                z_out_block_spec_ = jax.tree.map(block_spec_with_prefetch, z_out_block_spec)
                pltpu.emit_pipeline(
                    functools.partial(
                        _fm_matmul_kernel,
                        *scalar_prefetch_smem_refs,
                        acc_ref=acc_ref,
                        x_fn=x_fn,
                        y_fn=y_fn,
                        z_fn=z_fn,
                        out_dtype=out_dtype,
                    ),
                    grid=grid,
                    in_specs=in_specs_,
                    out_specs=[z_out_block_spec_],
                    core_axis_name="core",
                    dimension_semantics=dimension_semantics,
                )(x_values_refs, y_values_refs, z_values_refs, out_ref)

            pl.run_scoped(
                _f,
                pltpu.VMEM((bm, bn), jnp.float32),
                jax.tree.map(pltpu.SMEM.like, scalar_prefetch),
            )

        return jax.tree.map(lambda ref: ref.get(), out_ref)

    elif impl == KernelImpl.KERNEL:

        def body(
            x_values_refs,
            y_values_refs,
            z_values_refs,
            scalar_prefetch_refs,
            out_ref,
            acc_vmem_ref,
            scalar_prefetch_smem_refs,
        ):
            pltpu.sync_copy(scalar_prefetch_refs, scalar_prefetch_smem_refs)

            def block_spec_with_prefetch(bs):
                if bs is pl.no_block_spec:
                    return pl.BlockSpec()
                if bs.index_map is None:
                    return bs
                return bs.replace(
                    index_map=lambda *args: bs.index_map(*args, *scalar_prefetch_smem_refs)
                )

            in_specs_ = jax.tree.map(
                block_spec_with_prefetch,
                (x_value_block_specs, y_value_block_specs, z_value_block_specs),
            )
            z_out_block_spec_ = jax.tree.map(block_spec_with_prefetch, z_out_block_spec)
            pltpu.emit_pipeline(
                functools.partial(
                    _fm_matmul_kernel,
                    *scalar_prefetch_smem_refs,
                    acc_ref=acc_vmem_ref,
                    x_fn=x_fn,
                    y_fn=y_fn,
                    z_fn=z_fn,
                    out_dtype=out_dtype,
                ),
                grid=grid,
                in_specs=in_specs_,
                out_specs=(z_out_block_spec_,),
                core_axis_name="core",
                dimension_semantics=dimension_semantics,
            )(x_values_refs, y_values_refs, z_values_refs, out_ref)

        return pl.kernel(
            body,
            out_type=(z_out_type,),
            mesh=pltpu.create_tensorcore_mesh("core", num_cores=num_cores),
            scratch_types=[
                pltpu.VMEM((bm, bn), jnp.float32),
                jax.tree.map(pltpu.SMEM.like, scalar_prefetch),
            ],
            interpret=interpret,
            debug=debug,
        )(x_values, y_values, z_values, scalar_prefetch)[0]

    else:
        raise ValueError(f"Unsupported impl: {impl}")


def _fm_plain(
    x: jax.Array,
    y: jax.Array,
    *,
    bm: int = 128,
    bk: int = 128,
    bn: int = 128,
    debug: bool = False,
    interpret: bool = False,
    impl: KernelImpl = KernelImpl.CORE_MAP,
    num_cores: int = 2,
) -> jax.Array:
    return fuser.fusible(
        functools.partial(
            _fm_plain_impl,
            bm=bm,
            bk=bk,
            bn=bn,
            interpret=interpret,
            debug=debug,
            impl=impl,
            num_cores=num_cores,
        )
    )(x, y)
