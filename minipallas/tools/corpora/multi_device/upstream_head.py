"""Upstream tests of kernels that span devices added after the jax the project pins (jax-ml/jax
at cec06d1): dict device ids that leave an axis implicit or join two axes, ``pl.select_ref``
choosing a copy's source and semaphores, and a ``core_map`` over a device's cores inside a
``shard_map`` (the devices' cores signalling each other's semaphores).

They run with jax 0.10.2 as written; their comparisons with ``lax.ppermute`` and friends are
numpy references here.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.tools.corpora.multi_device.case import (
    DISTRIBUTED_TEST,
    DMA,
    INTERPRET_TEST,
    LOGICAL,
    REGULAR,
    Build,
    Case,
    Fn,
    P,
    Ref,
    ints,
    mesh,
)


def _permute_kernel(axis: Any, size: Any) -> Fn:
    """A permute to the right neighbour along ``axis``, its device id ``{axis: neighbour}``."""

    def kernel(x_ref: Ref, y_ref: Ref) -> None:
        def body(ready_sem: Ref, send_sem: Ref, recv_sem: Ref) -> None:
            device_id = {axis: lax.rem(lax.axis_index(axis) + 1, size)}
            pl.semaphore_signal(ready_sem, device_id=device_id)
            pl.semaphore_wait(ready_sem)
            done = pltpu.async_remote_copy(x_ref, y_ref, send_sem, recv_sem, device_id=device_id)
            done.wait_send()
            done.wait_recv()

        pl.run_scoped(body, REGULAR, DMA, DMA)

    return kernel


def _dict_permute(shape: tuple[int, int], joint: bool) -> Build:
    """test_device_id_dict_implicit_axis (``{"x": n}`` on a ("y", "x") mesh, "y" kept) and
    test_device_id_dict_joint_axis_non_pow2 (``{("y", "x"): n}`` on a (1, 3) mesh)."""
    axis = ("y", "x") if joint else "x"
    size = shape[0] * shape[1] if joint else shape[1]

    def build() -> Fn:
        def body(x: Any) -> Any:
            return pl.pallas_call(
                _permute_kernel(axis, size),
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            )(x)

        m = mesh(shape, ("y", "x"))
        return jax.shard_map(
            body, mesh=m, in_specs=P("x", None), out_specs=P("x", None), check_vma=False
        )

    return build


def _select_ref(num_refs: int) -> Build:
    """test_select_ref_remote_dma: a ``pl.loop`` whose copies pick their source and semaphores
    with ``pl.select_ref``, into consecutive rows of the other device's output."""

    def kernel(*refs: Ref) -> None:
        *x_refs, y_ref = refs

        def body(ready_sem: Ref, send_sem: Ref, recv_sem: Ref) -> None:
            other = 1 - lax.axis_index("x")
            pl.semaphore_signal(ready_sem, device_id=other, device_id_type=LOGICAL)
            pl.semaphore_wait(ready_sem)

            @pl.loop(0, num_refs)
            def _(i: Any) -> None:
                done = pltpu.async_remote_copy(
                    pl.select_ref(i, *x_refs),
                    y_ref.at[pl.ds(8 * i, 8)],
                    pl.select_ref(i % 2, send_sem.at[0], send_sem.at[1]),
                    pl.select_ref(i % 2, recv_sem.at[0], recv_sem.at[1]),
                    other,
                    device_id_type=LOGICAL,
                )
                done.wait_send()
                done.wait_recv()

        pl.run_scoped(body, REGULAR, DMA(2), DMA(2))

    def build() -> Fn:
        def body(x: Any) -> Any:
            return pl.pallas_call(
                kernel,
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)] * num_refs,
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                out_shape=jax.ShapeDtypeStruct((8 * num_refs, 128), jnp.float32),
            )(*jnp.split(x, num_refs))

        return jax.shard_map(
            body, mesh=mesh((2,), ("x",)), in_specs=P("x"), out_specs=P("x"), check_vma=False
        )

    return build


def _select_ref_smem() -> Build:
    """test_select_ref_smem_index_remote_dma: the copy's source chosen by an SMEM scalar."""

    def kernel(idx_ref: Ref, x0_ref: Ref, x1_ref: Ref, y_ref: Ref) -> None:
        def body(ready_sem: Ref, send_sem: Ref, recv_sem: Ref) -> None:
            other = 1 - lax.axis_index("x")
            pl.semaphore_signal(ready_sem, device_id=other, device_id_type=LOGICAL)
            pl.semaphore_wait(ready_sem)
            x_ref = pl.select_ref(idx_ref[...], x0_ref, x1_ref)
            done = pltpu.async_remote_copy(
                x_ref, y_ref, send_sem, recv_sem, other, device_id_type=LOGICAL
            )
            done.wait_send()
            done.wait_recv()

        pl.run_scoped(body, REGULAR, DMA, DMA)

    def build() -> Fn:
        def body(idx: Any, x0: Any, x1: Any) -> Any:
            spaces = (pltpu.SMEM, pltpu.VMEM, pltpu.VMEM)
            return pl.pallas_call(
                kernel,
                in_specs=[pl.BlockSpec(memory_space=s) for s in spaces],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            )(idx, x0, x1)

        f = jax.shard_map(
            body,
            mesh=mesh((2,), ("x",)),
            in_specs=(P(), P("x"), P("x")),
            out_specs=P("x"),
            check_vma=False,
        )
        return lambda x0, x1: f(jnp.array(0, jnp.int32), x0, x1)

    return build


