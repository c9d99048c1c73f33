"""Planted bugs: small IR rewrites a difftest ``Case.plant`` applies to the program that the
``compile`` way runs, to show the harness's envelope is tight (it flags each one).

Each plant is ``Function -> Function`` and builds a new program; the input is never changed.
The rewrite reaches into regions and into the callees of ``call`` ops (an imported
``pallas_call`` is a call of its grid program, whose body holds the kernel), each callee
rebuilt once. Every value keeps its identity: a planted op defines the very ``Value`` the op
it changes defined (that op, where it stays, gets fresh results), so every later use sees the
planted value and the harness's bisect lines the planted program up with the import by value
and reports the planted op itself (or the top-level op holding it, such as a kernel's call).

- ``scale_result(factor)``: result 0 multiplied by ``factor``;
- ``change_constant(old, new)``: every float constant equal to ``old`` in its dtype becomes
  ``new``;
- ``offset_after(op_name, delta)``: ``delta`` added to the result of the first ``op_name`` op
  (program order, callees where they are called).

``SIZES`` gives each dtype's sizes (``scale_result`` takes its result's by default). A plant
that finds nothing to change raises ``PassError``: a sibling whose plant changed nothing
would pass for a missed bug.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.builder import Builder
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import PassError
from minipallas.ir.literal import Literal
from minipallas.ir.types import ArrayType

Plant = Callable[[Function], Function]
# ``op`` (its regions and callee rewritten) and the builder of its block: False to keep ``op``
# as it is; True once the hook has added ops to ``b`` that define each of ``op``'s results.
OnOp = Callable[[Op, Builder], bool]


@dataclass(frozen=True)
class Sizes:
    """How big a planted change is in one dtype: small, yet one rounding cannot hide it."""

    scale: float  # scale_result's factor
    offset: float  # offset_after's delta


# f32: the issue's sizes, a scale of 64 to 128 ulps and a sum off by 0.01. bf16's 8-bit
# significand rounds 2**-17 of a value and 0.01 of a sum (which jnp computes in f32 and rounds
# to bf16) away, and its envelope allows about 4 * spread + 1 ulps, so 2 to 5 wherever a value
# went through a rounding or a transcendental (measured: a bf16 scale by 1 + 2**-7, one to two
# ulps, stays within it). So bf16 scales by 1 + 2**-4 (8 to 16 ulps) and offsets a sum below
# 64 by 0.25 (one to four of the sum's ulps).
SIZES = {"float32": Sizes(1 + 2.0**-17, 0.01), "bfloat16": Sizes(1 + 2.0**-4, 0.25)}


def sizes(dtype: np.dtype | str) -> Sizes:
    """The planted sizes for values of ``dtype``."""
    return SIZES[dtypes.canonicalize(dtype)]


def rewrite(fn: Function, on_op: OnOp) -> Function:
    """A copy of ``fn`` (and of its callees) where ``on_op`` may replace any op by ops that
    define the same values (see ``OnOp``)."""
    done: dict[int, Function] = {}

    def function(f: Function) -> Function:
        if id(f) not in done:
            done[id(f)] = Function(f.name, block(f.body))
        return done[id(f)]

    def block(b: Block) -> Block:
        builder = Builder(PassError)
        for op in b.ops:
            attrs = op.attrs
            if op.name == "call":
                attrs = {**attrs, "callee": function(attrs["callee"])}
            copy = op.replace(regions=tuple(block(r) for r in op.regions), attrs=attrs)
            if not on_op(copy, builder):
                builder.add(copy)
        return builder.block(b.params, b.results)

    return function(fn)


def _defining(
    b: Builder, name: str, operands: Sequence[Value], result: Value, op: Op, **attrs: object
) -> Value:
    """Adds op ``name`` (type-checked, at ``op``'s location) defining ``result`` itself."""
    made = Builder(PassError).create(name, operands, attrs, loc=op.loc)
    if made.result.type != result.type:
        raise PassError(
            f"the planted '{name}' gives {made.result.type}, not {result.type}",
            op=op.name,
            loc=op.loc,
            fix="plant a change that keeps the value's type",
        )
    b.add(made.replace(results=(result,)))
    return result


def _splat(b: Builder, value: float, t: ArrayType, op: Op) -> Value:
    """``value`` as a new constant of type ``t``, at ``op``'s location."""
    literal = Literal.of(np.full(t.shape, value, np.float64), t.dtype)
    return b.create("constant", attrs={"value": literal}, loc=op.loc).result


def _follow(b: Builder, op: Op, target: Value, name: str, amount: float) -> None:
    """``op`` with fresh results, then ``target = name(op's result, amount)``."""
    moved = b.add(op.renamed(op.operands))
    fresh = moved.results[op.results.index(target)]
    _defining(b, name, [fresh, _splat(b, amount, target.type, op)], target, op)


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
        found = []

        def on_op(op: Op, b: Builder) -> bool:
            if target not in op.results:
                return False
            found.append(op)
            _follow(b, op, target, "mul", by)
            return True

        planted = rewrite(fn, on_op)
        if not found:  # a parameter returned as it is
            raise _nothing_found("op defining result 0", fn, "return a computed value")
        return planted

    return plant


def change_constant(old: float, new: float) -> Plant:
    """The plant replacing every float constant equal to ``old`` (rounded to its dtype) by
    ``new``, e.g. a layer norm's eps."""

    def plant(fn: Function) -> Function:
        found = []

        def on_op(op: Op, b: Builder) -> bool:
            literal = op.attrs.get("value") if op.name == "constant" else None
            if literal is None or not dtypes.is_float(literal.type.dtype):
                return False
            if not np.all(literal.array() == Literal.of(old, literal.type.dtype).array()):
                return False
            found.append(op)
            value = Literal.of(np.full(literal.type.shape, new, np.float64), literal.type.dtype)
            _defining(b, "constant", [], op.result, op, value=value)
            return True

        planted = rewrite(fn, on_op)
        if not found:
            raise _nothing_found(f"constant {old!r}", fn, "plant a constant the program uses")
        return planted

    return plant


def offset_after(op_name: str, delta: float) -> Plant:
    """The plant adding ``delta`` to the result of the first ``op_name`` op."""

    def plant(fn: Function) -> Function:
        found: list[Op] = []

        def on_op(op: Op, b: Builder) -> bool:
            if op.name != op_name or found:
                return False
            found.append(op)
            _follow(b, op, op.result, "add", delta)
            return True

        planted = rewrite(fn, on_op)
        if not found:
            raise _nothing_found(f"'{op_name}' op", fn, "plant an op the program has")
        return planted

    return plant
