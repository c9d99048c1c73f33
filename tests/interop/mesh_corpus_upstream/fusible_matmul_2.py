"""tests/pallas/tpu_fusible_matmul_test.py and tpu_fusible_matmul_with_stateful_fusions_test.py.
Part 2 of 4."""

from __future__ import annotations

import functools

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import fuser
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _i32, _ints, _mm
from mesh_corpus_upstream.fusible_matmul_1 import KernelImpl, _fm_matmul_kernel, _fm_plain


def _fm_stateful_impl(
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

    # First thing we do is extract the values from the fusions. These will be
    # values that are passed in directly and values that are passed in via
    # scalar prefetch.
    #
    # NOTE: If the fusions read and write from Refs, then `x_values`, `y_values`,
    # and `z_values` will contain Refs.  But `x_fn`, `y_fn`, and `z_fn` will be
    # pure versions of the fusions -- i.e., taking array arguments instead of
    # Refs.  `z_fn` will return additional outputs with the updated values for
    # any Refs modified by the original, stateful fusions, and we will use
    # `z_output_input_aliases` to ensure these updates are written to the
    # correct Refs.
    x_fn, x_values, x_scalar_prefetch = fuser.get_stateful_input_fusion_values(x)
    y_fn, y_values, y_scalar_prefetch = fuser.get_stateful_input_fusion_values(y)
    z_fn, z_values, z_scalar_prefetch, z_output_input_aliases = (
        fuser.get_stateful_output_fusion_values(z, z_type)
    )

    # Check if either input fusion reads from a Ref that is also written by the
    # output fusion.  We forbid this, as the kernel would give unexpected results
    # that depend on the exact order in which we visit blocks (and on details of
    # the pipelining).
    written_refs = [z_values[o] for o in z_output_input_aliases.keys()]
    if any(any(v is w for v in x_values + y_values) for w in written_refs):
        raise ValueError(
            "fusible_matmul does not support an input fusion reading "
            "from a Ref that is also written by the output fusion"
        )

    def types_without_refs(values):
        return jax.tree.map(
            lambda v: v.inner_aval if isinstance(v, jax.ref.AbstractRef) else v,
            jax.tree.map(jax.typeof, values),
        )

    z_out_type = jax.eval_shape(z_fn, types_without_refs(z_values), z_type)

    # We construct the set of scalar prefetch arguments that will be passed to
    # the kernel.
    scalar_prefetch = (x_scalar_prefetch, y_scalar_prefetch, z_scalar_prefetch)

    x_fn, (x_value_block_specs,), _ = fuser.pull_block_spec(
        x_fn,
        x_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(0),
        grid_len=len(grid),
    )(types_without_refs(x_values))

    y_fn, (y_value_block_specs,), _ = fuser.pull_block_spec(
        y_fn,
        y_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(1),
        grid_len=len(grid),
    )(types_without_refs(y_values))

    z_out_block_spec = fuser.push_block_spec(
        z_fn, tuple([pl.no_block_spec] * len(z_values)), z_block_spec
    )(types_without_refs(z_values), z_type)
    z_fn, (z_value_block_specs, _), _ = fuser.pull_block_spec(
        z_fn,
        z_out_block_spec,
        scalar_prefetch_handler=fuser.make_scalar_prefetch_handler(2),
        grid_len=len(grid),
    )(types_without_refs(z_values), z_type)

    # TODO(sharadmv): This is a hack. We should be able to pass in the scalar
    # prefetch arguments directly to the kernel but don't have Mosaic support atm.
    scalar_prefetch = jax.tree.map(lambda x: x[None], scalar_prefetch)

    if impl == KernelImpl.CORE_MAP:
        z_out_leaves, z_out_tree = jax.tree.flatten(z_out_type)
        out = z_out_tree.unflatten(
            z_values[z_output_input_aliases[i]]
            if i in z_output_input_aliases
            else jnp.empty_like(v)
            for i, v in enumerate(z_out_leaves)
        )

        def ref(x):
            if isinstance(x, jax.ref.Ref):
                return x
            return jax.new_ref(x)

        (x_values_refs, y_values_refs, z_values_refs, scalar_prefetch_refs, out_ref) = jax.tree.map(
            ref, (x_values, y_values, z_values, scalar_prefetch, out)
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

        out = tuple(
            r.get()
            for o, r in enumerate(jax.tree.leaves(out_ref))
            if o not in z_output_input_aliases
        )
        if z_output_input_aliases:
            return out
        else:
            return z_out_tree.unflatten(out)

    elif impl == KernelImpl.KERNEL:
        z_out_leaves, z_out_tree = jax.tree.flatten(z_out_type)
        out = z_out_tree.unflatten(
            z_values[z_output_input_aliases[i]]
            if i in z_output_input_aliases
            else jnp.empty_like(v)
            for i, v in enumerate(z_out_leaves)
        )

        def ref(x):
            if isinstance(x, jax.ref.Ref):
                return x
            return jax.new_ref(x)

        # NOTE: We have to close over these values instead of passing them to
        # `pl.kernel(body, ...)` because the same Ref may appear multiple times
        # across x_values, ..., out, which is not supported in
        # `pl.kernel(...)` args.
        (x_values_refs, y_values_refs, z_values_refs, out_ref) = jax.tree.map(
            ref, (x_values, y_values, z_values, out)
        )

        def body(scalar_prefetch_refs, acc_vmem_ref, scalar_prefetch_smem_refs):
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
                out_specs=[z_out_block_spec_],
                core_axis_name="core",
                dimension_semantics=dimension_semantics,
            )(x_values_refs, y_values_refs, z_values_refs, out_ref)

        pl.kernel(
            body,
            mesh=pltpu.create_tensorcore_mesh("core", num_cores=num_cores),
            scratch_types=[
                pltpu.VMEM((bm, bn), jnp.float32),
                jax.tree.map(pltpu.SMEM.like, scalar_prefetch),
            ],
            interpret=interpret,
            debug=debug,
        )(scalar_prefetch)

        out = tuple(
            r.get()
            for o, r in enumerate(jax.tree.leaves(out_ref))
            if o not in z_output_input_aliases
        )
        if z_output_input_aliases:
            return out
        else:
            return z_out_tree.unflatten(out)

    else:
        raise ValueError(f"Unsupported impl: {impl}")


def _fm_stateful(
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
            _fm_stateful_impl,
            bm=bm,
            bk=bk,
            bn=bn,
            interpret=interpret,
            debug=debug,
            impl=impl,
            num_cores=num_cores,
        )
    )(x, y)


