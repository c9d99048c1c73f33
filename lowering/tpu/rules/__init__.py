"""The Mosaic TPU rules, one file per op family; each registers its rules in ``context.RULES``
with ``@rule``, and importing this package registers them all.

- ``state``: ``get``, ``swap``, ``load``, ``store``, ``addupdate`` (``vector.load``,
  ``tpu.vector_store``; SMEM through ``memref``); ``views``: ``ref.at`` and the ref transforms;
- ``arrays``: elementwise math, shapes, reductions, ``reciprocal``, ``multiple_of``; ``dot``:
  ``tpu.matmul`` as upstream's ``dot_general``; ``indexed``: windows of register
  values; ``layout``: ``reverse``, ``pad``; ``lanes``: ``roll``, ``packed_bitcast``;
- ``control``: ``for``, ``while``, ``cond``, ``call``; ``scoped``: ``run_scoped`` (a
  ``tpu.region``), ``uninitialized``;
- ``kernel``: ``program_id``, ``num_programs``; ``platform``: ``platform_index``;
- ``dma``: ``dma_start``, ``dma_wait``; ``semaphore``: the semaphore ops; ``remote``: one
  device's program of a kernel that spans devices (its own context and rules: remote copies,
  signals, the barrier semaphore);
- ``scans``, ``sorting``, ``debug``: what upstream Pallas TPU refuses, refused with a way
  around it (``argmax`` and ``argmin`` lowered).

What several rule files share lives in the package above: the context, ``emit`` (types,
constants, casts), ``windows``, ``pieces``, ``widen``.
"""

from minipallas.lowering.tpu.rules import (  # noqa: F401  (each registers its rules)
    arrays,
    control,
    debug,
    dma,
    dot,
    indexed,
    kernel,
    lanes,
    layout,
    platform,
    remote,
    scans,
    scoped,
    semaphore,
    sorting,
    state,
    views,
)
