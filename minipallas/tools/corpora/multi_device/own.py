"""The corpus's own kernels (``rings.py``, ``compute.py``) as cases, correct and with their bugs
planted, each with its numpy reference (what a correct kernel computes)."""

from __future__ import annotations

import numpy as np

from minipallas.tools.corpora.multi_device import compute, rings
from minipallas.tools.corpora.multi_device.case import OWN, Case, blocks, ints


def _sum_tiled(x: np.ndarray, n: int) -> np.ndarray:
    return np.tile(sum(blocks(x, n)), (n, 1))


def _reduce_scatter(x: np.ndarray, n: int) -> np.ndarray:
    parts = x.reshape(n, n, 8, 128)
    return np.concatenate([parts[:, d].sum(axis=0) for d in range(n)])


def _all_to_all(x: np.ndarray, n: int) -> np.ndarray:
    return x.reshape(n, n, 8, 128).transpose(1, 0, 2, 3).reshape(x.shape)


def _gather_rows(x: np.ndarray, ys: int, xs: int) -> np.ndarray:
    """Every device of row y holds the blocks of row y, its columns sharded along "x"."""
    grid = x.reshape(ys, 8, xs, 128).transpose(0, 2, 1, 3)  # [y, j] = block (y, j)
    return np.concatenate(
        [np.tile(grid[y][:, :, None, :], (1, 1, xs, 1)).reshape(xs, 8, -1) for y in range(ys)]
    )


def _sum_of_blocks(x: np.ndarray, ys: int, xs: int) -> np.ndarray:
    total = x.reshape(ys, 8, xs, 128).sum(axis=(0, 2))
    return np.tile(total, (ys, xs))


def _stencil(x: np.ndarray) -> np.ndarray:
    return np.roll(x, 1, axis=0) + x + np.roll(x, -1, axis=0)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    scores = (q @ k.T) / np.float32(128**0.5)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return ((p / p.sum(axis=1, keepdims=True)) @ v).astype(np.float32)


def _attention_inputs(seed: int, n: int) -> tuple:
    q, k, v = ints(seed, (8 * n, 128), (8 * n, 128), (8 * n, 128))
    return q * np.float32(0.125), k * np.float32(0.125), v


def correct() -> list[Case]:
    out = [case for n in (4, 8) for case in _on_rings_of(n)]
    out += [case for ys, xs in ((2, 2), (2, 4)) for case in _on_2d_mesh(ys, xs)]
    return out + _on_fixed_meshes()


def _on_rings_of(n: int) -> list[Case]:
    """Kernels that take any number of devices in a ring, on ``n``."""
    return [
        Case(
            f"ring_all_reduce_{n}",
            f"{OWN}: double-buffered ring all-reduce",
            (n,),
            rings.ring_all_reduce(n),
            lambda n=n: ints(20 + n, (8 * n, 128)),
            lambda x, n=n: _sum_tiled(x, n),
        ),
        Case(
            f"all_to_all_{n}",
            f"{OWN}: all-to-all, a receive semaphore per sender",
            (n,),
            rings.all_to_all(n),
            lambda n=n: ints(30 + n, (n * n, 8, 128)),
            lambda x, n=n: _all_to_all(x, n),
        ),
        Case(
            f"reduce_scatter_matmul_{n}",
            f"{OWN}: matmul with a reduce-scatter over its contraction",
            (n,),
            compute.reduce_scatter_matmul(n),
            lambda n=n: ints(100 + n, (8 * n, 128 * n), (128 * n, 128)),
            lambda x, w: x @ w,
        ),
        Case(
            f"collective_matmul_{n}",
            f"{OWN}: all-gather matmul overlapping the ring",
            (n,),
            compute.collective_matmul(n),
            lambda n=n: ints(40 + n, (8 * n, 128), (128, 128 * n)),
            lambda x, w: x @ w,
        ),
    ]


def _on_2d_mesh(ys: int, xs: int) -> list[Case]:
    tag = f"{ys}x{xs}"
    return [
        Case(
            f"all_gather_2d_{tag}",
            f"{OWN}: all-gather along x of a 2-D mesh, dict ids",
            (ys, xs),
            rings.all_gather_2d(ys, xs),
            lambda ys=ys, xs=xs: ints(50 + xs, (8 * ys, 128 * xs)),
            lambda x, ys=ys, xs=xs: _gather_rows(x, ys, xs),
        ),
        Case(
            f"butterfly_all_reduce_{tag}",
            f"{OWN}: recursive-doubling all-reduce, LOGICAL ids over a 2-D mesh",
            (ys, xs),
            rings.butterfly_all_reduce(ys, xs),
            lambda ys=ys, xs=xs: ints(60 + xs, (8 * ys, 128 * xs)),
            lambda x, ys=ys, xs=xs: _sum_of_blocks(x, ys, xs),
        ),
    ]


