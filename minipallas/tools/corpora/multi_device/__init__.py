"""A corpus of kernels that span devices (issue 47): Pallas TPU kernels in ``jax.shard_map`` over
a mesh of CPU devices, talking through remote copies (``pltpu.make_async_remote_copy``), remote
signals (``pl.semaphore_signal(..., device_id=...)``) and the barrier semaphore
(``pltpu.get_barrier_semaphore()`` with ``CompilerParams(collective_id=...)``).

Each case (``case.Case``) is a name, where it comes from, its mesh (4 and 8 devices, 2x2 and
2x4 meshes), the function, seeded inputs (small integers as float32, so sums are exact in any
order), a numpy reference, what it does (``ok``, or its planted bug: ``race``, ``deadlock``,
``wrong-count``), whether its communication is data-independent (``compilable``), and what
upstream's TPU interpret mode does with it (``upstream``). ``run`` runs one both ways.
``tests/difftest/test_device_corpus.py`` checks them all, in a subprocess with 8 CPU devices.

The corpus (``CASES``):

- ``remote_dma.py``, upstream's ``tpu_pallas_distributed_test.py``: two devices swapping
  shards (VMEM and HBM, LOGICAL ids, ``run_scoped`` semaphores), permutes left and right by
  ``axis_index`` on 4 and 8 devices and on a 2x2 mesh, the barrier semaphore (a neighbour, every
  device), a semaphore made by one kernel and used by the next, the ring all-reduce of
  ``test_verification`` (``fori_loop``, replicated result), and the two interpret tests that
  zero their output with nothing ordering it before the neighbour's copy (races);
- ``upstream_head.py``, tests upstream added since the pinned jax: dict device ids leaving an
  axis implicit or joining two (a 3-device mesh), ``pl.select_ref`` choosing a copy's source
  and semaphores, a ``core_map`` over each device's cores inside the ``shard_map``;
- ``guide.py``, the guide "Distributed Computing in Pallas for TPUs" as upstream's
  ``tpu_pallas_interpret_distributed_test.py`` runs it: right permute (4 and 8 devices), the
  gridded all-gather, all-reduce and bidirectional reduce-scatter, the race-detection test
  (a table in SMEM names the copies: data-dependent) with its racing table; upstream's shipped
  ``ops/tpu/all_gather`` on 4 and 8 devices and, as ``tpu_all_gather_test`` runs it, along one
  axis of a 2x4 mesh (two copies in flight on one receive semaphore: a race);
- ``own.py`` over ``rings.py`` and ``compute.py``, written here: a double-buffered ring
  all-reduce, all-to-all, an all-gather matmul (collective matmul), a reduce-scatter matmul, a
  ring-attention step, a bidirectional reduce-scatter, a bidirectional all-gather, a halo
  exchange, an all-gather along one axis of a 2-D mesh with dict ids, a recursive-doubling
  all-reduce with LOGICAL ids, a dissemination barrier and a token ring (remote signals only),
  a kernel that talks to no device run as many times as the device's position (upstream's
  TPU interpret mode hangs on it);
  and planted bugs in them: a handshake removed, a read before the receive wait, a write to a
  source before its send wait, one receive semaphore for every step (races); a token ring that
  waits first, a barrier that waits for one signal too many (deadlocks); a token never taken,
  a receive wait for half the copy (counts left at exit).

To add a case: write the kernel as a Pallas user would (a factory taking the device count and
any bug flag, returning a zero-argument ``build`` that makes the ``shard_map``: upstream picks
its interpret mode when ``pl.pallas_call`` runs), add a ``Case`` to its module's list with a
fresh seed and a numpy reference, run ``python tests/difftest/device_corpus_run.py NAME`` to see
both verdicts, record upstream's in ``upstream=`` and, if minipallas cannot do it yet, its
first line in the test's ``NOT_YET``. Never run a deadlock upstream: it hangs (and so does
``local_kernel_by_position``, a correct kernel: its ``upstream`` is ``hangs``).
"""

from minipallas.tools.corpora.multi_device import guide, own, remote_dma, run, upstream_head
from minipallas.tools.corpora.multi_device.case import EXPECTS, UPSTREAM_KINDS, Case

CASES: tuple[Case, ...] = (
    *remote_dma.cases(),
    *upstream_head.cases(),
    *guide.cases(),
    *own.correct(),
    *own.planted(),
)

__all__ = ["CASES", "EXPECTS", "UPSTREAM_KINDS", "Case", "run"]
