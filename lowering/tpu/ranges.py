"""Integer ranges: which values each integer scalar of a kernel body can take.

minipallas clamps a dynamic index into its dimension (a dynamic slice start into
``[0, dim - span]``), as ``lax.dynamic_slice`` does; Mosaic's ``vector.load`` does not clamp.
The TPU rules therefore clamp with ``arith.maxsi`` / ``arith.minsi`` — unless this analysis
proves the index already in range, which is the common case (a loop counter times a block
size, a grid index), so the emitted kernel is the one upstream Pallas writes.

Algorithm (one forward walk, regions included):
1. ``constant`` is its own range; ``program_id`` on axis ``a`` is ``[0, grid[a] - 1]``;
   ``num_programs`` is ``grid[a]``; a ``bool`` converted to an integer is ``[0, 1]``;
   ``platform_index`` is the branch Mosaic's rule picks.
2. ``add``, ``sub``, ``mul``, ``max``, ``min``, ``div`` and ``rem`` by a positive constant and
   ``select`` combine their operands' ranges (interval arithmetic); a result that could leave
   its dtype's range is unknown. Booleans are ranges in ``[0, 1]``: a comparison whose operand
   ranges decide it is a constant, and so are ``and``/``or``/``xor``/``not`` of constants; a
   ``select`` on a decided predicate has its chosen side's range (the floor corrections
   ``//`` and ``%`` trace to drop out this way).
3. A ``for`` counter is ``[lower.lo, upper.hi - 1]``; region parameters get the ranges of the
   operands they stand for. A ``for`` carry the body steps by a constant (``fori_loop``'s
   counter, which ``scan`` carries beside the index) spans its init plus up to trip count - 1
   steps; other carries and ``while`` values are unknown. A callee's parameters join the
   ranges of every call site.
Unknown values are simply absent from the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.opset.platform import mosaic_branch
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType

Interval = tuple[int, int]


def int_ranges(body: Block, grid: Sequence[int]) -> dict[Value, Interval]:
    """The range of every integer scalar of ``body`` (and its regions) the walk can bound."""
    analysis = _Ranges(tuple(grid))
    analysis.block(body)
    return analysis.ranges


def index_map_ranges(fn: Function, grid: Sequence[int | None]) -> dict[Value, Interval]:
    """The ranges in an index map, whose leading parameters are the grid indices: a static
    axis's runs over ``[0, size - 1]``, a dynamic one's is non-negative."""
    analysis = _Ranges(tuple(grid))
    for p, n in zip(fn.params, grid, strict=False):
        analysis.set(p, (0, _bounds("int32")[1] if n is None else n - 1))
    analysis.block(fn.body)
    return analysis.ranges


def _bounds(dtype: str) -> Interval:
    if dtype == "bool":
        return 0, 1
    info = np.iinfo(dtypes.to_numpy(dtype))
    return int(info.min), int(info.max)


def _int_scalar(v: Value) -> bool:
    t = v.type
    return (
        isinstance(t, ArrayType) and t.shape == () and (dtypes.is_int(t.dtype) or t.dtype == "bool")
    )


def _decided(true: bool, false: bool) -> Interval | None:
    """A comparison's range: 1 when it surely holds, 0 when it surely fails, else unknown."""
    return (1, 1) if true else (0, 0) if false else None


