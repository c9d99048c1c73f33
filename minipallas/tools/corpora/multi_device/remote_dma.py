"""Upstream's remote-DMA tests ported (``tests/pallas/tpu_pallas_distributed_test.py``), with
numpy references in place of their comparisons with ``lax.ppermute``.

Upstream runs the first group on real TPUs only, and the ``PallasCallRemoteDMAInterpretTest``
ones under ``interpret=True``, where a remote copy is an XLA collective that synchronizes the
devices. Two of the latter zero the output and then receive into it with nothing ordering the
two (one says so in a comment: "This kernel as written is racey"): under a simulator that runs
the devices apart they are races, and the corpus expects them to be found.
"""

from __future__ import annotations

import functools
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


def _basic_remote_dma(space: Any) -> Fn:
    """test_basic_remote_vmem_dma: two devices swap shards after a ready handshake."""

    def kernel(x_ref: Ref, y_ref: Ref) -> None:
        def body(ready_sem: Ref, send_sem: Ref, recv_sem: Ref) -> None:
            other = 1 - lax.axis_index("x")
            pl.semaphore_signal(ready_sem, device_id=other, device_id_type=LOGICAL)
            pl.semaphore_wait(ready_sem)
            done = pltpu.async_remote_copy(
                x_ref, y_ref, send_sem, recv_sem, other, device_id_type=LOGICAL
            )
            done.wait_send()
            done.wait_recv()

        pl.run_scoped(body, REGULAR, DMA, DMA)

    def body(x: Any) -> Any:
        varying = jax.sharding.ManualAxisType(varying=frozenset("x"))
        return pl.pallas_call(
            kernel,
            in_specs=[pl.BlockSpec(memory_space=space)],
            out_specs=pl.BlockSpec(memory_space=space),
            out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32, manual_axis_type=varying),
        )(x)

    return jax.shard_map(body, mesh=mesh((2,), ("x",)), in_specs=P("x"), out_specs=P("x"))


def _axis_index(direction: str, two_d: bool) -> Fn:
    """test_pallas_call_axis_index: a permute to one side, ids from axis_index and axis_size;
    with ``two_d`` (test_pallas_call_axis_index_2d_mesh) along "x" of a ("y", "x") mesh, the
    id a tuple ``(y, neighbour)``."""

    def kernel(x_ref: Ref, y_ref: Ref) -> None:
        def body(ready_sem: Ref, send_sem: Ref, recv_sem: Ref) -> None:
            me, n = lax.axis_index("x"), lax.axis_size("x")
            if direction == "right":
                neighbor = lax.rem(me + 1, n)
            else:
                neighbor = lax.rem(me - 1, n)
                neighbor = jnp.where(neighbor < 0, neighbor + n, neighbor)
            device_id = (lax.axis_index("y"), neighbor) if two_d else neighbor
            pl.semaphore_signal(ready_sem, device_id=device_id)
            pl.semaphore_wait(ready_sem)
            done = pltpu.async_remote_copy(x_ref, y_ref, send_sem, recv_sem, device_id=device_id)
            done.wait_send()
            done.wait_recv()

        pl.run_scoped(body, REGULAR, DMA, DMA)

    return kernel


def _permute(
    n: int, direction: str, *, mesh_shape: Any = None, names: Any = ("x",), in_spec: Any = None
) -> Build:
    kernel = _axis_index(direction, two_d=mesh_shape is not None)

    def build() -> Fn:
        def body(x: Any) -> Any:
            return pl.pallas_call(
                kernel,
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
            )(x)

        spec = P("x") if in_spec is None else in_spec
        m = mesh(mesh_shape or (n,), names)
        return jax.shard_map(body, mesh=m, in_specs=spec, out_specs=spec, check_vma=False)

    return build


