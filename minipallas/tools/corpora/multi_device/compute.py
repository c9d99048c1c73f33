"""The corpus's own kernels that compute while they communicate: an all-gather matmul, a
reduce-scatter matmul, a ring-attention step and a bidirectional all-gather (upstream's shipped
one, with a receive semaphore per step); and one that computes without communicating, as many
times as the device's position (``local_by_position``).

Each overlaps a remote copy with work on the block in hand: the copy of the next block starts
before the matmul on this one, and the capacity semaphore (``rings.py``) says when a
neighbour's buffer is free to be written again.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.tools.corpora.multi_device.case import (
    DMA,
    REGULAR,
    Build,
    P,
    Ref,
    mesh,
    on_mesh,
    shape,
)
from minipallas.tools.corpora.multi_device.rings import barrier, remote, ring, signal


def _pass_on(
    n: int, s: int, buf: Ref, send_sem: Ref, recv_sems: Ref, capacity: Ref, left: Any, right: Any
) -> Ref:
    """Start step s's copy of ``buf[s % 2]`` into the right neighbour's other slot (after its
    go-ahead from step 1 on); None at the last step, which has nothing to pass on."""
    if s == n - 1:
        return None
    if s >= 1:
        pl.semaphore_wait(capacity, 1)
    copy = remote(buf.at[s % 2], buf.at[(s + 1) % 2], send_sem, recv_sems.at[(s + 1) % 2], right)
    copy.start()
    return copy


def _done_with(n: int, s: int, copy: Ref, capacity: Ref, left: Any) -> None:
    """Wait for step s's copy both ways, then tell the left neighbour my slot is free."""
    if copy is None:
        return
    copy.wait_send()
    copy.wait_recv()
    if s < n - 2:
        signal(capacity, left)


def collective_matmul(n: int) -> Build:
    """All-gather matmul: rows of x go around the ring while each device multiplies the block in
    hand by its own columns of w, so out = x @ w with out's columns sharded as w's."""

    def kernel(
        x_ref: Ref, w_ref: Ref, o_ref: Ref, buf: Ref, send_sem: Ref, recv_sems: Ref, capacity: Ref
    ) -> None:
        me, left, right = ring(n)
        barrier([left, right])
        buf[0] = x_ref[...]
        for s in range(n):
            copy = _pass_on(n, s, buf, send_sem, recv_sems, capacity, left, right)
            block = lax.rem(me + n - s, n)  # buf[s % 2] holds x's rows of device me - s
            o_ref[pl.ds(block * 8, 8), :] = jnp.dot(
                buf[s % 2], w_ref[...], preferred_element_type=jnp.float32
            )
            _done_with(n, s, copy, capacity, left)

    scratch = [pltpu.VMEM((2, 8, 128), jnp.float32), DMA, DMA((2,)), REGULAR]
    return lambda: on_mesh(
        kernel,
        mesh((n,), ("x",)),
        shape(8 * n, 128),
        (P("x", None), P(None, "x")),
        P(None, "x"),
        scratch=scratch,
        n_in=2,
    )


def reduce_scatter_matmul(n: int) -> Build:
    """x @ w with the contraction sharded, reduced and scattered in one ring: step s computes
    this device's share of row block ``me + s + 1`` and adds it to the partial sum from the
    right; the sum of block d ends on device d."""

    def kernel(
        x_ref: Ref, w_ref: Ref, o_ref: Ref, stage: Ref, recv: Ref, send_sem: Ref, recv_sems: Ref
    ) -> None:
        me, left, right = ring(n)
        barrier([left, right])
        incoming = None
        for s in range(n):
            block = lax.rem(me + s + 1, n)
            part = jnp.dot(
                x_ref[pl.ds(block * 8, 8), :], w_ref[...], preferred_element_type=jnp.float32
            )
            if incoming is not None:
                incoming.wait_recv()
                part = part + recv[s - 1]
            if s == n - 1:
                o_ref[...] = part
                break
            stage[s] = part
            incoming = remote(stage.at[s], recv.at[s], send_sem, recv_sems.at[s], left)
            incoming.start()
            incoming.wait_send()

    k = n - 1
    scratch = [
        pltpu.VMEM((k, 8, 128), jnp.float32),
        pltpu.VMEM((k, 8, 128), jnp.float32),
        DMA,
        DMA((k,)),
    ]
    return lambda: on_mesh(
        kernel,
        mesh((n,), ("x",)),
        shape(8, 128),
        (P(None, "x"), P("x", None)),
        P("x", None),
        scratch=scratch,
        n_in=2,
    )


