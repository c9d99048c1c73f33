"""The corpus's own communication kernels: rings, exchanges and barriers as a Pallas user writes
them, each with the flag that plants its classic bug (``own.py`` makes the cases).

Every kernel starts behind the barrier semaphore (each device signals the devices that will
write into it, then waits for as many signals), as a TPU kernel must before its first remote
copy. A receive buffer a neighbour writes more than once is guarded by a *capacity* semaphore
(the reader signals the writer when the slot is free again); one written once needs none. A
receive semaphore is one per slot: two copies in flight on one semaphore let a wait be
satisfied by the wrong one.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.tools.corpora.multi_device.case import (
    DMA,
    LOGICAL,
    MESH,
    REGULAR,
    Build,
    P,
    Ref,
    mesh,
    on_mesh,
    shape,
)


def ring(n: int, axis: str = "x") -> tuple:
    """This device's position on ``axis`` and its left and right neighbours there."""
    me = lax.axis_index(axis)
    return me, lax.rem(me + n - 1, n), lax.rem(me + 1, n)


def _device_id(to: Any, kind: Any) -> Any:
    """``to`` as upstream takes it: a LOGICAL number or a dict as is, a 1-D position as a tuple."""
    return to if kind == LOGICAL or isinstance(to, dict) else (to,)


def signal(sem: Ref, to: Any, inc: int = 1, kind: Any = MESH) -> None:
    """Signal ``sem`` on device ``to`` (a mesh position or dict, or a LOGICAL number)."""
    pl.semaphore_signal(sem, inc, device_id=_device_id(to, kind), device_id_type=kind)


def barrier(targets: Any, kind: Any = MESH, wait: int | None = None) -> None:
    """The barrier semaphore: signal every target, then wait for as many signals (or ``wait``)."""
    sem = pltpu.get_barrier_semaphore()
    for to in targets:
        signal(sem, to, kind=kind)
    pl.semaphore_wait(sem, len(targets) if wait is None else wait)


def remote(src: Ref, dst: Ref, send_sem: Ref, recv_sem: Ref, to: Any, kind: Any = MESH) -> Ref:
    """A remote copy of ``src`` into ``dst`` on device ``to``."""
    return pltpu.make_async_remote_copy(
        src, dst, send_sem, recv_sem, device_id=_device_id(to, kind), device_id_type=kind
    )


def ring_all_reduce(n: int, *, handshake: bool = True) -> Build:
    """A ring all-reduce through a double buffer: step s sends the block received last step on
    to the right while the capacity semaphore keeps the right neighbour from being overwritten
    before it has sent that slot on itself."""

    def kernel(
        x_ref: Ref, o_ref: Ref, buf: Ref, send_sem: Ref, recv_sems: Ref, capacity: Ref
    ) -> None:
        _, left, right = ring(n)
        barrier([left, right])
        buf[0] = x_ref[...]
        o_ref[...] = x_ref[...]
        for s in range(n - 1):
            slot, nxt = s % 2, (s + 1) % 2
            if handshake and s >= 1:
                pl.semaphore_wait(capacity, 1)  # the right neighbour sent its buf[nxt] on
            copy = remote(buf.at[slot], buf.at[nxt], send_sem, recv_sems.at[nxt], right)
            copy.start()
            copy.wait_recv()
            o_ref[...] += buf[nxt]
            copy.wait_send()
            if handshake and s < n - 2:
                signal(capacity, left)  # my buf[slot] is free for the left's next copy

    scratch = [pltpu.VMEM((2, 8, 128), jnp.float32), DMA, DMA((2,)), REGULAR]
    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(8, 128), P("x"), P("x"), scratch=scratch
    )


