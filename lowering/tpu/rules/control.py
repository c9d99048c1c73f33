"""Mosaic rules for control flow: ``scf.for``, ``scf.while``, ``scf.if``; calls are inlined.

- ``for`` is ``scf.for`` over the counter's own integer type (``i32``), step 1; loop constants
  are the outer values themselves, carries are ``iter_args``.
- ``while`` is ``scf.while``: the condition region ends in ``scf.condition``.
- ``cond`` with N branches is a cascade of ``scf.if`` on ``index != 0``, then ``index - 1 != 0``
  ... (upstream's form). minipallas clamps the index into ``[0, N-1]``, so when the range
  analysis cannot show it in range it is clamped first (two branches: ``index > 0`` instead).
  A constant index selects its branch at compile time, as upstream folds it.
- ``call`` is inlined: Mosaic kernels are one function (upstream inlines ``jit`` the same way).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.core import Block, Op
from minipallas.lowering.compat.jaxlib_shim import arith, ir, scf
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import Bound, LoweringContext, rule


def _types(values: Sequence[ir.Value]) -> list[ir.Type]:
    return [v.type for v in values]


@rule("for")
def for_(ctx: LoweringContext, op: Op, *args: Bound) -> list:
    (body,) = op.regions
    where = op.slices()
    (lower,), (upper,) = args[where["lower"]], args[where["upper"]]
    consts, inits = list(args[where["consts"]]), list(args[where["inits"]])
    step = arith.constant(lower.type, 1)
    loop = scf.ForOp(lower, upper, step, inits)
    with ir.InsertionPoint(loop.body):
        args = [loop.induction_variable, *consts, *loop.inner_iter_args]
        scf.YieldOp(ctx.lower_block(body, args))
    return list(loop.results)


@rule("while")
def while_(ctx: LoweringContext, op: Op, *args: Bound) -> list:
    cond, body = op.regions
    where = op.slices()
    cond_consts, body_consts = args[where["cond_consts"]], args[where["body_consts"]]
    inits = list(args[where["inits"]])
    loop = scf.WhileOp(_types(inits), inits)
    before = loop.before.blocks.append(*_types(inits))
    with ir.InsertionPoint(before):
        (pred,) = ctx.lower_block(cond, [*cond_consts, *before.arguments])
        scf.ConditionOp(pred, list(before.arguments))
    after = loop.after.blocks.append(*_types(inits))
    with ir.InsertionPoint(after):
        scf.YieldOp(ctx.lower_block(body, [*body_consts, *after.arguments]))
    return list(loop.results)


@rule("cond")
def cond(ctx: LoweringContext, op: Op, index: ir.Value, *args: Bound) -> list:
    branches = list(op.regions)
    n = len(branches)
    known = ctx.range_of(op.operands[0])
    if n == 1 or (known is not None and known[0] == known[1]):
        pick = 0 if n == 1 else min(max(known[0], 0), n - 1)
        return ctx.lower_block(branches[pick], args)
    if known is not None and 0 <= known[0] and known[1] <= n - 1:
        pred = None  # in range: upstream's form as is
    elif n == 2:
        pred = arith.cmpi(arith.CmpIPredicate.sgt, index, _const(index, 0))
    else:
        index = arith.maxsi(index, _const(index, 0))
        index = arith.minsi(index, _const(index, n - 1))
        pred = None
    out_types = [emit.value_type(r.type) for r in op.results]
    return _cascade(ctx, index, branches, args, out_types, pred)


def _const(like: ir.Value, value: int) -> ir.Value:
    return arith.constant(like.type, value)


def _cascade(
    ctx: LoweringContext,
    index: ir.Value,
    branches: list[Block],
    args: Sequence[Bound],
    out_types: list[ir.Type],
    pred: ir.Value | None = None,
) -> list:
    """``if index != 0 { branches[1:] at index - 1 } else { branches[0] }``."""
    if pred is None:
        pred = arith.cmpi(arith.CmpIPredicate.ne, index, _const(index, 0))
    if_op = scf.IfOp(pred, out_types, has_else=True)
    with ir.InsertionPoint(if_op.then_block):
        if len(branches) > 2:
            rest = arith.subi(index, _const(index, 1))
            out = _cascade(ctx, rest, branches[1:], args, out_types)
        else:
            out = ctx.lower_block(branches[1], args)
        scf.YieldOp(out)
    with ir.InsertionPoint(if_op.else_block):
        scf.YieldOp(ctx.lower_block(branches[0], args))
    return list(if_op.results)


@rule("call")
def call(ctx: LoweringContext, op: Op, *args: Bound) -> list:
    return ctx.lower_block(op.attrs["callee"].body, args)
