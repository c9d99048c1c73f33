"""Import rules for the small primitives real ``jnp`` programs carry that compute little:

- ``stop_gradient`` (``jax.nn.softmax``, ``log_softmax``, ``logsumexp`` put one around their
  shift by the maximum), ``max_contiguous`` (Pallas Triton's hint that the first values are
  contiguous) and ``name`` (``ad_checkpoint.checkpoint_name``, a label for ``jax.checkpoint``'s
  policies) are the identity on values;
- ``multiple_of`` (``pl.multiple_of``: a promise that an integer is a multiple of ``n``) is
  the ``multiple_of`` op, which Mosaic reads (an index map's offset it can prove aligned);
- ``add_any`` (the sum of cotangents ``jax.grad`` makes) is ``add``;
- ``empty`` (``lax.empty``: a buffer whose contents are unspecified) is ``uninitialized``;
- ``reciprocal`` (``pl.reciprocal``) is the ``reciprocal`` op with its ``approx`` and
  ``full_range``, whose meaning off the chip is upstream's rule's there (``1 / x``, of ``x``
  rounded to bfloat16 with ``approx``).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import READ, SHARDING, NoEffect
from minipallas.interop.importer.rules.lax import identity, operands
from minipallas.ir.core import Value
from minipallas.lowering.compat.jax_private import core as jax_core

rule("stop_gradient", params={})(identity)
rule("name", params={"name": NoEffect("a label for jax.checkpoint's policies")})(identity)
rule(
    "max_contiguous",
    params={
        "values": NoEffect(
            "a promise to Triton's compiler that runs of values are contiguous; the values "
            "are the operand's, as upstream's interpret mode gives them"
        )
    },
)(identity)


@rule("multiple_of", params={"values": READ})
def multiple_of(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    values = tuple(eqn.params["values"])
    if len(values) != 1:
        raise scope.error(
            f"'multiple_of' with values={values} cannot be imported: minipallas's multiple_of "
            "holds one multiple",
            fix="promise one multiple: pl.multiple_of(x, n)",
        )
    x = scope.read(eqn.invars[0])
    return [scope.emit("multiple_of", [x], multiple=int(values[0]))]


@rule("add_any", params={})
def add_any(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    return [scope.emit("add", operands(scope, eqn))]


@rule("empty", params={"shape": READ, "dtype": READ, "out_sharding": SHARDING})
def empty(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """The shape and dtype are read through the result's type."""
    return [scope.emit("uninitialized", [], type=type_of(eqn.outvars[0].aval))]


@rule("reciprocal", params={"approx": READ, "full_range": READ})
def reciprocal(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    p = eqn.params
    op = scope.emit("reciprocal", [x], approx=bool(p["approx"]), full_range=bool(p["full_range"]))
    return [op]