def _core_map(n: int, cores: int) -> Build:
    """test_shard_map_of_core_map: each device's cores meet at a semaphore barrier, then each
    adds its device and core numbers to its slice (``run_state`` over a ``core_map``)."""
    rows = 16 // cores

    def build() -> Fn:
        core_mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

        def f(x: Any) -> Any:
            def inner(refs: Any) -> None:
                x_ref, y_ref = refs

                @pl.core_map(core_mesh)
                def _() -> None:
                    def alloc(x_vmem: Ref, y_vmem: Ref, dma_sem: Ref, sem: Ref) -> None:
                        for i in range(cores):
                            pl.semaphore_signal(sem, 1, core_index=i)
                        pl.semaphore_wait(sem, cores)
                        core = lax.axis_index("core")
                        slc = pl.ds(core * rows, rows)
                        pltpu.async_copy(x_ref.at[slc], x_vmem, dma_sem).wait()
                        y_vmem[...] = x_vmem[...] + cores * lax.axis_index("x") + core + 1
                        pltpu.async_copy(y_vmem, y_ref.at[slc], dma_sem).wait()

                    scratch = pltpu.VMEM((rows, 128), jnp.float32)
                    pl.run_scoped(alloc, scratch, scratch, DMA, REGULAR)

            _, y = pl.run_state(inner)((x, jnp.zeros_like(x)))
            return y

        return jax.shard_map(
            jax.jit(f),
            mesh=mesh((n,), ("x",)),
            in_specs=P("x", None),
            out_specs=P("x", None),
            check_vma=False,
        )

    return build


def _rolled(x: np.ndarray, parts: int) -> np.ndarray:
    return np.roll(x.reshape(parts, -1, *x.shape[1:]), 1, axis=0).reshape(x.shape)


def _swapped_halves(x: np.ndarray) -> np.ndarray:
    return np.concatenate(np.split(x, 2)[::-1])


def _plus_positions(x: np.ndarray, n: int, cores: int) -> np.ndarray:
    shaped = x.reshape(n, cores, -1, 128)
    devices = np.arange(n, dtype=np.float32)[:, None, None, None] * cores
    return (shaped + 1 + devices + np.arange(cores, dtype=np.float32)[None, :, None, None]).reshape(
        x.shape
    )


def cases() -> list[Case]:
    src = DISTRIBUTED_TEST
    return [
        Case(
            "dict_id_implicit_axis",
            f"{src}::test_device_id_dict_implicit_axis (at HEAD)",
            (2, 4),
            _dict_permute((2, 4), joint=False),
            lambda: ints(90, (32, 128)),
            lambda x: _rolled(x, 4),
        ),
        Case(
            "dict_id_joint_axis_non_pow2",
            f"{src}::test_device_id_dict_joint_axis_non_pow2 (at HEAD)",
            (1, 3),
            _dict_permute((1, 3), joint=True),
            lambda: ints(91, (24, 128)),
            lambda x: _rolled(x, 3),
        ),
        Case(
            "select_ref_remote_dma",
            f"{src}::test_select_ref_remote_dma (at HEAD)",
            (2,),
            _select_ref(4),
            lambda: ints(92, (64, 128)),
            _swapped_halves,
            upstream="error: its interpret mode has no rule for the select ('NotImplementedError: "
            "Unsupported transform: SelectTransform')",
        ),
        Case(
            "select_ref_smem_index",
            f"{src}::test_select_ref_smem_index_remote_dma (at HEAD)",
            (2,),
            _select_ref_smem(),
            lambda: ints(93, (16, 128), (16, 128)),
            lambda x0, x1: _swapped_halves(x0),
            upstream="error: its interpret mode has no rule for the select ('NotImplementedError: "
            "SelectTransform')",
        ),
        Case(
            "shard_map_of_core_map",
            f"{INTERPRET_TEST}::test_shard_map_of_core_map (2 devices of 2 cores, at HEAD)",
            (2,),
            _core_map(2, 2),
            lambda: ints(94, (32, 128)),
            lambda x: _plus_positions(x, 2, 2),
        ),
    ]