def _barrier_semaphore(x_ref: Ref, y_ref: Ref) -> None:
    """test_barrier_semaphore: the barrier semaphore, then a ready handshake, then the copy."""

    def body(ready_sem: Ref, send_sem: Ref, recv_sem: Ref) -> None:
        me, n = lax.axis_index("x"), lax.axis_size("x")
        neighbor = lax.rem(me + 1, n)
        barrier_sem = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier_sem, device_id=neighbor)
        pl.semaphore_wait(barrier_sem)
        pl.semaphore_signal(ready_sem, device_id=neighbor)
        pl.semaphore_wait(ready_sem)
        pltpu.async_remote_copy(x_ref, y_ref, send_sem, recv_sem, device_id=neighbor).wait()

    pl.run_scoped(body, REGULAR, DMA, DMA)


def _barrier_all(x_ref: Ref, y_ref: Ref) -> None:
    """test_barrier_semaphore_no_axis_name: every device signals every device, then copies."""
    n = lax.axis_size("x")
    barrier_sem = pltpu.get_barrier_semaphore()
    for i in range(n):
        pl.semaphore_signal(barrier_sem, device_id=i)
    pl.semaphore_wait(barrier_sem, n)
    pltpu.sync_copy(x_ref, y_ref)


def _with_barrier(kernel: Any, n: int, rows: int) -> Build:
    def build() -> Fn:
        def body(x: Any) -> Any:
            return pl.pallas_call(
                kernel,
                in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                out_shape=jax.ShapeDtypeStruct((rows, 128), jnp.float32),
                compiler_params=pltpu.CompilerParams(collective_id=0),
            )(x)

        return jax.shard_map(
            body, mesh=mesh((n,), ("x",)), in_specs=P("x"), out_specs=P("x"), check_vma=False
        )

    return build


def _no_barrier_semaphore(n: int) -> Build:
    """test_no_barrier_semaphore: one kernel makes a semaphore, a second signals everyone on
    it (``skip_device_barrier``) and adds one."""

    def alloc_sem(_: Any) -> None:
        barrier_sem = pltpu.get_barrier_semaphore()
        for i in range(n):
            pl.semaphore_signal(barrier_sem, device_id=i)
        pl.semaphore_wait(barrier_sem, n)

    def barrier_kernel(x_ref: Ref, sem_ref: Ref, out_ref: Ref) -> None:
        for i in range(n):
            pl.semaphore_signal(sem_ref, device_id=i)
        pl.semaphore_wait(sem_ref, n)
        out_ref[...] = x_ref[...] + 1

    def build() -> Fn:
        def body(x: Any) -> Any:
            sem = pl.pallas_call(
                alloc_sem,
                in_specs=[],
                out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
                out_shape=pltpu.SemaphoreType.REGULAR(()),
                compiler_params=pltpu.CompilerParams(collective_id=0),
            )()
            return pl.pallas_call(
                barrier_kernel,
                in_specs=[
                    pl.BlockSpec(memory_space=pltpu.VMEM),
                    pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
                ],
                out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                compiler_params=pltpu.CompilerParams(skip_device_barrier=True),
            )(x, sem)

        return jax.shard_map(
            body, mesh=mesh((n,), ("x",)), in_specs=P("x"), out_specs=P("x"), check_vma=False
        )

    return build


