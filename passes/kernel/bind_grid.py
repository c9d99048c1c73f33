"""Binding a kernel body to a grid point: ``program_id`` becomes a parameter.

A kernel body asks where it is with ``program_id axis k`` and how large the grid is with
``num_programs axis k``. Outside a backend that provides a grid (the CPU path runs the grid as
loops), those questions need answers in the program itself:

1. the new function takes one ``i32[]`` grid index per axis before the body's own parameters,
   then, for a dynamic grid (a ``None`` size), one ``i32[]`` size per dynamic axis;
2. ``program_id axis k`` is replaced by grid index ``k``; ``num_programs axis k`` by a constant,
   or by the size parameter of a dynamic axis;
3. regions are closed, so a region op whose regions ask for a grid index receives the indices
   as extra operands, placed where its layout wants them (``for``: loop constants; ``while``:
   condition and body constants; ``cond``: branch arguments; ``run_scoped``: captured operands),
   and a called function that asks becomes a copy taking the indices first. A region or callee
   whose only grid query is a static ``num_programs`` is rewritten too (its constant answered in
   place, nothing threaded): a kernel's nested regions are inside the kernel, and upstream
   reads a static size there as the int it is.

Like every pass, it builds new IR and never edits the old; unchanged ops are shared.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir.builder import params
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import PassError
from minipallas.ir.literal import Literal
from minipallas.ir.rewrite import Callees
from minipallas.ir.types import ArrayType
from minipallas.passes.registry import INTS, Option, register

I32 = ArrayType((), "int32")
GRID_QUERIES = frozenset({"program_id", "num_programs"})


def bind_grid(fn: Function, grid: Sequence[int | None]) -> Function:
    """``fn`` taking the grid indices (then the dynamic sizes) first, with
    ``program_id``/``num_programs`` answered."""
    return _Binder(tuple(grid)).function(fn, always=True)


@register(
    "bind-grid",
    Option("grid", INTS, "the grid's sizes, e.g. 8x2 (static sizes only)"),
    doc="a kernel body at one grid point: program_id/num_programs become parameters/constants",
)
def bind_grid_pass(fn: Function, *, grid: tuple[int, ...]) -> Function:
    """``bind_grid`` as a pass: ``minipallas-opt kernel.py --pass-pipeline=bind-grid{grid=8x2},
    discharge,cleanup`` shows a kernel body as the CPU runs it at one grid point."""
    return bind_grid(fn, grid)


class _Binder:
    def __init__(self, grid: tuple[int | None, ...]) -> None:
        self.grid = grid
        dynamic = [a for a, n in enumerate(grid) if n is None]
        # the threaded values: the grid indices, then the sizes of the dynamic axes
        self.n_values = len(grid) + len(dynamic)
        self.size_position = {a: len(grid) + k for k, a in enumerate(dynamic)}
        self.env: dict[Value, Value] = {}  # a program_id result -> the grid index replacing it
        self.asks: dict[int, bool] = {}  # id(block or function) -> whether it asks program_id
        # each function's copy, made once: taking the grid indices, or only its sizes answered
        self.bound = Callees(lambda fn: self.bind(fn, threads=True))
        self.answered = Callees(lambda fn: self.bind(fn, threads=False))

    def function(self, fn: Function, always: bool = False) -> Function:
        """``fn`` with leading grid-index parameters (only if it asks, unless ``always``), its
        static ``num_programs`` answered either way."""
        threads = always or self.function_asks(fn)
        if not threads and not self.function_mentions(fn):
            return fn
        return (self.bound if threads else self.answered)(fn)

    def bind(self, fn: Function, threads: bool) -> Function:
        indices = params([I32] * self.n_values) if threads else ()
        body = self.block(fn.body, indices)
        return Function(fn.name, Block((*indices, *body.params), body.ops, body.results))

    # ----- which parts ask for a grid index -----

    def function_asks(self, fn: Function) -> bool:
        if id(fn) not in self.asks:
            self.asks[id(fn)] = False  # recursion cannot happen, but stay finite regardless
            self.asks[id(fn)] = self.block_asks(fn.body)
        return self.asks[id(fn)]

    def block_asks(self, block: Block) -> bool:
        if id(block) not in self.asks:
            self.asks[id(block)] = any(self.op_asks(op) for op in block.ops)
        return self.asks[id(block)]

    def op_asks(self, op: Op) -> bool:
        if op.name == "program_id":
            return True
        if op.name == "num_programs":
            return op.attrs["axis"] in self.size_position
        if op.name == "call":
            return self.function_asks(op.attrs["callee"])
        return any(self.block_asks(r) for r in op.regions)

    # ----- which parts hold any grid query (a static size needs no index, only a rewrite) -----

    def function_mentions(self, fn: Function) -> bool:
        return any(self.op_mentions(op) for op in fn.body.ops)

    def op_mentions(self, op: Op) -> bool:
        if op.name in GRID_QUERIES:
            return True
        if op.name == "call":
            return self.function_mentions(op.attrs["callee"])
        return any(self.op_mentions(inner) for r in op.regions for inner in r.ops)

    # ----- rewriting -----

    def block(self, block: Block, indices: Sequence[Value]) -> Block:
        ops = []
        for op in block.ops:
            new = self.op(op, indices)
            if new is not None:
                ops.append(new)
        return Block(block.params, ops, self.values(block.results))

    def values(self, values: Sequence[Value]) -> tuple[Value, ...]:
        return tuple(self.env.get(v, v) for v in values)

    def op(self, op: Op, indices: Sequence[Value]) -> Op | None:
        if op.name == "program_id":
            self.env[op.result] = indices[op.attrs["axis"]]
            return None
        if op.name == "num_programs" and op.attrs["axis"] in self.size_position:
            self.env[op.result] = indices[self.size_position[op.attrs["axis"]]]
            return None
        if op.name == "num_programs":
            size = Literal.of(self.grid[op.attrs["axis"]], "int32")
            return Op("constant", (), op.results, {"value": size}, (), op.loc)
        operands = self.values(op.operands)
        if op.name == "call" and self.op_asks(op):
            return self.bound.call(op, operands=(*indices, *operands))
        if op.regions and self.op_asks(op):
            return self._thread(op, operands, indices)
        if self.op_mentions(op):  # only static sizes inside: answered in place, nothing threaded
            attrs = dict(op.attrs)
            if op.name == "call":
                attrs["callee"] = self.function(op.attrs["callee"])
            regions = tuple(self.block(r, ()) for r in op.regions)
            return op.replace(operands=operands, attrs=attrs, regions=regions)
        return op.replace(operands=operands) if operands != op.operands else op

    def _thread(self, op: Op, operands: tuple[Value, ...], indices: Sequence[Value]) -> Op:
        """``op`` receiving the grid indices into each of its regions (layouts in the doc)."""
        n = len(indices)
        inner = [params([I32] * n) for _ in op.regions]
        regions = [self.block(r, idx) for r, idx in zip(op.regions, inner, strict=True)]
        attrs = dict(op.attrs)
        where = op.slices()  # the indices go after each region's consts
        if op.name == "for":
            operands = _insert(operands, where["consts"].stop, indices)
            (body,) = regions
            at = op.param_slices()["consts"].stop
            regions = [_with_params(body, _insert(body.params, at, inner[0]))]
            attrs["num_consts"] += n
        elif op.name == "while":
            operands = _insert(operands, where["body_consts"].stop, indices)
            operands = _insert(operands, where["cond_consts"].stop, indices)
            regions = [
                _with_params(r, _insert(r.params, op.param_slices(k)[consts].stop, idx))
                for k, (r, idx, consts) in enumerate(
                    zip(regions, inner, ("cond_consts", "body_consts"), strict=True)
                )
            ]
            attrs["cond_nconsts"] += n
            attrs["body_nconsts"] += n
        elif op.name in ("cond", "run_scoped"):
            operands = (*operands, *indices)  # branch arguments / captured values come last
            regions = [
                _with_params(r, (*r.params, *idx)) for r, idx in zip(regions, inner, strict=True)
            ]
        else:  # the opset's region ops are the four above; a new one must be added here
            raise PassError(
                "bind_grid does not know how this op passes operands to its regions",
                op=op.name,
                loc=op.loc,
            )
        return op.replace(operands=operands, attrs=attrs, regions=tuple(regions))


def _insert(values: Sequence[Value], at: int, new: Sequence[Value]) -> tuple[Value, ...]:
    return (*values[:at], *new, *values[at:])


def _with_params(block: Block, new_params: Sequence[Value]) -> Block:
    return Block(tuple(new_params), block.ops, block.results)
