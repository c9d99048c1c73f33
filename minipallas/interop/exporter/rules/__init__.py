"""The exporter's rules, one file per family of ops; importing this package registers them all.

``to_jax``'s (``engine.RULES``, ``@rule("op", ...)``):

- ``arrays``: elementwise ops, shapes, reductions, ``dot``; ``control``: ``for``, ``while``,
  ``cond``, ``call``;
- ``indexing`` (windows, gathers, scatters), ``structural`` (``reverse``, ``pad``, scans,
  ``sort``...), ``lanes`` (the TPU's vector ops), ``debug`` (``debug_print``), ``collectives``
  (``axis_index``, ``exchange``: programs on every device of a mesh, under ``jax.shard_map``).

``emit``'s (``stateful.RULES``): ``emit``, every op over refs as upstream's own primitives,
sharing ``to_jax``'s rule where that is one upstream primitive.
"""

from minipallas.interop.exporter.rules import (  # noqa: F401  (each registers its rules)
    arrays,
    collectives,
    control,
    debug,
    emit,
    indexing,
    lanes,
    structural,
)
