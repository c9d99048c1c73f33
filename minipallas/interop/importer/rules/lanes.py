"""Import rules for upstream's TPU vector primitives (``pltpu.roll``, ``pltpu.bitcast`` as
``packed_bitcast``) and for ``platform_index`` (``lax.platform_dependent``, which
``jnp.diagonal`` uses).

``roll``'s shift becomes an i32 scalar operand (a Python int in the jaxpr is a literal).
``platform_index`` keeps its branches' platforms: each lowering picks the branch for its
platform. Their ``to_jax`` rules are in ``exporter/rules/lanes.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import dtype_of
from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import READ
from minipallas.ir.core import Value
from minipallas.lowering.compat.jax_private import core as jax_core


@rule("roll", params={"axis": READ, "stride": READ, "stride_axis": READ})
def roll(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x, shift = (scope.read(a) for a in eqn.invars)
    p = eqn.params
    stride = () if p["stride"] is None else (int(p["stride"]), int(p["stride_axis"]))
    shift = scope.convert(shift, "int32")
    return [scope.emit("roll", [x, shift], axis=int(p["axis"]), stride=stride)]


@rule("platform_index", params={"platforms": READ})
def platform_index(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    platforms = tuple(None if ps is None else tuple(map(str, ps)) for ps in eqn.params["platforms"])
    index = scope.emit("platform_index", [], platforms=platforms)
    scope.nonnegative.add(index)  # a branch number: the cond that reads it needs no wrap
    return [index]


@rule("bitcast", params={"ty": READ})
def bitcast(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    x = scope.read(eqn.invars[0])
    dtype = dtype_of(eqn.params["ty"], "the pltpu.bitcast value")
    return [scope.emit("packed_bitcast", [x], dtype=dtype)]