def _on_fixed_meshes() -> list[Case]:
    """Kernels written for one mesh size."""
    return [
        Case(
            "bidirectional_reduce_scatter",
            f"{OWN}: bidirectional ring reduce-scatter",
            (4,),
            rings.bidirectional_reduce_scatter(4),
            lambda: ints(69, (16, 8, 128)),
            lambda x: _reduce_scatter(x, 4),
        ),
        Case(
            "ring_attention",
            f"{OWN}: ring attention, online softmax",
            (4,),
            compute.ring_attention(4),
            lambda: _attention_inputs(72, 4),
            _attention,
            atol=1e-5,
        ),
        Case(
            "bidirectional_all_gather",
            f"{OWN}: the shipped all-gather with a receive semaphore per step",
            (4,),
            compute.bidirectional_all_gather(4),
            lambda: ints(73, (32, 128)),
            lambda x: np.tile(x.reshape(4, 8, 128), (4, 1, 1)),
        ),
        Case(
            "halo_exchange",
            f"{OWN}: 3-point stencil with a halo exchange",
            (4,),
            rings.halo_exchange(4),
            lambda: ints(74, (32, 128)),
            _stencil,
        ),
        Case(
            "permute_reading_source",
            f"{OWN}: a permute that reads what it sends before the send wait",
            (4,),
            rings.permute_reading_source(4),
            lambda: ints(77, (32, 128)),
            lambda x: np.roll(x, 8, axis=0) + x,
        ),
        Case(
            "dissemination_barrier",
            f"{OWN}: remote semaphore signals only, a dissemination barrier",
            (8,),
            rings.dissemination_barrier(8),
            lambda: ints(75, (64, 128)),
            lambda x: x * 2,
        ),
        Case(
            "token_ring",
            f"{OWN}: remote semaphore signals only, a token passed round",
            (4,),
            rings.token_ring(4),
            lambda: ints(76, (32, 128)),
            lambda x: x + 1,
        ),
        Case(
            "local_kernel_by_position",
            f"{OWN}: a kernel that talks to no device, run as many times as the device's position",
            (4,),
            compute.local_by_position(4),
            lambda: ints(78, (32, 128)),
            lambda x: x * np.repeat(2.0 ** np.arange(4, dtype=np.float32), 8)[:, None],
            upstream="hangs: its TPU interpret mode puts a barrier over every device before each "
            "kernel without a collective_id, which the devices reach 0, 1, 2 and 3 times",
        ),
    ]


def planted() -> list[Case]:
    """The classic bugs, each planted in one of the kernels above."""
    planted_in = f"{OWN}, planted:"
    return _planted_races(planted_in) + _planted_miscounts(planted_in)


def _planted_races(planted_in: str) -> list[Case]:
    """Copies whose ordering is missing: a handshake, a wait, a semaphore of their own."""
    return [
        Case(
            "ring_all_reduce_no_handshake",
            f"{planted_in} capacity handshake removed",
            (4,),
            rings.ring_all_reduce(4, handshake=False),
            lambda: ints(80, (32, 128)),
            lambda x: _sum_tiled(x, 4),
            expect="race",
            upstream="race: found by detect_races",
        ),
        Case(
            "halo_read_before_wait_recv",
            f"{planted_in} halo read before its receive wait",
            (4,),
            rings.halo_exchange(4, early_read=True),
            lambda: ints(81, (32, 128)),
            _stencil,
            expect="race",
            upstream="race: found by detect_races",
        ),
        Case(
            "butterfly_write_source_before_wait_send",
            f"{planted_in} the sent buffer updated before the send wait",
            (2, 2),
            rings.butterfly_all_reduce(2, 2, early_write=True),
            lambda: ints(82, (16, 256)),
            lambda x: _sum_of_blocks(x, 2, 2),
            expect="race",
            upstream="race: found by detect_races",
        ),
        Case(
            "reduce_scatter_shared_recv_sem",
            f"{planted_in} one receive semaphore for every step's copy",
            (4,),
            rings.bidirectional_reduce_scatter(4, shared_recv=True),
            lambda: ints(83, (16, 8, 128)),
            lambda x: _reduce_scatter(x, 4),
            expect="race",
            upstream="ok|race|wrong: it varies between runs: right values, its race "
            "detector's report, or NaNs where a wait was satisfied by the wrong copy",
        ),
    ]


def _planted_miscounts(planted_in: str) -> list[Case]:
    """Semaphores counted wrong: a wait that never returns, or a count left at the end."""
    return [
        Case(
            "token_ring_waits_first",
            f"{planted_in} device 0 waits for the token before sending it",
            (4,),
            rings.token_ring(4, waits_first=True),
            lambda: ints(84, (32, 128)),
            None,
            expect="deadlock",
            upstream="not-run: it hangs there with no report (tried once: killed after 30 s)",
        ),
        Case(
            "all_to_all_waits_for_too_many",
            f"{planted_in} the barrier waits for one signal more than it gets",
            (4,),
            rings.all_to_all(4, barrier_wait=4),
            lambda: ints(85, (16, 8, 128)),
            None,
            expect="deadlock",
            upstream="not-run: it hangs there with no report (tried once: killed after 30 s)",
        ),
        Case(
            "token_ring_extra_token",
            f"{planted_in} device 0 sends two tokens, one is never taken",
            (4,),
            rings.token_ring(4, extra=1),
            lambda: ints(86, (32, 128)),
            lambda x: x + 1,
            expect="wrong-count",
            upstream="wrong-count: it prints the count left at exit (1)",
        ),
        Case(
            "permute_short_wait",
            f"{planted_in} the receive wait names half the copy",
            (4,),
            rings.short_wait(4),
            lambda: ints(87, (32, 128)),
            lambda x: np.roll(x, 8, axis=0),
            expect="wrong-count",
            upstream="wrong-count: it prints the count left at exit (2048 bytes)",
        ),
    ]
