"""tests/pallas/tpu_fusible_matmul_test.py and tpu_fusible_matmul_with_stateful_fusions_test.py.
Part 3 of 4."""

from __future__ import annotations

import functools

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax.experimental.pallas import fuser

from mesh_corpus_upstream.common import _i32, _mm
from mesh_corpus_upstream.fusible_matmul_1 import _fm_plain
from mesh_corpus_upstream.fusible_matmul_2 import _fm_mm_ref, _fm_stateful, _fx


def _fmt_matmul_input_concat_contract(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, ys):
        y = jnp.concatenate(ys, axis=0)
        x = fusible_matmul(x, y, impl=impl)
        return x

    def f(x, y1, y2):
        return matmul_concat(x, [y1, y2])

    return f, (_fx((128, 256), 0), _fx((128, 128), 1), _fx((128, 128), 2))


def _fmt_matmul_double_concat(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, ys, y3):
        y = jnp.concatenate(ys, axis=0)
        y = jnp.concatenate([y, y3], axis=1)
        x = fusible_matmul(x, y, impl=impl)
        return x

    def f(x, y1, y2, y3):
        return matmul_concat(x, [y1, y2], y3)

    args = (_fx((128, 256), 0), _fx((128, 128), 1), _fx((128, 128), 2), _fx((256, 128), 3))
    return f, args


def _fmt_matmul_slice_concat(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, y1, y2):
        y = jnp.concatenate([y1, y2[3]], axis=0)
        x = fusible_matmul(x, y, impl=impl)
        return x

    return matmul_concat, (_fx((128, 256), 0), _fx((128, 128), 1), _fx((4, 128, 128), 2))


def _fmt_matmul_slice_concat_slice(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, y1, y2):
        y = jnp.concatenate([y1, y2[3]], axis=1)[1]
        x = fusible_matmul(x, y, impl=impl)
        return x

    return matmul_concat, (_fx((128, 256), 0), _fx((3, 128, 128), 1), _fx((4, 3, 128, 128), 2))