def _zero_then_receive(n: int, *, asymmetric: bool) -> Build:
    """The interpret tests: zero the output, then a LOGICAL copy to the left neighbour (or, for
    the asymmetrical indexer, into row 1 from even devices and row 0 from odd ones)."""

    def ppermute(x_ref: Ref, o_ref: Ref, send_sem: Ref, recv_sem: Ref) -> None:
        o_ref[...] = jnp.zeros_like(o_ref[...])
        dst = lax.rem(lax.axis_index("x") + n - 1, n)
        copy = pltpu.make_async_remote_copy(
            x_ref, o_ref, send_sem, recv_sem, device_id=dst, device_id_type=LOGICAL
        )
        copy.start()
        copy.wait()

    def indexer(x_ref: Ref, o_ref: Ref, send_sem: Ref, recv_sem: Ref, barrier_sem: Ref) -> None:
        o_ref[...] = jnp.zeros_like(o_ref[...])
        me = lax.axis_index("x")
        even = lax.rem(me, 2)
        nxt = lax.rem(me + 1, n)
        del barrier_sem  # upstream's: remote signals were not supported in its HLO interpreter
        for cond, row in ((even, 1), (1 - even, 0)):

            @pl.when(cond)
            def _(row: Ref = row) -> None:
                dma = pltpu.make_async_remote_copy(
                    x_ref, o_ref.at[row], send_sem, recv_sem, device_id=nxt
                )
                dma.start()
                dma.wait()

    def build() -> Fn:
        kernel, out = (indexer, (2, 8, 128)) if asymmetric else (ppermute, (8, 128))
        scratch = [DMA, DMA, REGULAR] if asymmetric else [DMA, DMA]
        space = pltpu.VMEM if asymmetric else pl.ANY
        grid_spec = pltpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=0,
            in_specs=[pl.BlockSpec(memory_space=space)],
            out_specs=pl.BlockSpec(memory_space=space),
            scratch_shapes=scratch,
        )
        call = pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(out, jnp.float32), grid_spec=grid_spec
        )
        return jax.shard_map(
            call,
            mesh=mesh((n,), ("x",)),
            in_specs=P(None, "x"),
            out_specs=P(None, "x"),
            check_vma=False,
        )

    return build


def _verification(n: int) -> Build:
    """test_verification's kernel (a smoke test of upstream's Promela dump, skipped there): a
    ring all-reduce in a ``fori_loop`` over a double buffer, a capacity semaphore signalled to
    the device that sends here, the result replicated (``out_specs=P(None)``)."""

    def kernel(
        in_ref: Ref, out_ref: Ref, scratch_ref: Ref, send_sem: Ref, recv_sem: Ref, capacity_sem: Ref
    ) -> None:
        me = lax.axis_index("x")
        dst = jnp.where(me == n - 1, 0, me + 1)
        src = jnp.where(me == 0, n - 1, me - 1)
        pl.semaphore_signal(capacity_sem, 1, device_id=src)
        out_ref[...] = jnp.zeros_like(out_ref)
        scratch_ref[0] = in_ref[0]

        @functools.partial(lax.fori_loop, 0, n - 1, init_val=None)
        def _(i: Any, _: Any) -> None:
            slot = i % 2
            pl.semaphore_wait(capacity_sem, 1)
            copy = pltpu.async_remote_copy(
                scratch_ref.at[slot], scratch_ref.at[1 - slot], send_sem, recv_sem, device_id=dst
            )
            out_ref[...] += scratch_ref[slot]
            copy.wait()
            pl.semaphore_signal(capacity_sem, 1, device_id=src)

        out_ref[...] += scratch_ref[(n - 1) % 2]
        pl.semaphore_wait(capacity_sem, 1)

    def build() -> Fn:
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float32),
            scratch_shapes=[pltpu.VMEM((2, 128, 128), jnp.float32), DMA, DMA, REGULAR],
        )
        return jax.shard_map(
            call, mesh=mesh((n,), ("x",)), in_specs=P("x"), out_specs=P(None), check_vma=False
        )

    return build


def _rows_rolled(x: np.ndarray, shift: int, n: int) -> np.ndarray:
    return np.roll(x.reshape(n, -1, *x.shape[1:]), shift, axis=0).reshape(x.shape)


def cases() -> list[Case]:
    return [*_remote_dma(), *_permutes(), *_barriers_and_races()]