def bidirectional_reduce_scatter(n: int, *, shared_recv: bool = False) -> Build:
    """Block d of the sum ends on device d; the top half of each block travels right, the bottom
    half left, both at once, each step's partial sums into a fresh slot of the receiver."""

    def kernel(
        x_ref: Ref,
        o_ref: Ref,
        stage: Ref,
        rbuf: Ref,
        lbuf: Ref,
        send_sems: Ref,
        rrecv: Ref,
        lrecv: Ref,
    ) -> None:
        me, left, right = ring(n)
        barrier([left, right])
        incoming = []
        for s in range(n):
            b_right = lax.rem(me + 2 * n - s - 1, n)  # the block my top half works on
            b_left = lax.rem(me + s + 1, n)
            top = x_ref[b_right, pl.ds(0, 4), :]
            bottom = x_ref[b_left, pl.ds(4, 4), :]
            if incoming:
                for copy in incoming:
                    copy.wait_recv()
                top = top + rbuf[s - 1]
                bottom = bottom + lbuf[s - 1]
            if s == n - 1:
                o_ref[pl.ds(0, 4), :] = top
                o_ref[pl.ds(4, 4), :] = bottom
                break
            stage[s, 0] = top
            stage[s, 1] = bottom
            rsem = rrecv.at[0] if shared_recv else rrecv.at[s]
            lsem = lrecv.at[0] if shared_recv else lrecv.at[s]
            incoming = [
                remote(stage.at[s, 0], rbuf.at[s], send_sems.at[0], rsem, right),
                remote(stage.at[s, 1], lbuf.at[s], send_sems.at[1], lsem, left),
            ]
            for copy in incoming:
                copy.start()
            for copy in incoming:
                copy.wait_send()

    k = n - 1
    scratch = [
        pltpu.VMEM((k, 2, 4, 128), jnp.float32),
        pltpu.VMEM((k, 4, 128), jnp.float32),
        pltpu.VMEM((k, 4, 128), jnp.float32),
        DMA((2,)),
        DMA((k,)),
        DMA((k,)),
    ]
    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(8, 128), P("x"), P("x"), scratch=scratch
    )


def all_to_all(n: int, *, barrier_wait: int | None = None) -> Build:
    """Device d sends its block j to device j, into row d there; one receive semaphore per
    sender distance, so each wait is one sender's copy."""

    def kernel(x_ref: Ref, o_ref: Ref, send_sems: Ref, recv_sems: Ref) -> None:
        me = lax.axis_index("x")
        barrier([lax.rem(me + k, n) for k in range(1, n)], wait=barrier_wait)
        o_ref[me] = x_ref[me]
        copies = []
        for k in range(1, n):
            to = lax.rem(me + k, n)
            copies.append(remote(x_ref.at[to], o_ref.at[me], send_sems.at[k], recv_sems.at[k], to))
            copies[-1].start()
        for copy in copies:
            copy.wait_recv()
            copy.wait_send()

    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(n, 8, 128), P("x"), P("x"), scratch=[DMA((n,)), DMA((n,))]
    )


def all_gather_2d(ys: int, xs: int) -> Build:
    """A ring all-gather along "x" in every row of a ("y", "x") mesh, with dict device ids
    (``{"x": right}``: the target keeps this device's "y")."""

    def kernel(x_ref: Ref, o_ref: Ref, send_sem: Ref, recv_sems: Ref) -> None:
        me, left, right = ring(xs)
        barrier([{"x": left}, {"x": right}])
        o_ref[me] = x_ref[...]
        for s in range(xs - 1):
            slot = lax.rem(me + xs - s, xs)
            copy = remote(o_ref.at[slot], o_ref.at[slot], send_sem, recv_sems.at[s], {"x": right})
            copy.start()
            copy.wait_recv()
            copy.wait_send()

    return lambda: on_mesh(
        kernel,
        mesh((ys, xs), ("y", "x")),
        shape(xs, 8, 128),
        P("y", "x"),
        P("y", None, "x"),
        scratch=[DMA, DMA((xs - 1,))],
    )


def butterfly_all_reduce(ys: int, xs: int, *, early_write: bool = False) -> Build:
    """Recursive doubling over every device of a 2-D mesh with LOGICAL ids (the row-major
    number ``y * xs + x``): at stage k each device swaps partial sums with ``id ^ 2**k``."""
    stages = (ys * xs).bit_length() - 1

    def kernel(x_ref: Ref, o_ref: Ref, acc: Ref, recv: Ref, send_sems: Ref, recv_sems: Ref) -> None:
        me = lax.axis_index("y") * xs + lax.axis_index("x")
        partners = [lax.bitwise_xor(me, jnp.int32(1 << k)) for k in range(stages)]
        barrier(partners, kind=LOGICAL)
        acc[...] = x_ref[...]
        for k, partner in enumerate(partners):
            copy = remote(acc, recv.at[k], send_sems.at[k], recv_sems.at[k], partner, LOGICAL)
            copy.start()
            copy.wait_recv()
            if early_write:
                acc[...] += recv[k]  # the copy may still be reading acc
            copy.wait_send()
            if not early_write:
                acc[...] += recv[k]
        o_ref[...] = acc[...]

    scratch = [
        pltpu.VMEM((8, 128), jnp.float32),
        pltpu.VMEM((stages, 8, 128), jnp.float32),
        DMA((stages,)),
        DMA((stages,)),
    ]
    return lambda: on_mesh(
        kernel, mesh((ys, xs), ("y", "x")), shape(8, 128), P("y", "x"), P("y", "x"), scratch=scratch
    )


