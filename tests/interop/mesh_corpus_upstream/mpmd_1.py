"""tests/pallas/tpu_pallas_mpmd_test.py: the TensorCore cases (their meshes have 1 core).
Part 1 of 2."""

from __future__ import annotations

import dataclasses

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import fuser
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _UP, _arange_i32, _i32
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import fusible_dtype, hijax, state

# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_pallas_mpmd_test.py: the TensorCore cases (their meshes have 1 core)
# --------------------------------------------------------------------------------------------

_MPMD = _UP + "tpu_pallas_mpmd_test.py"


def _tc_mesh():
    """``from_core_type(pltpu.CoreType.TC)`` upstream."""
    return pltpu.create_tensorcore_mesh(axis_name="tc_core", num_cores=1)


def _mpmd_capture_scalar():
    mesh = _tc_mesh()
    axis_name = list(mesh.shape.keys())[0]

    def f(x, i):
        def body(x_ref, out_ref):
            idx = jax.lax.axis_index(axis_name)
            pltpu.sync_copy(x_ref.at[i], out_ref.at[idx])

        return pl.kernel(
            body=body,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.int32),
        )(x)

    return jax.jit(f), (_arange_i32(4, 8, 128), _i32(2))


def _mpmd_capture_multiple_scalars():
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=1)

    def f(x, i, j):
        def body(x_ref, out_ref):
            idx = jax.lax.axis_index("x")
            pltpu.sync_copy(x_ref.at[i + j], out_ref.at[idx])

        return pl.kernel(
            body=body,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.int32),
        )(x)

    return jax.jit(f), (_arange_i32(4, 8, 128), _i32(1), _i32(2))


def _mpmd_capture_scalar_indexing():
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=1)

    def f(x, i):
        def body(x_ref, out_ref):
            idx = jax.lax.axis_index("x")
            pltpu.sync_copy(x_ref.at[i], out_ref.at[idx])

        return pl.kernel(
            body=body,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.int32),
        )(x)

    return f, (_arange_i32(4, 8, 128), _i32(1))


def _mpmd_capture_scalar_and_ref():
    mesh = pltpu.create_tensorcore_mesh("x", num_cores=1)

    @jax.jit
    def f(x, i):
        y = jnp.arange(8 * 128, dtype=jnp.int32).reshape(8, 128)
        y_ref = jax.new_ref(y, memory_space=pl.ANY)

        def body(x_ref, out_ref):
            idx = jax.lax.axis_index("x")
            pltpu.sync_copy(x_ref.at[i], out_ref.at[idx])
            vmem_buf = jax.empty_ref(
                jax.typeof(y_ref).inner_aval, memory_space=pltpu.MemorySpace.VMEM
            )
            pltpu.sync_copy(y_ref, vmem_buf)

        return pl.kernel(
            body=body,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct((1, *x.shape[1:]), jnp.int32),
        )(x)

    return f, (_arange_i32(4, 8, 128), _i32(1))


def _mpmd_passing_in_refs():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        o_ref = jax.empty_ref(jax.typeof(x))
        pl.kernel(body=pltpu.sync_copy, mesh=mesh)(x_ref, o_ref)
        return jax.freeze(o_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_passing_in_multiple_refs():
    mesh = _tc_mesh()

    @jax.jit
    def f(x, y):
        x_ref = jax.new_ref(x)
        y_ref = jax.new_ref(y)

        def fn(x_ref, y_ref, scratch_x, scratch_y):
            pltpu.sync_copy(x_ref, scratch_x)
            pltpu.sync_copy(y_ref, scratch_y)
            pltpu.sync_copy(scratch_x, y_ref)
            pltpu.sync_copy(scratch_y, x_ref)

        pl.kernel(
            body=fn,
            mesh=mesh,
            scratch_types=(
                pltpu.SMEM(x.shape, x.dtype),
                pltpu.SMEM(y.shape, y.dtype),
            ),
        )(x_ref, y_ref)
        return jax.freeze(x_ref), jax.freeze(y_ref)

    x = _arange_i32(8, 128)
    return f, (x, np.zeros_like(x))


def _mpmd_mixed_outputs_and_refs():
    mesh = _tc_mesh()
    num_lanes = _SC_NUM_LANES

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)

        def fn(x_ref, out_ref, scratch_ref):
            pltpu.sync_copy(x_ref, out_ref)
            pltpu.sync_copy(x_ref, scratch_ref)
            scratch_ref[0, :num_lanes] += jnp.ones(num_lanes, dtype=jnp.int32)
            pltpu.sync_copy(scratch_ref, x_ref)

        out = pl.kernel(
            body=fn,
            mesh=mesh,
            out_type=jax.typeof(x),
            scratch_types=(pltpu.VMEM(x.shape, x.dtype),),
        )(x_ref)
        return out, jax.freeze(x_ref)

    return f, (_arange_i32(8, 128),)


