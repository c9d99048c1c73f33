"""Import rules for the small primitives real ``jnp`` programs carry that compute nothing new:

- ``stop_gradient`` (``jax.nn.softmax``, ``log_softmax``, ``logsumexp`` put one around their
  shift by the maximum), ``multiple_of`` (``pl.multiple_of``: a divisibility hint for the
  compiler), ``max_contiguous`` (Pallas Triton's hint that the first values are contiguous)
  and ``name`` (``ad_checkpoint.checkpoint_name``, a label for ``jax.checkpoint``'s policies)
  are the identity on values;
- ``add_any`` (the sum of cotangents ``jax.grad`` makes) is ``add``;
- ``empty`` (``lax.empty``: a buffer whose contents are unspecified) is ``uninitialized``;
- ``reciprocal`` (``pl.reciprocal``) is ``1 / x``, as upstream's rule off the chip computes it;
  ``approx=True`` there rounds ``x`` to bfloat16 and XLA:CPU keeps the quotient in float32
  (the round trip of the result through bfloat16 is folded away: measured bit for bit).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.lax import identity, operands
from minipallas.ir.core import Value
from minipallas.lowering.jax_private import core as jax_core

rule("stop_gradient", "multiple_of", "max_contiguous", "name")(identity)


@rule("add_any")
def add_any(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    return [scope.emit("add", operands(scope, eqn))]


@rule("empty")
def empty(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    return [scope.emit("uninitialized", [], type=type_of(eqn.outvars[0].aval))]


@rule("reciprocal")
def reciprocal(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    if eqn.params.get("approx"):
        x = scope.convert(scope.convert(x, "bfloat16"), x.type.dtype)
    one = scope.broadcast(scope.constant(1, x.type.dtype), x.type.shape)
    return [scope.emit("div", [one, x])]
