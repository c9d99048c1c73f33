"""The Triton rules, one file per op family; each registers its rules in ``context.RULES`` with
``@rule``, and importing this package registers them all.

- ``state``: the state ops and views on a kernel operand's block (pointer tensors, masked
  ``tt.load``/``tt.store``); ``atomic``: ``tt.atomic_rmw``, ``tt.atomic_cas``;
- ``arrays``: ``arith``/``math`` elementwise, shapes, ``tt.reduce``, ``tt.dot``;
  ``indexed``: windows of register arrays (discharged scratch);
- ``control``: ``scf`` loops and conditionals, calls inlined, ``run_scoped`` (the rule shared
  with StableHLO, ``lowering/scoped.py``), ``uninitialized``;
- ``kernel``: ``program_id``, ``num_programs``;
- ``scans``, ``sorting``, ``layout``, ``lanes``, ``debug``: what upstream Pallas's Triton
  lowering has, and what it refuses, refused with a way around it.

What several rule files share lives in the package above: the context (with ``BlockRef``,
the environment's entry for a ref), ``emit`` (types, constants, casts), ``unsupported``.
"""

from minipallas.lowering.gpu.rules import (  # noqa: F401  (each registers its rules)
    arrays,
    atomic,
    control,
    debug,
    indexed,
    kernel,
    lanes,
    layout,
    scans,
    sorting,
    state,
)
