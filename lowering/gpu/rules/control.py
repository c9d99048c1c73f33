"""Triton rules for control flow and what is left of scoped allocation after discharge.

- ``for`` becomes ``scf.for`` over the same integer type; ``while`` becomes ``scf.while``;
  carries are ``iter_args`` (the scratch that discharge turned into values travels this way).
  Loop constants are not carried: ``scf`` regions see the enclosing values, refs included.
- ``cond`` clamps its index into ``[0, N-1]`` (``lax.switch`` semantics) and becomes
  ``scf.if`` (two branches: ``index > 0`` picks branch 1), nested for more branches.
- ``call`` is inlined (upstream Pallas inlines calls too; Triton would anyway).
- ``run_scoped`` is the rule shared with StableHLO (``lowering/scoped.py``): one that
  allocates nothing is inlined; one that still allocates was not discharged and is an error.
- ``uninitialized`` is the fill value (``dtypes.fill_value``: NaN / int minimum / False),
  what the CPU path and upstream's discharge give fresh scratch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minipallas.ir import dtypes
from minipallas.ir.core import Block, Op
from minipallas.lowering import scoped
from minipallas.lowering.gpu import emit
from minipallas.lowering.gpu.context import LoweringContext, rule
from minipallas.lowering.gpu.emit import arith, ir, scf

rule("run_scoped")(scoped.run_scoped)


def _result_types(op: Op) -> list[ir.Type]:
    return [emit.value_type(v.type) for v in op.results]


@rule("for")
def for_loop(ctx: LoweringContext, op: Op, *operands: Any) -> Sequence[Any]:
    where = op.slices()
    (lower,), (upper,) = operands[where["lower"]], operands[where["upper"]]
    consts, inits = operands[where["consts"]], list(operands[where["inits"]])
    step = emit.constant(1, op.operands[0].type.dtype)
    loop = scf.ForOp(lower, upper, step, inits)
    with ir.InsertionPoint(loop.body):
        new = ctx.lower_block(
            op.regions[0], [loop.induction_variable, *consts, *loop.inner_iter_args]
        )
        scf.YieldOp(new)
    return list(loop.results)


@rule("while")
def while_loop(ctx: LoweringContext, op: Op, *operands: Any) -> Sequence[Any]:
    where = op.slices()
    cond_consts, body_consts = operands[where["cond_consts"]], operands[where["body_consts"]]
    inits = list(operands[where["inits"]])
    types = [v.type for v in inits]
    loop = scf.WhileOp(types, inits)
    before = loop.before.blocks.append(*types, arg_locs=[ir.Location.current] * len(types))
    with ir.InsertionPoint(before):
        (pred,) = ctx.lower_block(op.regions[0], [*cond_consts, *before.arguments])
        scf.ConditionOp(pred, list(before.arguments))
    after = loop.after.blocks.append(*types, arg_locs=[ir.Location.current] * len(types))
    with ir.InsertionPoint(after):
        scf.YieldOp(ctx.lower_block(op.regions[1], [*body_consts, *after.arguments]))
    return list(loop.results)


@rule("cond")
def cond(ctx: LoweringContext, op: Op, index: ir.Value, *args: Any) -> Sequence[Any]:
    return _branch(ctx, op, index, op.operands[0].type.dtype, list(op.regions), args)


def _branch(
    ctx: LoweringContext, op: Op, index: ir.Value, dtype: str, branches: list[Block], args: Any
) -> list[Any]:
    """Branch 0 when ``index <= 0``, else the rest with ``index - 1`` (nested ``scf.if``)."""
    if len(branches) == 1:
        return ctx.lower_block(branches[0], args)
    if dtype == "bool":
        pred = index
    else:
        zero = emit.constant(0, dtype)
        predicate = arith.CmpIPredicate.sgt if dtypes.is_signed(dtype) else arith.CmpIPredicate.ne
        pred = arith.cmpi(predicate, index, zero)
    has_else = bool(op.results or branches[0].ops)
    choice = scf.IfOp(pred, _result_types(op), has_else=has_else)
    with ir.InsertionPoint(choice.then_block):
        rest = branches[1:]
        if len(rest) > 1:
            index = arith.subi(index, emit.constant(1, dtype))
        scf.YieldOp(_branch(ctx, op, index, dtype, rest, args))
    if has_else:
        with ir.InsertionPoint(choice.else_block):
            scf.YieldOp(ctx.lower_block(branches[0], args))
    return list(choice.results)


@rule("call")
def call(ctx: LoweringContext, op: Op, *args: Any) -> Sequence[Any]:
    return ctx.lower_block(op.attrs["callee"].body, args)


@rule("uninitialized")
def uninitialized(ctx: LoweringContext, op: Op) -> Sequence[ir.Value]:
    t = op.attrs["type"]
    return [emit.constant(dtypes.fill_value(t.dtype), t.dtype, t.shape)]
