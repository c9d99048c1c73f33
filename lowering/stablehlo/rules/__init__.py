"""The StableHLO rules, one file per op family; each registers its rules in ``context.RULES``
with ``@rule``, and importing this package registers them all.

- ``arrays``: elementwise math (rounded as upstream's lowering rounds it), shapes, reductions,
  ``dot``; ``indexed``: slices, dynamic slices and updates, gathers, scatters;
- ``control``: ``for``, ``while``, ``cond`` (``stablehlo.while``/``case``), ``call``
  (``func.call`` of a private function); ``scoped``: ``run_scoped`` (the rule shared with
  Triton, ``lowering/scoped.py``), ``uninitialized``;
- ``kernel``: the grid and collective ops, refused (a kernel's CPU program binds them before
  it gets here); ``platform``: ``platform_index``;
- ``layout``: ``reverse``, ``pad``; ``lanes``: ``roll``, ``packed_bitcast``; ``scans``,
  ``sorting``; ``debug``: ``debug_print`` as a host callback; ``exchange`` (a collective of
  every device of a mesh), refused.

What several rule files share lives in the package above: the context, ``emit`` (types,
constants, casts).
"""

from minipallas.lowering.stablehlo.rules import (  # noqa: F401  (each registers its rules)
    arrays,
    control,
    debug,
    exchange,
    indexed,
    kernel,
    lanes,
    layout,
    platform,
    scans,
    scoped,
    sorting,
)
