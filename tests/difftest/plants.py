"""Planted bugs: small IR rewrites a difftest ``Case.plant`` applies to the program that the
``compile`` way runs, to show the harness's envelope is tight (it flags each one).

Each plant is ``Function -> Function`` and builds a new program; the input is never changed.
The rewrite reaches into regions and into the callees of ``call`` ops (an imported
``pallas_call`` is a call of its grid program, whose body holds the kernel), each callee
rebuilt once. Ops a plant does not change are shared with the input (ops are immutable).

- ``scale_result(factor)``: result 0 multiplied by ``factor``;
- ``change_constant(old, new)``: every constant equal to ``old`` in its dtype becomes ``new``;
- ``offset_after(op_name, delta)``: ``delta`` added to the result of the first ``op_name`` op
  (program order, callees where they are called).

``SIZES`` gives each dtype's sizes (``scale_result`` takes its result's by default).

A plant that finds nothing to change raises ``PassError``: a sibling whose plant changed
nothing would pass for a missed bug.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from minipallas.errors import PassError
from minipallas.ir import dtypes
from minipallas.ir.builder import Builder
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.literal import Literal
from minipallas.ir.types import ArrayType

Plant = Callable[[Function], Function]
# ``op`` (operands already renamed) and the builder of its block: None to keep ``op`` as it is,
# or the values standing for its results from now on, after adding to ``b`` the ops that make
# them (``op`` itself included, if it stays).
OnOp = Callable[[Op, Builder], tuple[Value, ...] | None]


@dataclass(frozen=True)
class Sizes:
    """How big a planted change is in one dtype: small, yet one rounding cannot hide it."""

    scale: float  # scale_result's factor
    offset: float  # offset_after's delta


# f32: the sizes (a scale of 64 to 128 ulps; a sum off by 0.01). A bf16 program's
# 8-bit significand rounds both away (2**-17 of a value; 0.01 of a sum of 8 to 64, which jnp
# computes in f32 and rounds to bf16), so bf16 plants the smallest it can show: 1 + 2**-7 is
# one to two ulps of a value, 0.25 one to four bf16 ulps of a sum below 64.
SIZES = {"float32": Sizes(1 + 2.0**-17, 0.01), "bfloat16": Sizes(1 + 2.0**-7, 0.25)}


def sizes(dtype: np.dtype | str) -> Sizes:
    """The planted sizes for values of ``dtype``."""
    return SIZES[dtypes.canonicalize(dtype)]


def rewrite(fn: Function, on_op: OnOp) -> Function:
    """A copy of ``fn`` (and of its callees) where ``on_op`` may replace any op, or follow it
    with new ops, and redirect the uses of its results (see ``OnOp``)."""
    done: dict[int, Function] = {}

    def function(f: Function) -> Function:
        if id(f) not in done:
            done[id(f)] = Function(f.name, block(f.body))
        return done[id(f)]

    def block(b: Block) -> Block:
        uses: dict[Value, Value] = {}
        builder = Builder(PassError)
        for op in b.ops:
            attrs = op.attrs
            if op.name == "call":
                attrs = {**attrs, "callee": function(attrs["callee"])}
            copy = op.replace(
                operands=tuple(uses.get(v, v) for v in op.operands),
                regions=tuple(block(r) for r in op.regions),
                attrs=attrs,
            )
            redirected = on_op(copy, builder)
            if redirected is None:
                builder.add(copy)
            else:
                uses.update(zip(copy.results, redirected, strict=True))
        return builder.block(b.params, [uses.get(v, v) for v in b.results])

    return function(fn)


def _splat(b: Builder, value: float, t: ArrayType, op: Op) -> Value:
    """``value`` as a constant of type ``t``, at ``op``'s location."""
    literal = Literal.of(np.full(t.shape, value, np.float64), t.dtype)
    return b.create("constant", attrs={"value": literal}, loc=op.loc).result


def _nothing_found(what: str, fn: Function, fix: str) -> PassError:
    return PassError(f"the plant found no {what} in @{fn.name}", op=fn.name, fix=fix)


def scale_result(factor: float | None = None) -> Plant:
    """The plant multiplying result 0 by ``factor`` (a ``mul`` after the op defining it;
    None: ``sizes`` of the result's dtype)."""

    def plant(fn: Function) -> Function:
        if not fn.result_types:
            raise _nothing_found("result", fn, "plant a program with at least one result")
        target = fn.body.results[0]
        by = sizes(target.type.dtype).scale if factor is None else factor

        def on_op(op: Op, b: Builder) -> tuple[Value, ...] | None:
            if target not in op.results:
                return None
            b.add(op)
            scale = _splat(b, by, target.type, op)
            scaled = b.create("mul", [target, scale], loc=op.loc).result
            return tuple(scaled if r is target else r for r in op.results)

        planted = rewrite(fn, on_op)
        if planted.body.results[0] is target:  # a parameter returned as it is
            raise _nothing_found("op defining result 0", fn, "return a computed value")
        return planted

    return plant


def change_constant(old: float, new: float) -> Plant:
    """The plant replacing every float constant equal to ``old`` (rounded to its dtype) by
    ``new``, e.g. a layer norm's eps."""

    def plant(fn: Function) -> Function:
        changed = []

        def on_op(op: Op, b: Builder) -> tuple[Value, ...] | None:
            literal = op.attrs.get("value") if op.name == "constant" else None
            if literal is None or not dtypes.is_float(literal.type.dtype):
                return None
            values = literal.array()
            if not np.all(values == Literal.of(old, literal.type.dtype).array()):
                return None
            changed.append(op)
            return (_splat(b, new, literal.type, op),)

        planted = rewrite(fn, on_op)
        if not changed:
            raise _nothing_found(f"constant {old!r}", fn, "plant a constant the program uses")
        return planted

    return plant


def offset_after(op_name: str, delta: float) -> Plant:
    """The plant adding ``delta`` to the result of the first ``op_name`` op."""

    def plant(fn: Function) -> Function:
        found: list[Op] = []

        def on_op(op: Op, b: Builder) -> tuple[Value, ...] | None:
            if op.name != op_name or found:
                return None
            found.append(op)
            b.add(op)
            offset = _splat(b, delta, op.result.type, op)
            return (b.create("add", [op.result, offset], loc=op.loc).result,)

        planted = rewrite(fn, on_op)
        if not found:
            raise _nothing_found(f"'{op_name}' op", fn, "plant an op the program has")
        return planted

    return plant
