"""A corpus of multi-core Pallas TPU mesh kernels, written the way upstream JAX 0.10.2 writes them.

Each kernel is a ``pl.kernel`` over ``pltpu.create_tensorcore_mesh("core", num_cores=cores)``
whose cores talk through ``pl.run_scoped(..., collective_axes="core")`` allocations: one
``VMEM_SHARED`` buffer that every core sees, and semaphores of which every core has its own copy
(``pl.semaphore_signal(sem, 1, core_index=k)`` increments core k's). Upstream cannot run them:
its lowering and its interpret mode both raise on a collective ``run_scoped``. As real TensorCore
kernels must, they move data between HBM, ``VMEM_SHARED`` and per-core ``VMEM`` with DMAs
(``pltpu.sync_copy``, ``pltpu.make_async_copy``) and compute only on per-core VMEM (and SMEM
scalars). Every output is a one-element tuple (or longer), like the references.

``CASES`` registers every kernel at 2 cores (some also at 4) with what should happen when all cores
run concurrently: "ok" kernels come with a numpy reference (same float32 operations in the same
order; data are small integers, so sums and dots are exact whatever the order), "race" kernels
let two cores touch one element unordered (one writing), "deadlock" kernels leave some core
blocked in a barrier or wait. ``ONE_CORE`` holds the "ok" kernels built at one core, with
(8k, 128) f32/int32 blocks, for a real single-TensorCore chip. ``exact=False`` marks the kernels
that use ``exp`` or ``rsqrt``, whose results match their references only up to rounding.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import numpy as np

from minipallas.tools.corpora.mesh_corpus.collectives import (
    _all_gather,
    _all_gather_ref,
    _all_to_all,
    _all_to_all_ref,
    _allreduce_sum,
    _allreduce_sum_ref,
    _prefix_chain,
    _prefix_chain_ref,
    _prefix_sum,
    _prefix_sum_ref,
    _reduce_scatter,
    _reduce_scatter_ref,
    _ring_allreduce,
    _ring_allreduce_ref,
)
from minipallas.tools.corpora.mesh_corpus.common import MeshCase
from minipallas.tools.corpora.mesh_corpus.kernels import (
    _broadcast_tile,
    _broadcast_tile_ref,
    _double_buffer,
    _double_buffer_ref,
    _gather_rows,
    _gather_rows_ref,
    _histogram,
    _histogram_ref,
    _layer_norm,
    _layer_norm_ref,
    _producer_consumer,
    _producer_consumer_ref,
    _shared_weight_matmul,
    _shared_weight_matmul_ref,
    _softmax,
    _softmax_ref,
    _splitk_matmul,
    _splitk_matmul_ref,
)

# --- registry ---


@dataclasses.dataclass(frozen=True)
class _Kernel:
    name: str
    builder: Callable[[int], tuple[Callable, tuple[np.ndarray, ...]]]
    reference: Callable[..., tuple[np.ndarray, ...]] | None
    cores: tuple[int, ...]
    what: str
    expect: str = "ok"
    exact: bool = True

    def at(self, cores: int) -> MeshCase:
        ref = None if self.reference is None else functools.partial(self.reference, cores)
        return MeshCase(
            name=f"{self.name}_x{cores}",
            cores=cores,
            build=functools.partial(self.builder, cores),
            reference=ref,
            expect=self.expect,
            what=self.what,
            exact=self.exact,
        )


def _bug(builder, **kw):
    return functools.partial(builder, **kw)


_KERNELS = [
    _Kernel("allreduce_sum", _allreduce_sum, _allreduce_sum_ref, (2, 4),
            "each core sums its 4 tiles, partials through VMEM_SHARED, barrier, all read all"),
    _Kernel("splitk_matmul", _splitk_matmul, _splitk_matmul_ref, (2, 4),
            "core c multiplies K-block c into VMEM_SHARED, barrier, each core sums its row block"),
    _Kernel("producer_consumer", _producer_consumer, _producer_consumer_ref, (2, 4),
            "core 0 streams 4 tiles to the last core through 2 shared slots, full/empty sems"),
    _Kernel("layer_norm", _layer_norm, _layer_norm_ref, (2,),
            "features split across cores; row sum and sum of squares exchanged; normalize",
            exact=False),
    _Kernel("double_buffer", _double_buffer, _double_buffer_ref, (2,),
            "per-core double-buffered HBM->VMEM pipeline with async copies and DMA sems"),
    _Kernel("all_gather", _all_gather, _all_gather_ref, (2, 4),
            "int32 all-gather through VMEM_SHARED; core c writes gathered + c"),
    _Kernel("reduce_scatter", _reduce_scatter, _reduce_scatter_ref, (2, 4),
            "int32 reduce-scatter: contributions in VMEM_SHARED, core c sums block c"),
    _Kernel("ring_allreduce", _ring_allreduce, _ring_allreduce_ref, (2, 4),
            "ring all-reduce: tile to right neighbour's mailbox, remote recv signal, acks left"),
    _Kernel("prefix_sum", _prefix_sum, _prefix_sum_ref, (2, 4),
            "int32 inclusive scan of blocks: publish, barrier, fori_loop over 0..c"),
    _Kernel("prefix_chain", _prefix_chain, _prefix_chain_ref, (2, 4),
            "scan as a chain: core c waits for c-1's prefix, adds its block, signals c+1"),
    _Kernel("histogram", _histogram, _histogram_ref, (2,),
            "int32 per-lane histogram of 8 bins; core 0 sums every core's counts"),
    _Kernel("softmax", _softmax, _softmax_ref, (2, 4),
            "row softmax with columns split across cores: max and sum exchanged, 2 barriers",
            exact=False),
    _Kernel("gather_rows", _gather_rows, _gather_rows_ref, (2,),
            "embedding gather: indices and per-core scales DMA'd to SMEM, row DMAs"),
    _Kernel("all_to_all", _all_to_all, _all_to_all_ref, (2, 4),
            "int32 all-to-all: chunk k of core c to core k's inbox slot c, barrier"),
    _Kernel("shared_weight_matmul", _shared_weight_matmul, _shared_weight_matmul_ref, (2,),
            "core 0 async-copies the weight into VMEM_SHARED, barrier, every core relu(x @ w)"),
    _Kernel("broadcast_tile", _broadcast_tile, _broadcast_tile_ref, (2, 4),
            "core 0 DMAs a bias tile to VMEM_SHARED, waits, remote-signals every other core"),
    # Races.
    _Kernel("race_allreduce_no_barrier", _bug(_allreduce_sum, barrier=False), None, (2,),
            "allreduce_sum without the core_barrier: cores read partials others still write",
            expect="race"),
    _Kernel("race_softmax_reused_stats", _bug(_softmax, separate_sum_buffer=False), None, (2,),
            "softmax writing row sums into the maxes buffer other cores may still be reading",
            expect="race"),
    _Kernel("race_signal_before_dma_wait", _bug(_broadcast_tile, signal_early=True), None, (2,),
            "broadcast_tile signalling before the DMA into VMEM_SHARED is waited on",
            expect="race"),
    _Kernel("race_gather_same_rows", _bug(_all_gather, offset=False), None, (2,),
            "all_gather where every core writes its (different) copy over out[0]",
            expect="race"),
    _Kernel("race_ring_no_ack", _bug(_ring_allreduce, ack=False), None, (4,),
            "ring_allreduce without acks: a core refills a mailbox its owner has not read",
            expect="race"),
    # Deadlocks.
    _Kernel("deadlock_barrier_in_when", _bug(_histogram, barrier_everywhere=False), None,
            (2,), "histogram with the core_barrier inside pl.when(core == 0)",
            expect="deadlock"),
    _Kernel("deadlock_wait_too_many", _bug(_broadcast_tile, wait_value=2), None, (2,),
            "broadcast_tile whose receivers wait for 2 signals; core 0 sends each one",
            expect="deadlock"),
    _Kernel("deadlock_ring_recv_first", _bug(_ring_allreduce, send_first=False), None, (2,),
            "ring_allreduce where every core waits for its left neighbour before sending",
            expect="deadlock"),
    _Kernel("deadlock_signal_self", _bug(_producer_consumer, remote=False), None, (2,),
            "producer_consumer whose producer signals its own semaphore (no core_index)",
            expect="deadlock"),
]  # fmt: skip


CASES: list[MeshCase] = [k.at(cores) for k in _KERNELS for cores in k.cores]


ONE_CORE: list[MeshCase] = [k.at(1) for k in _KERNELS if k.expect == "ok"]


_BY_NAME = {k.name: k for k in _KERNELS}


def one_core(case: MeshCase) -> MeshCase:
    """``case``'s kernel built at one core (its references are written for any core count)."""
    return _BY_NAME[case.name.rsplit("_x", 1)[0]].at(1)


def _check(case: MeshCase) -> str:
    f, args = case.build()
    closed = jax.make_jaxpr(f)(*args)
    outs = jax.eval_shape(f, *args)
    assert isinstance(outs, (tuple, list)), case.name
    if case.reference is None:
        assert case.expect in ("race", "deadlock"), case.name
        return f"{case.name}: traced ({len(closed.jaxpr.eqns)} eqns), expect {case.expect}"
    assert case.expect == "ok", case.name
    refs = case.reference(*args)
    assert isinstance(refs, tuple) and len(refs) == len(outs), case.name
    for got, want in zip(refs, outs, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype, (case.name, got, want)
        assert np.all(np.isfinite(got)), case.name
    return f"{case.name}: traced, reference {[r.shape for r in refs]}"