_COMPARE: RuleTable[Callable[[Interval, Interval], Interval | None]] = RuleTable.of(
    "TPU range of a comparison",
    {
        "lt": lambda a, b: _decided(a[1] < b[0], a[0] >= b[1]),
        "le": lambda a, b: _decided(a[1] <= b[0], a[0] > b[1]),
        "gt": lambda a, b: _decided(a[0] > b[1], a[1] <= b[0]),
        "ge": lambda a, b: _decided(a[0] >= b[1], a[1] < b[0]),
        "eq": lambda a, b: _decided(a[0] == a[1] == b[0] == b[1], a[1] < b[0] or b[1] < a[0]),
        "ne": lambda a, b: _decided(a[1] < b[0] or b[1] < a[0], a[0] == a[1] == b[0] == b[1]),
    },
)
_LOGIC = RuleTable.of(
    "TPU range of a logical op",
    {"and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y},
)


def _logic(name: str, a: Interval | None, b: Interval | None) -> Interval | None:
    """``and``/``or``/``xor`` of booleans: decided when both are, or when one side decides
    (``False and _``, ``True or _``)."""
    known = [x[0] for x in (a, b) if x is not None and x[0] == x[1]]
    if len(known) == 2:
        bit = _LOGIC[name](*known)
        return bit, bit
    if name == "and" and 0 in known:
        return 0, 0
    if name == "or" and 1 in known:
        return 1, 1
    return None


_ARITH: RuleTable[Callable[[Interval, Interval], Interval | None]] = RuleTable.of(
    "TPU range of arithmetic",
    {
        "add": lambda a, b: (a[0] + b[0], a[1] + b[1]),
        "sub": lambda a, b: (a[0] - b[1], a[1] - b[0]),
        "mul": lambda a, b: (
            min(x * y for x in a for y in b),
            max(x * y for x in a for y in b),
        ),
        "max": lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
        "min": lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
        "div": lambda a, b: (
            (a[0] // b[0], a[1] // b[0]) if a[0] >= 0 and b[0] == b[1] > 0 else None
        ),
        "rem": lambda a, b: (0, min(a[1], b[0] - 1)) if a[0] >= 0 and b[0] == b[1] > 0 else None,
    },
)


class _Ranges:
    def __init__(self, grid: tuple[int, ...]) -> None:
        self.grid = grid
        self.ranges: dict[Value, Interval] = {}

    def set(self, v: Value, r: Interval | None) -> None:
        if r is None or not _int_scalar(v):
            return
        lo, hi = _bounds(v.type.dtype)
        if not lo <= r[0] <= r[1] <= hi:
            return
        if v in self.ranges:  # a callee parameter seen from another call site: join
            old = self.ranges[v]
            r = (min(old[0], r[0]), max(old[1], r[1]))
        self.ranges[v] = r

    def get(self, v: Value) -> Interval | None:
        return self.ranges.get(v)

    def _dynamic(self, axis: int) -> bool:
        """A grid axis whose size is known at run time only: its index is non-negative."""
        return axis < len(self.grid) and self.grid[axis] is None

    def bind(self, params: Sequence[Value], operands: Sequence[Value]) -> None:
        for p, v in zip(params, operands, strict=True):
            self.set(p, self.get(v))

    def block(self, block: Block) -> None:
        for op in block.ops:
            self.op(op)

    def op(self, op: Op) -> None:
        name, ins = op.name, [self.get(v) for v in op.operands]
        if name == "constant" and _int_scalar(op.result):
            value = int(op.attrs["value"].array())
            self.set(op.result, (value, value))
        elif name in ("program_id", "num_programs") and self._dynamic(op.attrs["axis"]):
            self.set(op.result, (0, _bounds("int32")[1]))
        elif name == "program_id" and op.attrs["axis"] < len(self.grid):
            self.set(op.result, (0, self.grid[op.attrs["axis"]] - 1))
        elif name == "num_programs" and op.attrs["axis"] < len(self.grid):
            size = self.grid[op.attrs["axis"]]
            self.set(op.result, (size, size))
        elif name == "platform_index" and mosaic_branch(op.attrs["platforms"]) is not None:
            branch = mosaic_branch(op.attrs["platforms"])
            self.set(op.result, (branch, branch))
        elif name == "convert" and op.operands[0].type.dtype == "bool":
            self.set(op.result, (0, 1))
        elif name in ("convert", "multiple_of") and ins[0] is not None:
            self.set(op.result, ins[0])  # values unchanged (a widening convert)
        elif name in _COMPARE and None not in ins:
            self.set(op.result, _COMPARE[name](ins[0], ins[1]))
        elif name in _LOGIC and op.result.type.dtype == "bool":
            self.set(op.result, _logic(name, ins[0], ins[1]))
        elif name == "not" and op.result.type.dtype == "bool" and ins[0] in ((0, 0), (1, 1)):
            self.set(op.result, (1 - ins[0][0], 1 - ins[0][0]))
        elif name in _ARITH and len(ins) == 2 and None not in ins:
            self.set(op.result, _ARITH[name](ins[0], ins[1]))
        elif name == "select":
            self.select(op, ins)
        elif name == "for":
            self.loop(op)
        elif name == "while":
            cond, body = op.regions
            self.bind(op.param_group("cond_consts", region=0), op.group("cond_consts"))
            self.bind(op.param_group("body_consts", region=1), op.group("body_consts"))
            self.block(cond)
            self.block(body)
        elif name == "cond":
            for r, branch in enumerate(op.regions):
                self.bind(op.param_group("args", region=r), op.group("args"))
                self.block(branch)
        elif name == "run_scoped":
            self.bind(op.param_group("args"), op.group("args"))
            self.block(op.regions[0])
        elif name == "call":
            callee = op.attrs["callee"]
            self.bind(callee.params, op.operands)
            self.block(callee.body)

    def select(self, op: Op, ins: list[Interval | None]) -> None:
        pred, on_true, on_false = ins
        if pred in ((0, 0), (1, 1)):
            self.set(op.result, on_true if pred == (1, 1) else on_false)
        elif on_true is not None and on_false is not None:
            self.set(op.result, (min(on_true[0], on_false[0]), max(on_true[1], on_false[1])))

    def loop(self, op: Op) -> None:
        ((lower,), (upper,)) = op.group("lower"), op.group("upper")
        lower, upper = self.get(lower), self.get(upper)
        if lower is not None and upper is not None and upper[1] - 1 >= lower[0]:
            (index,) = op.param_group("index")
            self.set(index, (lower[0], upper[1] - 1))
            last = upper[1] - 1 - lower[0]  # the most steps a carry takes before its last use
            carries = zip(op.param_group("inits"), op.group("inits"), _steps(op), strict=True)
            for carry, init, step in carries:
                start = self.get(init)
                if start is not None and step is not None:
                    span = step * last
                    self.set(carry, (start[0] + min(0, span), start[1] + max(0, span)))
        self.bind(op.param_group("consts"), op.group("consts"))
        self.block(op.regions[0])


def _steps(op: Op) -> list[int | None]:
    """Per carry of a ``for``, the constant its body adds to it each iteration (``fori_loop``'s
    counter, which ``scan`` carries beside the loop index), else None."""
    body = op.regions[0]
    made = {r: o for o in body.ops for r in o.results}
    constants = {
        r: int(o.attrs["value"].array())
        for r, o in made.items()
        if o.name == "constant" and _int_scalar(r)
    }
    steps: list[int | None] = []
    for carry, yielded in zip(op.param_group("inits"), body.results, strict=True):
        step, source = None, made.get(yielded)
        if source is not None and source.name in ("add", "sub") and carry in source.operands:
            a, b = source.operands
            if source.name == "add" and a is carry:
                step = constants.get(b)
            elif source.name == "add":
                step = constants.get(a)
            elif a is carry:
                c = constants.get(b)
                step = None if c is None else -c
        steps.append(step)
    return steps
