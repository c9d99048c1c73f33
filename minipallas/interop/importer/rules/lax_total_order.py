"""Import rules for ``lt_to``, ``le_to`` and ``eq_to``: comparisons in XLA's total order, the
ones ``jnp.searchsorted`` (and so ``jnp.histogram``) and ``lax.sort``'s comparator use.

For floats, XLA's ``TOTALORDER`` is ``-NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN``
(NaNs ordered by their payload bits, subnormals never flushed): it compares the bits read as a
signed integer whose magnitude bits are flipped where the sign is set. The rules emit exactly
that (``bitcast``, ``xor``, ``select``, then the integer comparison), so every target computes
it with integer ops. Integers compare as they are, bools as the integers 0 and 1.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.rules.lax import operands
from minipallas.ir import dtypes
from minipallas.ir.core import Value
from minipallas.lowering.compat.jax_private import core as jax_core


def total_order_key(scope: ImportScope, x: Value) -> Value:
    """An integer per element of ``x`` that orders as XLA's total order orders ``x``."""
    if x.type.dtype == "bool":
        return scope.convert(x, "int8")
    if not dtypes.is_float(x.type.dtype):
        return x
    bits = 8 * dtypes.itemsize(x.type.dtype)
    n = scope.emit("bitcast", [x], dtype=f"int{bits}")
    shape = n.type.shape
    negative = scope.emit("lt", [n, scope.constant(0, n.type.dtype, shape)])
    flipped = scope.emit("xor", [n, scope.constant((1 << (bits - 1)) - 1, n.type.dtype, shape)])
    return scope.emit("select", [negative, flipped, n])


@rule("lt_to", "le_to", "eq_to", params={})
def total_compare(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    name = eqn.primitive.name.removesuffix("_to")
    a, b = operands(scope, eqn)
    return [scope.emit(name, [total_order_key(scope, a), total_order_key(scope, b)])]