def _fmt_matmul_dynamic_slice_concat(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    @jax.jit
    @fuser.fuse
    def matmul_concat(x, y1, y2, i, j):
        y = jnp.concatenate([y1, y2[i]], axis=1)[j]
        x = fusible_matmul(x, y, impl=impl)
        return x

    args = (_fx((128, 256), 0), _fx((2, 128, 128), 1), _fx((4, 2, 128, 128), 2), _i32(3), _i32(1))
    return matmul_concat, args


def _fmt_rhs(impl, cores, transform, x_shape, y_shape, **block):
    """The rhs/lhs/out transpose tests: ``jax.jit(fuser.fuse(partial(matmul, partial(
    fusible_matmul, <block>, impl=impl))))`` where ``matmul(impl_fn, x, y)`` applies
    ``transform``."""
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    impl_fused = fuser.fuse(
        functools.partial(transform, functools.partial(fusible_matmul, **block, impl=impl))
    )
    return jax.jit(impl_fused), (_fx(x_shape, 0), _fx(y_shape, 1))


def _rhs_transpose_no_following_ops(impl_fn, x, y):
    # This transpose gets fused in
    z = impl_fn(x, y.T)
    return z


def _rhs_transpose_then_add(impl_fn, x, y):
    # This transpose gets fused in as well (special handling for this case)
    z = impl_fn(x, y.T + 1.0)
    return z


def _rhs_transpose_after_slice(impl_fn, x, y):
    # This transpose gets fused in as well
    z = impl_fn(x, y[1].T)
    return z


def _rhs_transpose_before_slice(impl_fn, x, y):
    # This transpose gets fused in as well
    z = impl_fn(x, y.swapaxes(-1, -2)[1])
    return z


def _rhs_transpose_major_dim(impl_fn, x, y):
    # This transpose gets fused in but the block spec takes care of it
    z = impl_fn(x, y.swapaxes(0, 1)[1, 0])
    return z


def _rhs_transpose_transpose(impl_fn, x, y):
    # This transpose gets converted into a no-op.
    z = impl_fn(x, y.T.T)
    return z


def _lhs_transpose(impl_fn, x, y):
    # This transpose gets converted into a no-op.
    z = impl_fn(x.T, y)
    return z


def _lhs_transpose_add(impl_fn, x, y):
    # This transpose gets converted into a no-op.
    z = impl_fn(x.T + 1, y)
    return z


def _out_transpose(impl_fn, x, y):
    z = impl_fn(x, y)
    # This transpose is executed.
    return z.T


def _out_transpose_mul(impl_fn, x, y):
    z = impl_fn(x, y)
    # This transpose is executed.
    return z.T * 2


def _out_custom_vjp_fwd(impl_fn, x, y):
    @jax.custom_vjp
    def act(x):
        return jax.nn.relu(x) * x

    def act_fwd(x):
        del x
        raise AssertionError("unreachable")

    def act_bwd(res, dy):
        del res, dy
        raise AssertionError("unreachable")

    act.defvjp(act_fwd, act_bwd)
    z = impl_fn(x, y)
    return act(z)


def _fmt_out_custom_vjp_bwd(impl, cores):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    @jax.custom_vjp
    def act(x):
        return jax.nn.relu(x) * x

    def act_fwd(x):
        return jax.nn.relu(x) * x, (x,)

    def act_bwd(res, dy):
        (x,) = res
        return (dy * x * 2.34,)

    act.defvjp(act_fwd, act_bwd)

    def matmul(impl_fn, x, y, dz):
        z = impl_fn(x, y)
        dz = dz.astype(z.dtype)
        return jax.vjp(act, z)[1](dz)[0].astype(dtype)

    impl_fused = fuser.fuse(
        functools.partial(matmul, functools.partial(fusible_matmul, bn=256, impl=impl))
    )
    return jax.jit(impl_fused), (_fx((256, 256), 0), _fx((256, 512), 1), _fx((256, 512), 2))


def _fmt_out_custom_vjp_bwd_ref(x, y, dz):
    # act_bwd's order, dy * x * 2.34, in float32 (upstream compares with tolerance against
    # dz * 2.34 * (x @ y) and against the unfused computation)
    return ((dz * _fm_mm_ref(x, y)) * np.float32(2.34),)


def _sparse_unit(shape, seed):
    """Entries in {-1, 0, 1}, 7 in 8 of them 0: a 512-long dot of two such stays within
    +-256, so a product of products is bfloat16-exact whatever the matmul precision."""
    rng = np.random.default_rng(seed)
    return (rng.integers(-1, 2, size=shape) * (rng.random(shape) < 0.125)).astype(np.float32)


def _fmt_dot_dot_fusion(impl, cores, transpose):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)
    dtype = "float32"

    def chained_matmul(x, y, w):
        out = jnp.dot(x, y, preferred_element_type=jnp.float32).astype(dtype)
        return fusible_matmul(out, w, impl=impl)

    def chained_matmul_transpose(x, y, w):
        y = y.T
        out = jnp.dot(x, y, preferred_element_type=jnp.float32).astype(dtype)
        return fusible_matmul(out, w, impl=impl)

    fused_matmul = jax.jit(fuser.fuse(chained_matmul_transpose if transpose else chained_matmul))
    x, y = _sparse_unit((512, 512), 0), _sparse_unit((512, 512), 1)
    assert np.abs(_mm(x, y.T if transpose else y)).max() <= 256
    return fused_matmul, (x, y, _fx((512, 512), 2))


def _fmt_excess_precision(impl, cores, shape_x, shape_y, downcast, **block):
    fusible_matmul = functools.partial(_fm_plain, num_cores=cores)

    def matmul(impl_fn, x, y):
        z = impl_fn(x, y)
        return z.astype(x.dtype) if downcast else z

    impl_fused = fuser.fuse(
        functools.partial(matmul, functools.partial(fusible_matmul, **block, impl=impl))
    )
    bf16 = jnp.bfloat16
    return jax.jit(impl_fused), (_fx(shape_x, 0, dtype=bf16), _fx(shape_y, 1, dtype=bf16))


