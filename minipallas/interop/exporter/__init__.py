"""Running minipallas under JAX: ``to_jax(fn)``, a minipallas function as a function of JAX arrays.

``engine`` discharges and cleans the function and evaluates it with one rule per op that calls
``jax.lax``, registered with ``@rule("op", ...)``; the other files hold the rules of one family
of ops each: ``indexing`` (windows, gathers, scatters), ``structural`` (``reverse``, ``pad``,
scans, ``sort``...), ``lanes`` (the TPU's vector ops), ``debug`` (``debug_print``), ``collectives``
(``axis_index``, ``exchange``: programs on every device of a mesh, under ``jax.shard_map``).
``roundings`` keeps XLA from merging the interpreter's roundings (``to_jax(fn, exact=True)``).

The exporter's second output, ``stateful.emit(fn)``, keeps the refs and writes upstream's own
primitives, for the differential tester to run through upstream's discharge; it shares the
rules above whose form is one upstream primitive, and says why the others differ.
"""

from minipallas.interop.exporter import (  # noqa: F401  (each registers its rules)
    collectives,
    debug,
    indexing,
    lanes,
    structural,
)
from minipallas.interop.exporter.engine import rule, to_jax

__all__ = ["rule", "to_jax"]
