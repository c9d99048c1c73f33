"""StableHLO rules for control flow: ``for`` and ``while`` loops, ``cond``, ``call``.

- ``for`` and ``while`` become ``stablehlo.while``. Its regions take the whole loop state, so
  loop-invariant operands travel as carries that the body passes back unchanged; ``for`` also
  carries its index and upper bound (state ``[i, upper, *consts, *carries]``).
- ``cond`` clamps its index into ``[0, N-1]`` (``lax.switch`` semantics; ``stablehlo.case``
  would run the last branch for a negative index instead) and becomes ``stablehlo.if`` for two
  branches, ``stablehlo.case`` for more; one branch is inlined. Branch regions of ``if``/``case``
  take no arguments: they use the ``cond``'s operands from the enclosing region. Two branches
  that only move data (``MOVES_DATA``: a kernel's ``when`` that zeroes an accumulator or
  writes a block on the last step) become ``stablehlo.select`` instead: XLA:CPU copies a
  conditional's results and fuses nothing across it, which cost a blocked matmul a third of its
  time; selecting computes no value differently, so the bits stay.
- ``call`` becomes ``func.call`` of the callee's private ``func.func``, emitted once.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import dtypes
from minipallas.ir.core import Block, Op
from minipallas.lowering.compat.jaxlib_shim import func, ir, stablehlo
from minipallas.lowering.stablehlo import emit
from minipallas.lowering.stablehlo.context import LoweringContext, rule


def _types(values: Sequence[ir.Value]) -> list[ir.Type]:
    return [v.type for v in values]


def _region_block(region: ir.Region, types: Sequence[ir.Type]) -> ir.Block:
    return region.blocks.append(*types, arg_locs=[ir.Location.current] * len(types))


@rule("for")
def for_loop(ctx: LoweringContext, op: Op, *state: ir.Value) -> Sequence[ir.Value]:
    """A ``stablehlo.while`` whose state is the operands: the index in ``lower``'s place."""
    where = op.slices()
    loop = stablehlo.WhileOp(_types(state), list(state))
    cond = _region_block(loop.cond, _types(state))
    with ir.InsertionPoint(cond):
        args = list(cond.arguments)
        (i,), (hi,) = args[where["lower"]], args[where["upper"]]
        stablehlo.ReturnOp([emit.compare(i, hi, "LT")])
    body = _region_block(loop.body, _types(state))
    with ir.InsertionPoint(body):
        args = list(body.arguments)
        (i,), (hi,) = args[where["lower"]], args[where["upper"]]
        consts, carries = args[where["consts"]], args[where["inits"]]
        new = ctx.lower_block(op.regions[0], [i, *consts, *carries])
        step = stablehlo.AddOp(i, emit.like(1, i)).result
        stablehlo.ReturnOp([step, hi, *consts, *new])
    return list(loop.results)[where["inits"]]


@rule("while")
def while_loop(ctx: LoweringContext, op: Op, *state: ir.Value) -> Sequence[ir.Value]:
    where = op.slices()  # the state is the operands
    cond_region, body_region = op.regions
    loop = stablehlo.WhileOp(_types(state), list(state))
    cond = _region_block(loop.cond, _types(state))
    with ir.InsertionPoint(cond):
        args = list(cond.arguments)
        (pred,) = ctx.lower_block(cond_region, [*args[where["cond_consts"]], *args[where["inits"]]])
        stablehlo.ReturnOp([pred])
    body = _region_block(loop.body, _types(state))
    with ir.InsertionPoint(body):
        args = list(body.arguments)
        new = ctx.lower_block(body_region, [*args[where["body_consts"]], *args[where["inits"]]])
        stablehlo.ReturnOp([*args[: where["inits"].start], *new])
    return list(loop.results)[where["inits"]]


# Ops that compute no value, only place one: a branch made of them may run unconditionally.
MOVES_DATA = frozenset({"constant", "broadcast_in_dim", "reshape"})


@rule("cond")
def cond(ctx: LoweringContext, op: Op, index: ir.Value, *args: ir.Value) -> Sequence[ir.Value]:
    branches = op.regions
    if len(branches) == 1:
        return ctx.lower_block(branches[0], args)
    result_types = [emit.tensor_type(v.type) for v in op.results]
    dtype = op.operands[0].type.dtype
    if len(branches) == 2:
        # index <= 0 picks branch 0, anything above picks branch 1: the clamp, in one compare
        pred = emit.compare(index, emit.like(0, index), "GT" if dtypes.is_signed(dtype) else "NE")
        if all(o.name in MOVES_DATA for b in branches for o in b.ops):
            return _select(pred, *(ctx.lower_block(b, args) for b in branches))
        choice = stablehlo.IfOp(result_types, pred)
        regions = [choice.true_branch, choice.false_branch]
        chosen = [branches[1], branches[0]]
    else:
        choice = stablehlo.CaseOp(
            result_types, _clamped_index(index, dtype, len(branches)), len(branches)
        )
        regions, chosen = list(choice.branches), list(branches)
    for region, branch in zip(regions, chosen, strict=True):
        _emit_branch(ctx, region, branch, args)
    return list(choice.results)


def _select(pred: ir.Value, low: Sequence[ir.Value], high: Sequence[ir.Value]) -> list[ir.Value]:
    """Each result of the branch ``pred`` picks (``high`` where it holds)."""
    chosen = []
    for a, b in zip(high, low, strict=True):
        if a == b:
            chosen.append(a)
            continue
        shape = emit.shape_of(a)
        chosen.append(emit.select(emit.broadcast(pred, shape) if shape else pred, a, b))
    return chosen


def _emit_branch(
    ctx: LoweringContext, region: ir.Region, branch: Block, args: Sequence[ir.Value]
) -> None:
    block = region.blocks.append()
    with ir.InsertionPoint(block):
        stablehlo.ReturnOp(ctx.lower_block(branch, args))


def _clamped_index(index: ir.Value, dtype: str, n: int) -> ir.Value:
    """The branch index as i32 in ``[0, n-1]``."""
    if dtype == "uint32":
        capped = stablehlo.MinOp(index, emit.like(n - 1, index)).result
        return emit.convert(capped, "int32")
    index = emit.convert(index, "int32") if dtype != "int32" else index
    return stablehlo.ClampOp(emit.like(0, index), index, emit.like(n - 1, index)).result


@rule("call")
def call(ctx: LoweringContext, op: Op, *args: ir.Value) -> Sequence[ir.Value]:
    symbol = ctx.callee(op.attrs["callee"])
    result_types = [emit.tensor_type(v.type) for v in op.results]
    return list(func.CallOp(result_types, symbol, list(args)).results)
