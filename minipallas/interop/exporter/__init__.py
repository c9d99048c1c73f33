"""Running minipallas under JAX: ``to_jax(fn)``, a minipallas function as a function of JAX arrays.

The exporter has two outputs, each an engine that runs the IR op by op on JAX values, and one
room of rules for both (``rules/``, its ``__init__`` lists them):

- ``engine``: ``to_jax``, which discharges and cleans the function and evaluates it with one
  rule per op that calls ``jax.lax`` (``@rule("op", ...)``), each meaning what the interpreter
  means on every backend; ``roundings`` keeps XLA from merging the interpreter's roundings
  (``to_jax(fn, exact=True)``);
- ``stateful``: ``emit(fn)``, which keeps the refs and writes upstream's own primitives, for the
  differential tester to run through upstream's discharge; it shares ``to_jax``'s rules whose
  form is one upstream primitive, and says why the others differ.
"""

from minipallas.interop.exporter import rules  # noqa: F401  (registers every rule)
from minipallas.interop.exporter.engine import rule, to_jax

__all__ = ["rule", "to_jax"]
