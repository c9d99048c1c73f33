"""``Builder``: makes ops whose result types come from their type rules, so types stay right.

A builder collects ops for one block. Region ops are built by making a nested builder for each
region, finishing it with ``block()``, and passing the blocks to ``create``.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError, VerificationError
from minipallas.ir.location import UNKNOWN, Location
from minipallas.ir.opdef import OPS, OperandTypes, TypeCheckError
from minipallas.ir.types import Type


def infer_result_types(
    name: str,
    operand_types: Sequence[Type],
    attrs: Mapping[str, Any],
    regions: Sequence[Block],
    loc: Location = UNKNOWN,
    error: type[MiniPallasError] = VerificationError,
) -> tuple[Type, ...]:
    """Runs op ``name``'s type rule; a failure becomes ``error`` naming the op and location."""
    opdef = OPS.get(name)
    if opdef is None:
        raise error(f"unknown op '{name}'", op=name, loc=loc)
    if opdef.regions is None:
        if not regions:
            raise error("expected at least one region, got 0", op=name, loc=loc)
    elif len(regions) != opdef.regions:
        raise error(f"expected {opdef.regions} regions, got {len(regions)}", op=name, loc=loc)
    try:
        types = OperandTypes(operand_types, opdef, attrs)
        return tuple(opdef.infer(types, attrs, tuple(regions)))
    except TypeCheckError as e:
        message = str(e)
        if e.operand is not None:
            label = opdef.operand_label(e.operand, len(operand_types), attrs)
            message = f"operand {label} {message}"
        raise error(message, op=name, loc=loc, fix=e.fix) from None
    except MiniPallasError as e:
        raise error(e.message, op=name, loc=loc, fix=e.fix) from None


def static(value: Any) -> Any:
    """An attribute value with its numpy integers made Python ints, inside tuples too.

    jax's batching rules put ``np.int64`` in shapes and dimension lists; one spelling per
    value keeps the type rules, the printer and attribute equality simple.
    """
    if type(value) is tuple:
        for v in value:
            if type(v) is not int and isinstance(v, _NESTED):
                return tuple(map(static, value))
        return value
    return operator.index(value) if isinstance(value, np.integer) else value


_NESTED = (tuple, np.integer)  # what static() changes inside a tuple


class Builder:
    """Appends type-checked ops to a block under construction."""

    def __init__(self, error: type[MiniPallasError] = VerificationError) -> None:
        self.ops: list[Op] = []
        self.error = error

    def create(
        self,
        name: str,
        operands: Sequence[Value] = (),
        attrs: Mapping[str, Any] | None = None,
        regions: Sequence[Block] = (),
        loc: Location = UNKNOWN,
    ) -> Op:
        attrs = {k: static(v) for k, v in attrs.items()} if attrs else {}
        types = infer_result_types(
            name, [v.type for v in operands], attrs, regions, loc, self.error
        )
        op = Op(name, tuple(operands), tuple(Value(t) for t in types), attrs, tuple(regions), loc)
        self.ops.append(op)
        return op

    def add(self, op: Op) -> Op:
        """Appends an op built elsewhere (e.g. a copy made by a pass)."""
        self.ops.append(op)
        return op

    def block(self, params: Sequence[Value], results: Sequence[Value]) -> Block:
        return Block(tuple(params), tuple(self.ops), tuple(results))

    def function(self, name: str, params: Sequence[Value], results: Sequence[Value]) -> Function:
        return Function(name, self.block(params, results))


def params(types: Sequence[Type]) -> tuple[Value, ...]:
    """Fresh block parameters of the given types."""
    return tuple(Value(t) for t in types)