# upstream reads pltpu.get_tpu_info().sparse_core.num_lanes (16 on v6e and v7x, where
# tpu_pallas_mpmd_test runs)
_SC_NUM_LANES = 16


def _mpmd_mixed_outputs_and_refs_ref(x):
    mutated = x.copy()
    mutated[0, :_SC_NUM_LANES] += 1
    return x, mutated


def _mpmd_passing_in_refs_read_only():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)

        def fn(_):
            pass

        pl.kernel(body=fn, mesh=mesh)(x_ref)
        return jax.freeze(x_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_passing_in_refs_with_scratch():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        o_ref = jax.empty_ref(jax.typeof(x))

        def fn(x_hbm_ref, out_hbm_ref, scratch_ref):
            pltpu.sync_copy(x_hbm_ref, scratch_ref)
            pltpu.sync_copy(scratch_ref, out_hbm_ref)

        pl.kernel(
            body=fn,
            mesh=mesh,
            scratch_types=(pltpu.SMEM(x.shape, x.dtype),),
        )(x_ref, o_ref)
        return jax.freeze(o_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_passing_in_duplicate_refs_errors():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        pl.kernel(body=lambda *_: None, mesh=mesh)(x_ref, x_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_closed_over_refs():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        o_ref = jax.empty_ref(jax.typeof(x))

        @pl.kernel(mesh=mesh)
        def fn():
            pltpu.sync_copy(x_ref, o_ref)

        fn()

        return jax.freeze(o_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_closed_over_refs_with_scratch():
    mesh = _tc_mesh()

    @jax.jit
    def f(x):
        x_ref = jax.new_ref(x)
        o_ref = jax.empty_ref(jax.typeof(x))

        mem_type = pltpu.VMEM  # core_type is TC

        @pl.kernel(
            mesh=mesh,
            scratch_types=(mem_type(x.shape, x.dtype),),
        )
        def fn(scratch_ref):
            pltpu.sync_copy(x_ref, scratch_ref)
            pltpu.sync_copy(scratch_ref, o_ref)

        fn()

        return jax.freeze(o_ref)

    return f, (_arange_i32(8, 128),)


def _mpmd_remat_with_checkpoint():
    mesh = pltpu.create_tensorcore_mesh("tc", num_cores=1)

    kernel_impl = pl.kernel(
        pltpu.sync_copy,
        mesh=mesh,
        out_type=jax.ShapeDtypeStruct((8, 128), jnp.float32),
    )

    # NOTE: ``mpmd_map`` does not yet have a general purpose jvp rule, so we
    # need to use ``custom_vjp`` to define one.
    @jax.custom_vjp
    def kernel(x):
        return kernel_impl(x)

    kernel.defvjp(lambda x: (kernel_impl(x), ()), lambda res, g: (g,))

    def f(x):
        def block(x):
            y = jax.ad_checkpoint.checkpoint_name(x * 2.0, name="y")
            return kernel(y)

        policy = jax.checkpoint_policies.save_only_these_names("y")
        return jax.remat(block, policy=policy)(x).sum()

    return jax.grad(f), (np.ones((8, 128), dtype=np.float32),)


# MpmdHijaxTest's hi-type, as upstream defines it at module level (tpu_pallas_mpmd_test.py:815)


@dataclasses.dataclass(frozen=True)
class WeirdTuple:
    x0: jax.Array
    x1: jax.Array


@dataclasses.dataclass(frozen=True)
class WeirdTupleTy(hijax.HiType):
    x0_aval: jax_core.ShapedArray
    x1_aval: jax_core.ShapedArray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.x0_aval.shape

    @property
    def dtype(self) -> jnp.dtype:
        return self.x0_aval.dtype

    def lo_ty(self) -> list[jax_core.ShapedArray]:
        return [self.x0_aval, self.x1_aval]

    def lower_val(self, hi_val: WeirdTuple) -> list[jax.Array]:
        assert isinstance(hi_val, WeirdTuple), f"Expected WeirdTuple, got {type(hi_val)}"
        return [hi_val.x0, hi_val.x1]

    def raise_val(self, x0, x1) -> WeirdTuple:
        return WeirdTuple(x0, x1)

    def get_ref_aval(self):
        return state.AbstractRef(self, memory_space=self.memory_space)

    def dma_start(
        self,
        src_ref,
        dst_ref,
        src_sem,
        dst_sem,
        device_id,
        device_id_type,
        priority,
        add,
    ) -> None:
        assert device_id is None
        assert src_sem is None
        src_x0_ref = src_ref._refs.x0
        src_x1_ref = src_ref._refs.x1
        dst_x0_ref = dst_ref._refs.x0
        dst_x1_ref = dst_ref._refs.x1

        desc_x0 = pltpu.make_async_copy(src_x0_ref, dst_x0_ref, dst_sem)
        desc_x0.start(priority=priority, add=add)

        desc_x1 = pltpu.make_async_copy(src_x1_ref, dst_x1_ref, dst_sem)
        desc_x1.start(priority=priority, add=add)

    def dma_wait(self, src_ref, dst_ref, src_sem, dst_sem, device_id, device_id_type):
        assert device_id is None
        assert src_sem is None

        src_x0_ref = src_ref._refs.x0
        src_x1_ref = src_ref._refs.x1
        dst_x0_ref = dst_ref._refs.x0
        dst_x1_ref = dst_ref._refs.x1

        desc_x0 = pltpu.make_async_copy(src_x0_ref, dst_x0_ref, dst_sem)
        desc_x0.wait()

        desc_x1 = pltpu.make_async_copy(src_x1_ref, dst_x1_ref, dst_sem)
        desc_x1.wait()


hijax.register_hitype(WeirdTuple, lambda t: WeirdTupleTy(jax.typeof(t.x0), jax.typeof(t.x1)))

unpack_p = hijax.HiPrimitive("unpack")
unpack = unpack_p.bind
unpack_p.multiple_results = True
unpack_p.is_high = lambda *_: True
unpack_p.def_abstract_eval(lambda x: [x.x0_aval, x.x1_aval])
unpack_p.to_lojax = lambda x: [x.x0, x.x1]

pack_p = hijax.HiPrimitive("pack")
pack = pack_p.bind
pack_p.is_high = lambda *_: True
pack_p.def_abstract_eval(lambda x0, x1: WeirdTupleTy(x0, x1))
pack_p.to_lojax = lambda x0, x1: WeirdTuple(x0, x1)


def _weird_args():
    """xt's two arrays; each f packs them into a WeirdTuple hi value (``pack``) and unpacks its
    result, since a traced WeirdTuple has no ``.x0``."""
    return np.ones((8, 8), dtype=np.int32), np.zeros((8,), dtype=np.int32)


def _mpmd_pass_weird_tuple_into_mpmd_map():
    def kernel(xt_ref, ot_ref, xt_vmem_ref, ot_vmem_ref):
        pltpu.sync_copy(xt_ref, xt_vmem_ref)
        ot_vmem_ref[...] = xt_vmem_ref[...]
        pltpu.sync_copy(ot_vmem_ref, ot_ref)

    mesh = pltpu.create_tensorcore_mesh("tc_core", num_cores=1)

    def f(x0, x1):
        xt = pack(x0, x1)  # upstream: WeirdTuple(x0=..., x1=...), a concrete hi value
        ot = pl.kernel(
            body=kernel,
            mesh=mesh,
            out_type=jax.typeof(xt),
            scratch_types=(
                pltpu.VMEM.like(WeirdTupleTy(jax.typeof(x0), jax.typeof(x1))),
                pltpu.VMEM.like(WeirdTupleTy(jax.typeof(x0), jax.typeof(x1))),
            ),
        )(xt)
        return tuple(unpack(ot))

    return f, _weird_args()


def _mpmd_hijax_input_output_aliasing():
    mesh = pltpu.create_tensorcore_mesh("tc_core", num_cores=1)

    def kernel(xt_ref_inner, scratch_vmem_ref):
        pltpu.sync_copy(xt_ref_inner, scratch_vmem_ref)
        x0, x1 = unpack(scratch_vmem_ref[...])
        scratch_vmem_ref[...] = pack(x0 + 1, x1)
        pltpu.sync_copy(scratch_vmem_ref, xt_ref_inner)

    @jax.jit
    def f(xt):
        xt_ref = jax.new_ref(xt)
        pl.kernel(
            body=kernel,
            mesh=mesh,
            scratch_types=(pltpu.VMEM.like(jax.typeof(xt)),),
        )(xt_ref)
        return jax.freeze(xt_ref)

    def g(x0, x1):
        return tuple(unpack(f(pack(x0, x1))))

    return g, _weird_args()


def _mpmd_closed_over_hijax_refs():
    mesh = pltpu.create_tensorcore_mesh("tc_core", num_cores=1)

    @jax.jit
    def f(xt_in):
        xt_ref = jax.new_ref(xt_in)
        ot_ref = jax.empty_ref(jax.typeof(xt_in))

        def kernel(xt_vmem_ref, ot_vmem_ref):
            pltpu.sync_copy(xt_ref, xt_vmem_ref)
            ot_vmem_ref[...] = xt_vmem_ref[...]
            pltpu.sync_copy(ot_vmem_ref, ot_ref)

        pl.kernel(
            body=kernel,
            mesh=mesh,
            scratch_types=(
                pltpu.VMEM.like(jax.typeof(xt_in)),
                pltpu.VMEM.like(jax.typeof(xt_in)),
            ),
        )()
        return jax.freeze(ot_ref)

    def g(x0, x1):
        return tuple(unpack(f(pack(x0, x1))))

    return g, _weird_args()


def _mpmd_map_physicalize():
    @dataclasses.dataclass(frozen=True)
    class SimpleFusionDType(fusible_dtype.FusionDType):
        def __str__(self):
            return "simple_fusion_dtype"

        def abstract_unpack(self, x):
            if isinstance(x, jax_core.ShapedArray):
                return (x.update(dtype=jnp.float32), x.update(dtype=jnp.float32))
            raise NotImplementedError(type(x))

        def abstract_pack(self, x, y):
            if isinstance(x, jax_core.ShapedArray):
                return x.update(dtype=self)
            raise NotImplementedError(type(x))

        def pull_block_spec_one_step(self, aval_out, block_spec):
            return block_spec, block_spec

        def unpack_push_block_spec(self, aval_in, block_spec):
            return block_spec, block_spec

        def unpack_pull_block_spec(self, aval_in, block_spec1, block_spec2):
            return (block_spec1,)

        def pack_eval_rule(self, eval_ctx, x, y):
            return fusible_dtype.pack_dtype_p.bind(x, y, dtype=self)

        def unpack_eval_rule(self, eval_ctx, x):
            return fusible_dtype.unpack(x)

    mesh = pltpu.create_tensorcore_mesh("tc_core", num_cores=1)

    def subkernel(x_ref, y_ref, out_ref, x_vmem, y_vmem, out_vmem):
        pltpu.sync_copy(x_ref, x_vmem)
        pltpu.sync_copy(y_ref, y_vmem)
        packed = fusible_dtype.pack(x_vmem[...], y_vmem[...], dtype=SimpleFusionDType())
        x_val, y_val = fusible_dtype.unpack(packed)
        out_vmem[...] = x_val + y_val
        pltpu.sync_copy(out_vmem, out_ref)

    @fuser.fusible
    def mpmd_f(x_fn, y_fn, z_fn):
        x = x_fn()
        y = y_fn()
        out = pl.kernel(
            body=subkernel,
            mesh=mesh,
            out_type=jax.ShapeDtypeStruct.like(x),
            scratch_types=(
                pltpu.VMEM(x.shape, x.dtype),
                pltpu.VMEM(x.shape, x.dtype),
                pltpu.VMEM(x.shape, x.dtype),
            ),
        )(x, y)
        if z_fn is None:
            z_fn = lambda x: x  # noqa: E731
        return z_fn(out)

    physicalized_f = fusible_dtype.physicalize(mpmd_f)
    return physicalized_f, (np.ones((8, 8), np.float32), np.ones((8, 8), np.float32))
