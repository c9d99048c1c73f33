"""The interpreter's rules, one file per op family; each registers its rules in
``engine.RULES`` with ``@rule``, and importing this package registers them all.

- ``state``: ``get``, ``swap``, ``load``, ``store``, ``addupdate``; ``views``: ``ref.at`` and
  the ref transforms; ``scoped``: ``run_scoped``, ``uninitialized``;
- ``arrays``: elementwise math, shapes, reductions, ``dot`` (XLA's numbers, from ``xla/``);
  ``indexed``: windows of array values; ``layout``, ``lanes``, ``scans``, ``sorting``;
- ``control``: ``for``, ``while``, ``cond``, ``call``; ``kernel``: ``program_id``,
  ``num_programs``; ``platform``: ``platform_index``; ``debug``: ``debug_print``;
- ``dma``, ``semaphore``, ``atomic``: async copies, semaphores, atomic updates;
- ``collective``, ``exchange``, ``mesh``: what runs across devices and cores.

What several rule files share is machinery in the package above: the engine, ``windows``,
``races``, ``inflight``, ``programs``, ``bits`` and the ``xla`` numerics.
"""

from minipallas.ir.interpret.rules import (  # noqa: F401  (each registers its rules)
    arrays,
    atomic,
    collective,
    control,
    debug,
    dma,
    exchange,
    indexed,
    kernel,
    lanes,
    layout,
    mesh,
    platform,
    scans,
    scoped,
    semaphore,
    sorting,
    state,
    views,
)