def _remote_dma() -> list[Case]:
    src = DISTRIBUTED_TEST
    return [
        Case(
            f"remote_dma_{name}",
            f"{src}::test_basic_remote_vmem_dma ({name})",
            (2,),
            lambda space=space: _basic_remote_dma(space),
            lambda: ints(1, (16, 128)),
            lambda x: _rows_rolled(x, 1, 2),
            upstream="error: its interpret mode fails on the kernel ('Primitive sub requires "
            "varying manual axes to match': 1 - axis_index under check_vma)",
        )
        for name, space in (("vmem", pltpu.VMEM), ("hbm", pl.ANY))
    ]


def _permutes() -> list[Case]:
    """Neighbours by ``axis_index``: a shift right or left, on one and two mesh axes."""
    src = DISTRIBUTED_TEST
    n4, n8 = 4, 8
    return [
        Case(
            "axis_index_right",
            f"{src}::test_pallas_call_axis_index (right)",
            (n4,),
            _permute(n4, "right"),
            lambda: ints(2, (n4 * 8, 128)),
            lambda x: _rows_rolled(x, 1, n4),
        ),
        Case(
            "axis_index_left_8",
            f"{src}::test_pallas_call_axis_index (left, 8 devices)",
            (n8,),
            _permute(n8, "left"),
            lambda: ints(3, (n8 * 8, 128)),
            lambda x: _rows_rolled(x, -1, n8),
        ),
        Case(
            "axis_index_2d_right",
            f"{src}::test_pallas_call_axis_index_2d_mesh (right)",
            (2, 2),
            _permute(2, "right", mesh_shape=(2, 2), names=("y", "x"), in_spec=P("x", None)),
            lambda: ints(4, (16, 128)),
            lambda x: _rows_rolled(x, 1, 2),
        ),
    ]


def _barriers_and_races() -> list[Case]:
    """Barrier semaphores, copies racing a write, and the verification ring."""
    src = DISTRIBUTED_TEST
    n4 = 4
    return [
        Case(
            "barrier_semaphore",
            f"{src}::test_barrier_semaphore",
            (n4,),
            _with_barrier(_barrier_semaphore, n4, 8),
            lambda: ints(5, (n4 * 8, 128)),
            lambda x: _rows_rolled(x, 1, n4),
        ),
        Case(
            "barrier_semaphore_all",
            f"{src}::test_barrier_semaphore_no_axis_name",
            (n4,),
            _with_barrier(_barrier_all, n4, 2),
            lambda: ints(6, (8, 128)),
            lambda x: x,
        ),
        Case(
            "no_barrier_semaphore",
            f"{src}::test_no_barrier_semaphore",
            (n4,),
            _no_barrier_semaphore(n4),
            lambda: ints(7, (n4 * 8, 128)),
            lambda x: x + 1,
            upstream="error: no interpret rule for a semaphore output ('NotImplementedError: "
            "nan + semaphore')",
        ),
        Case(
            "remote_dma_ppermute_zeroed",
            f"{src}::test_interpret_remote_dma_ppermute (left)",
            (n4,),
            _zero_then_receive(n4, asymmetric=False),
            lambda: ints(8, (8, n4 * 128)),
            None,
            expect="race",
            upstream="error: it refuses the kernel's direct write of an ANY (HBM) output "
            "('swap_p: Buffers with a memory space of HBM or ANY cannot be referenced "
            "directly'); upstream's test runs it under interpret=True, whose copies "
            "are collectives that order the zeroing",
        ),
        Case(
            "remote_dma_asymmetrical_indexer",
            f"{src}::test_interpret_remote_dma_asymmetrical_indexer",
            (n4,),
            _zero_then_receive(n4, asymmetric=True),
            lambda: ints(9, (8, n4 * 128)),
            None,
            expect="race",
            upstream="race: found by detect_races (upstream's comment: 'as written is racey')",
        ),
        Case(
            "verification_ring_all_reduce",
            f"{src}::test_verification",
            (n4,),
            _verification(n4),
            lambda: ints(10, (n4 * 2, 128, 128)),
            lambda x: x.reshape(n4, 2, 128, 128)[:, 0].sum(axis=0),
        ),
    ]