def _fm_mm_ref(x, y):
    """``mm_ref`` (jnp.dot with preferred_element_type=float32), exact for the data here."""
    return _mm(np.asarray(x, np.float32), np.asarray(y, np.float32))


def _fx(shape, seed, dtype=np.float32):
    return _ints(shape, seed, dtype=dtype)


def _fmt_matmul(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    f = jax.jit(fuser.fuse(functools.partial(fusible_matmul, impl=impl)))
    return f, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_with_activation(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_relu(x, y):
        x = fusible_matmul(x, y, impl=impl)
        x = jnp.maximum(x, 0.0)
        return x

    return matmul_relu, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_reduce_sum(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_reduce_sum(x, y):
        x = fusible_matmul(x, y, bm=512, bn=512, impl=impl)
        x = jnp.sum(x, axis=1)
        return x

    return matmul_reduce_sum, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_reduce_sum_broadcast(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_sum_bcast(x, y):
        x = fusible_matmul(x, y, bm=512, bn=512, impl=impl)
        x = jnp.sum(x, axis=1, keepdims=True)
        x = jnp.broadcast_to(x, (x.shape[0], 128))
        return x

    return matmul_sum_bcast, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_plus_iota_custom_fusion(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    def make_iota_custom_fusion(shape, dtype):
        @fuser.custom_fusion
        def iota(start=0):
            return jnp.broadcast_to(jnp.astype(jnp.arange(shape[-1]) + start, dtype), shape)

        iota.def_pull_block_spec(lambda bss: (None,))

        @iota.def_eval_rule
        def iota_eval_rule(ctx, _):
            shape = ctx.out_block_specs[0].block_shape
            i = ctx.out_block_indices[0][-1]
            return (make_iota_custom_fusion(shape, dtype)(shape[-1] * i),)

        return iota

    iota_custom_fusion = make_iota_custom_fusion((512, 512), dtype)

    @jax.jit
    @fuser.fuse
    def matmul_plus_iota(x, y):
        return fusible_matmul(x, y, impl=impl).astype(dtype) + iota_custom_fusion()

    return matmul_plus_iota, (_fx((512, 512), 0), _fx((512, 512), 1))


def _fmt_matmul_with_bias(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    @jax.jit
    @fuser.fuse
    def matmul_bias(x, y, b):
        x = fusible_matmul(x, y, bn=256, impl=impl).astype(dtype)
        x = jnp.maximum(x + jnp.expand_dims(b, 0), 0.0)
        return x

    return matmul_bias, (_fx((512, 512), 0), _fx((512, 512), 1), _fx((512,), 2))


def _fmt_matmul_with_slice(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y):
        x = fusible_matmul(x, y[1], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 512, 512), 1))


def _fmt_matmul_with_dynamic_slice(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, i):
        x = fusible_matmul(x, y[i], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 512, 512), 1), _i32(1))


def _fmt_matmul_with_dynamic_slice_bias(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, b, i, j):
        x = fusible_matmul(x, y[j], impl=impl).astype(dtype) + b[i]
        return x

    args = (_fx((512, 512), 0), _fx((3, 512, 512), 1), _fx((2, 512, 512), 2), _i32(1), _i32(2))
    return matmul_slice, args


def _fmt_matmul_with_multi_slice(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y):
        x = fusible_matmul(x, y[1, 1], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 3, 512, 512), 1))


def _fmt_matmul_with_multiple_slices(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y):
        x = fusible_matmul(x, y[1][1], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 3, 512, 512), 1))


def _fmt_matmul_with_multiple_dynamic_slices(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, i, j):
        x = fusible_matmul(x, y[i][j], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((2, 3, 512, 512), 1), _i32(1), _i32(2))


def _fmt_matmul_with_mixed_slices(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, i, j):
        x = fusible_matmul(x, y[2][i, j], impl=impl)
        return x

    return matmul_slice, (_fx((512, 512), 0), _fx((4, 2, 3, 512, 512), 1), _i32(1), _i32(2))


def _fmt_matmul_with_multiple_mixed_slices_and_bias(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    @jax.jit
    @fuser.fuse
    def matmul_slice(x, y, b, i, j, k):
        x = fusible_matmul(x[k][3], y[2][i, j], impl=impl).astype(dtype)
        return x + b[i, j]

    args = (
        _fx((4, 4, 512, 512), 0),
        _fx((4, 2, 3, 512, 512), 1),
        _fx((4, 4, 1, 512), 2),
        _i32(1),
        _i32(2),
        _i32(3),
    )
    return matmul_slice, args