def _fmst_read_only_refs(impl, cores, fuse):
    fusible_matmul = functools.partial(_fm_stateful, num_cores=cores)
    dtype = "float32"

    @functools.partial(jax.jit, static_argnames=["fuse"])
    def run_matmul(x, y, a, b, fuse=True):
        # NOTE: Currently, fused functions (and kernels) can only close over Refs
        # that were created inside of jax.jit.
        a_ref = jax.new_ref(a)
        b_ref = jax.new_ref(b)

        _fusible_matmul = functools.partial(fusible_matmul, impl=impl)
        if not fuse:
            _fusible_matmul = fuser.fuse(_fusible_matmul)

        def matmul(x, y):
            x = _fusible_matmul(x + a_ref[...], y + b_ref[...] * 0.5).astype(dtype)
            return jnp.maximum(x + b_ref[...], 0.0)

        if fuse:
            matmul = fuser.fuse(matmul)

        return matmul(x, y)

    def f(x, y, a, b):
        return run_matmul(x, y, a, b, fuse=fuse)

    return f, tuple(_fx((512, 512), s) for s in range(4))


def _fmst_simple_aliased_ref(impl, cores, fuse):
    fusible_matmul = functools.partial(_fm_stateful, num_cores=cores)
    dtype = "float32"

    @functools.partial(jax.jit, static_argnames=["fuse"])
    def run_matmul(x, y, b, fuse=True):
        # NOTE: Currently, fused functions (and kernels) can only close over Refs
        # that were created inside of jax.jit.
        b_ref = jax.new_ref(b)

        _fusible_matmul = functools.partial(fusible_matmul, impl=impl)
        if not fuse:
            _fusible_matmul = fuser.fuse(_fusible_matmul)

        def matmul(x, y):
            x = _fusible_matmul(x, y).astype(dtype)
            b_ref[...] = jnp.maximum(x + b_ref[...], 0.0)

        if fuse:
            matmul = fuser.fuse(matmul)

        matmul(x, y)
        return jax.ref.freeze(b_ref)

    def f(x, y, b):
        return run_matmul(x, y, b, fuse=fuse)

    return f, tuple(_fx((512, 512), s) for s in range(3))


def _fmst_forbids_unsupported_ref_access(impl, cores):
    fusible_matmul = functools.partial(_fm_stateful, num_cores=cores)

    @jax.jit
    def run_matmul(x, y, b):
        # NOTE: Currently, fused functions (and kernels) can only close over Refs
        # that were created inside of jax.jit.
        x_ref = jax.new_ref(x)
        b_ref = jax.new_ref(b)

        @fuser.fuse
        def matmul(x, y):
            # fusible_matmul will reject this for reading x_ref in the input fusion
            # while also writing to x_ref in the output fusion.  This computation
            # would give unexpected results that would depend on the order in which
            # the kernel reads from and writes to different blocks of x_ref.
            x_ref[...] = fusible_matmul(jnp.transpose(x_ref[...]) + b_ref[...], y, impl=impl)

        matmul(x, y)
        return jax.ref.freeze(b_ref)

    return run_matmul, tuple(_fx((512, 512), s) for s in range(3))


def _fmst_writes_that_do_not_depend_on_output(impl, cores):
    fusible_matmul = functools.partial(_fm_stateful, num_cores=cores)

    @jax.jit
    def run_matmul(x, y):
        # NOTE: Currently, fused functions (and kernels) can only close over Refs
        # that were created inside of jax.jit.
        side_output_ref = jax.new_ref(jnp.empty_like(x))

        @fuser.fuse
        def matmul(x, y):
            # NOTE: This write is not allowed becuase it does not depend on the
            # output of fusible_matmul.
            side_output_ref[...] = x * 2.0
            return fusible_matmul(x, y, impl=impl)

        res = matmul(x, y)
        return res, jax.ref.freeze(side_output_ref)

    return run_matmul, tuple(_fx((512, 512), s) for s in range(2))


def _relu(v):
    return np.maximum(v, np.float32(0))