def dissemination_barrier(n: int) -> Build:
    """Remote semaphore signals only: round k signals ``me + 2**k`` and waits for one signal,
    so after log2(n) rounds every device has heard from every other."""
    rounds = (n - 1).bit_length()

    def kernel(x_ref: Ref, o_ref: Ref, sems: Ref) -> None:
        me = lax.axis_index("x")
        for k in range(rounds):
            signal(sems.at[k], lax.rem(me + (1 << k), n))
            pl.semaphore_wait(sems.at[k], 1)
        o_ref[...] = x_ref[...] * 2

    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(8, 128), P("x"), P("x"), scratch=[REGULAR((rounds,))]
    )


def token_ring(n: int, *, waits_first: bool = False, extra: int = 0) -> Build:
    """Signals only: device 0 sends a token right, each other device waits for it and passes it
    on, device 0 waits for its return. ``waits_first`` makes device 0 wait too (a deadlock);
    ``extra`` sends that many tokens more than anyone takes (a count left at exit)."""

    def kernel(x_ref: Ref, o_ref: Ref, sem: Ref) -> None:
        me, _, right = ring(n)

        @pl.when(me == 0)
        def _() -> None:
            if waits_first:
                pl.semaphore_wait(sem, 1)
            signal(sem, right, inc=1 + extra)
            pl.semaphore_wait(sem, 1)

        @pl.when(me != 0)
        def _() -> None:
            pl.semaphore_wait(sem, 1)
            signal(sem, right)

        o_ref[...] = x_ref[...] + 1

    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(8, 128), P("x"), P("x"), scratch=[REGULAR]
    )


def halo_exchange(n: int, *, early_read: bool = False) -> Build:
    """A 3-point stencil down the rows of a row-sharded array (periodic): each device sends its
    first row left and its last row right, then adds its neighbours' rows."""

    def kernel(x_ref: Ref, o_ref: Ref, halo: Ref, send_sems: Ref, recv_sems: Ref) -> None:
        _, left, right = ring(n)
        barrier([left, right])
        copies = [
            remote(x_ref.at[pl.ds(7, 1)], halo.at[0], send_sems.at[0], recv_sems.at[0], right),
            remote(x_ref.at[pl.ds(0, 1)], halo.at[1], send_sems.at[1], recv_sems.at[1], left),
        ]
        for copy in copies:
            copy.start()
        if not early_read:
            for copy in copies:
                copy.wait_recv()
        o_ref[...] = x_ref[...]
        o_ref[pl.ds(1, 7), :] += x_ref[pl.ds(0, 7), :]
        o_ref[pl.ds(0, 7), :] += x_ref[pl.ds(1, 7), :]
        o_ref[pl.ds(0, 1), :] += halo[0]
        o_ref[pl.ds(7, 1), :] += halo[1]
        for copy in copies:
            if early_read:
                copy.wait_recv()
            copy.wait_send()

    scratch = [pltpu.VMEM((2, 1, 128), jnp.float32), DMA((2,)), DMA((2,))]
    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(8, 128), P("x"), P("x"), scratch=scratch
    )


def permute_reading_source(n: int) -> Build:
    """A right permute that adds the shard it sends to the one it received before its send wait:
    reading a copy's source while the copy is in flight is allowed (only a write races)."""

    def kernel(x_ref: Ref, o_ref: Ref, send_sem: Ref, recv_sem: Ref) -> None:
        _, left, right = ring(n)
        barrier([left, right])
        copy = remote(x_ref, o_ref, send_sem, recv_sem, right)
        copy.start()
        copy.wait_recv()
        o_ref[...] += x_ref[...]
        copy.wait_send()

    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(8, 128), P("x"), P("x"), scratch=[DMA, DMA]
    )


def short_wait(n: int) -> Build:
    """A right permute whose receive wait names half the copy: the semaphore keeps the other
    half's count at exit."""

    def kernel(x_ref: Ref, o_ref: Ref, send_sem: Ref, recv_sem: Ref) -> None:
        _, left, right = ring(n)
        barrier([left, right])
        copy = remote(x_ref, o_ref, send_sem, recv_sem, right)
        copy.start()
        copy.wait_send()
        remote(x_ref.at[pl.ds(0, 4)], o_ref.at[pl.ds(0, 4)], send_sem, recv_sem, right).wait_recv()

    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(8, 128), P("x"), P("x"), scratch=[DMA, DMA], space=pl.ANY
    )
