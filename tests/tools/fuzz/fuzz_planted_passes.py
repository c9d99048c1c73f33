"""Two wrong passes planted for the fuzzer to catch (``tests/tools/fuzz/test_fuzz_planted.py``).

- ``times-two-thrice``: every float ``x * 2.0`` becomes ``x + x + x`` (wrong: that is 3x);
  it fires only on a multiply by a 2.0 splat, which plain random programs rarely hold after
  discharge and cleanup.
- ``add-to-sub``: every float ``add`` becomes a ``sub`` (wrong wherever the addend is not 0).
- ``noop``: returns its input (a correct pass beside them: ``tests/difftest/test_user_pipeline``
  loads this file too).

Load with ``python -m minipallas.tools.fuzz.programs --load tests/tools/fuzz/fuzz_planted_passes.py
--pass-pipeline=times-two-thrice``.
"""

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.passes.registry import register


def _is_two(value: Value, defs: dict) -> bool:
    op = defs.get(value)
    if op is not None and op.name == "broadcast_in_dim":
        op = defs.get(op.operands[0])
    return op is not None and op.name == "constant" and bool(np.all(op.attrs["value"].array() == 2))


def _thrice(block: Block, replaced: dict) -> Block:
    defs: dict = {}
    ops: list = []
    for op in block.ops:
        operands = tuple(replaced.get(v, v) for v in op.operands)
        if op.name == "mul" and dtypes.is_float(op.results[0].type.dtype):
            x, y = operands
            other = x if _is_two(y, defs) else y if _is_two(x, defs) else None
            if other is not None:
                t = op.results[0].type
                twice = Op("add", (other, other), (Value(t),), {}, (), op.loc)
                thrice = Op("add", (twice.results[0], other), (Value(t),), {}, (), op.loc)
                replaced[op.results[0]] = thrice.results[0]
                ops += [twice, thrice]
                continue
        regions = tuple(_thrice(r, replaced) for r in op.regions)
        if operands != op.operands or regions != op.regions:
            op = op.replace(operands=operands, regions=regions)
        defs.update((r, op) for r in op.results)
        ops.append(op)
    return Block(block.params, tuple(ops), tuple(replaced.get(v, v) for v in block.results))


@register("times-two-thrice", doc="x * 2.0 -> x + x + x for floats (wrong on purpose)")
def times_two_thrice(fn: Function) -> Function:
    return Function(fn.name, _thrice(fn.body, {}))


def _to_sub(block: Block) -> Block:
    ops = []
    for op in block.ops:
        wrong = op.name == "add" and dtypes.is_float(op.results[0].type.dtype)
        regions = tuple(_to_sub(r) for r in op.regions)
        ops.append(op.replace(name="sub" if wrong else op.name, regions=regions))
    return Block(block.params, tuple(ops), block.results)


@register("add-to-sub", doc="every float add becomes a sub (wrong on purpose)")
def add_to_sub(fn: Function) -> Function:
    return Function(fn.name, _to_sub(fn.body))


@register("noop", doc="returns its input")
def noop(fn: Function) -> Function:
    return fn