def ring_attention(n: int) -> Build:
    """One query block per device against every key/value block, passed around the ring in a
    double buffer, with the online softmax (running max, sum and accumulator)."""
    scale = 1.0 / 128**0.5

    def kernel(
        q_ref: Ref,
        k_ref: Ref,
        v_ref: Ref,
        o_ref: Ref,
        kv: Ref,
        send_sem: Ref,
        recv_sems: Ref,
        capacity: Ref,
    ) -> None:
        _, left, right = ring(n)
        barrier([left, right])
        kv[0, 0] = k_ref[...]
        kv[0, 1] = v_ref[...]
        q = q_ref[...]
        m = jnp.full((8, 1), -jnp.inf, jnp.float32)
        total = jnp.zeros((8, 1), jnp.float32)
        acc = jnp.zeros((8, 128), jnp.float32)
        for s in range(n):
            copy = _pass_on(n, s, kv, send_sem, recv_sems, capacity, left, right)
            k, v = kv[s % 2, 0], kv[s % 2, 1]
            scores = (
                lax.dot_general(q, k, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
                * scale
            )
            m_new = jnp.maximum(m, jnp.max(scores, axis=1, keepdims=True))
            p = jnp.exp(scores - m_new)
            correction = jnp.exp(m - m_new)
            total = total * correction + jnp.sum(p, axis=1, keepdims=True)
            acc = acc * correction + jnp.dot(p, v, preferred_element_type=jnp.float32)
            m = m_new
            _done_with(n, s, copy, capacity, left)
        o_ref[...] = acc / total

    scratch = [pltpu.VMEM((2, 2, 8, 128), jnp.float32), DMA, DMA((2,)), REGULAR]
    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(8, 128), (P("x"),) * 3, P("x"), scratch=scratch, n_in=3
    )


def bidirectional_all_gather(n: int) -> Build:
    """Upstream's shipped all-gather with one receive semaphore per step and direction: half of
    each shard goes around to the left, half to the right."""

    def kernel(
        x_ref: Ref, o_ref: Ref, local_sem: Ref, send_sems: Ref, lrecv: Ref, rrecv: Ref
    ) -> None:
        me, left, right = ring(n)
        local = pltpu.make_async_copy(x_ref, o_ref.at[me], local_sem)
        local.start()
        local.wait()
        barrier([left, right])
        for i in range(n - 1):
            rslot = lax.rem(me + n - i, n)
            lslot = lax.rem(me + i, n)
            copies = [
                remote(
                    o_ref.at[rslot, pl.ds(4, 4)],
                    o_ref.at[rslot, pl.ds(4, 4)],
                    send_sems.at[1],
                    rrecv.at[i],
                    right,
                ),
                remote(
                    o_ref.at[lslot, pl.ds(0, 4)],
                    o_ref.at[lslot, pl.ds(0, 4)],
                    send_sems.at[0],
                    lrecv.at[i],
                    left,
                ),
            ]
            for copy in copies:
                copy.start()
            for copy in copies:
                copy.wait()

    scratch = [DMA, DMA((2,)), DMA((n - 1,)), DMA((n - 1,))]
    return lambda: on_mesh(
        kernel, mesh((n,), ("x",)), shape(n, 8, 128), P("x"), P("x"), scratch=scratch
    )


def local_by_position(n: int) -> Build:
    """A kernel that talks to no other device, run in a loop of the body whose trip count is
    the device's position: device ``d`` doubles its shard ``d`` times. Correct on the chip;
    upstream's TPU interpret mode puts a barrier over every device before each kernel without a
    ``collective_id``, which the devices reach different numbers of times: it waits forever."""

    def double(x_ref: Ref, o_ref: Ref) -> None:
        o_ref[...] = x_ref[...] * 2.0

    def build() -> Any:
        call = pl.pallas_call(double, out_shape=shape(8, 128))

        def body(x: Any) -> Any:
            return lax.fori_loop(0, lax.axis_index("x"), lambda _, y: call(y), x)

        return jax.shard_map(body, mesh=mesh((n,), ("x",)), in_specs=P("x"), out_specs=P("x"),
                             check_vma=False)  # fmt: skip

    return build
