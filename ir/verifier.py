"""The verifier: is this function well-formed IR? If not, which op, where, and why.

One walk over the function, linear in its size, checks:

1. Structure: blocks hold ``Op``s; operands, results and block parameters are ``Value``s of an
   array or ``Ref`` type; regions are ``Block``s; every op name is registered.
2. SSA: every value is defined once (a block parameter or an op result) and used after its
   definition, in the block that defines it. Regions are closed, so "in scope" means *the same
   block*: a region sees its own parameters and the values it defines, nothing from outside.
3. Types and attributes: each op's type rule (``infer_result_types``, the rule the builder
   uses) accepts its operand types, attributes and region signatures and gives exactly the
   op's result types. Indexer rank, static bounds and index dtypes, region parameter lists,
   loop carries, branch agreement and attribute values are all checked by those rules.
4. A scoped ref never escapes its ``run_scoped``. With closed regions a ref can leave the block
   that made it in only three ways, and each is closed:
   - yielded or returned: every region and every function yields arrays only, and a ``call``'s
     callee must return arrays;
   - named outside its body: the scope check of step 2, whose message says when the value is
     a scoped allocation;
   - stored as data: state ops store arrays, so a ref is never a value operand (type rules).
   A region that receives a ref as a parameter runs while its op runs, inside the body that
   owns the ref, so it cannot outlive the allocation.
5. Calls: every callee is verified too, once, and no function calls itself, directly or not.

Only the error path may rescan the function (to say where a misplaced value is defined).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from minipallas.ir.builder import infer_result_types
from minipallas.ir.core import CALLS, Block, Function, Module, Op, Value
from minipallas.ir.errors import VerificationError
from minipallas.ir.excerpt import at_op, show_ir
from minipallas.ir.location import UNKNOWN
from minipallas.ir.opdef import OPS
from minipallas.ir.types import ArrayType, RefType


def verify(target: Function | Module) -> None:
    """Checks a function and its callees, or every function of a module.

    Raises ``VerificationError`` naming the first bad op and its location; returns ``None``
    when the IR is well formed.
    """
    if isinstance(target, Module):
        roots = _module_functions(target)
    elif isinstance(target, Function):
        roots = (target,)
    else:
        raise VerificationError(f"expected a Function or a Module, got {type(target).__name__}")
    calls: dict[int, list[tuple[Function, Op]]] = {}
    pending = list(reversed(roots))
    while pending:
        fn = pending.pop()
        if id(fn) not in calls:
            calls[id(fn)] = _FunctionVerifier(fn).run()
            pending.extend(callee for callee, _ in reversed(calls[id(fn)]))
    _check_no_recursion(roots, calls)


def _module_functions(module: Module) -> tuple[Function, ...]:
    names: set[str] = set()
    for i, fn in enumerate(module.functions):
        if not isinstance(fn, Function):
            raise VerificationError(f"module entry {i} is a {type(fn).__name__}, not a Function")
        if fn.name in names:
            raise VerificationError(
                f"the module defines @{fn.name} twice", fix="give each function its own name"
            )
        names.add(fn.name)
    return module.functions


def _check_no_recursion(
    roots: tuple[Function, ...], calls: dict[int, list[tuple[Function, Op]]]
) -> None:
    """Depth-first search of the call graph; a call back into a function on the path is a cycle."""
    state: dict[int, str] = {}  # "open" while on the current path, then "done"
    for root in roots:
        if id(root) in state:
            continue
        state[id(root)] = "open"
        stack: list[tuple[Function, Iterator[tuple[Function, Op]]]] = [
            (root, iter(calls[id(root)]))
        ]
        while stack:
            fn, edges = stack[-1]
            edge = next(edges, None)
            if edge is None:
                state[id(fn)] = "done"
                stack.pop()
                continue
            callee, op = edge
            if state.get(id(callee)) == "open":
                path = [f for f, _ in stack]
                cycle = path[[id(f) for f in path].index(id(callee)) :] + [callee]
                raise VerificationError(
                    f"recursive call: {' -> '.join('@' + f.name for f in cycle)} (in @{fn.name})",
                    op="call",
                    loc=op.loc,
                    fix="functions cannot recurse (XLA has no recursion); use a loop instead",
                )
            if id(callee) not in state:
                state[id(callee)] = "open"
                stack.append((callee, iter(calls[id(callee)])))


class _Region:
    """A block being verified, with the op that owns it (``None`` for the function body)."""

    __slots__ = ("block", "parent", "owner", "index", "ops", "children")

    def __init__(self, block: Block, parent: _Region | None, owner: Op | None, index: int) -> None:
        self.block = block
        self.parent = parent
        self.owner = owner
        self.index = index
        self.ops = iter(block.ops)
        self.children: list[_Region] = []  # regions of the last op, still to visit (reversed)


# Where a value is defined: (region, defining op or None for a block parameter, position).
_Def = tuple[_Region, Op | None, int]


class _FunctionVerifier:
    """Verifies one function; ``run`` returns its calls as (callee, call op) pairs."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.defs: dict[int, _Def] = {}
        self.calls: list[tuple[Function, Op]] = []

    def run(self) -> list[tuple[Function, Op]]:
        body = self.fn.body
        self._block_shape(body, None, f"the body of @{self.fn.name}")
        # Blocks are visited depth first with an explicit stack, so deep nesting is no problem.
        stack = [self._enter(_Region(body, None, None, 0))]
        while stack:
            top = stack[-1]
            if top.children:
                stack.append(self._enter(top.children.pop()))
                continue
            op = next(top.ops, None)
            if op is None:
                self._leave(top)
                stack.pop()
                continue
            self._check_op(op, top)
            if op.regions:
                top.children = [_Region(b, top, op, k) for k, b in enumerate(op.regions)][::-1]
        return self.calls

    # -- errors ----------------------------------------------------------------------------

    def _error(
        self, message: str, op: Op | None, fix: str | None = None, op_name: str | None = None
    ) -> VerificationError:
        name = op_name or (op.name if isinstance(op, Op) else None)
        loc = op.loc if isinstance(op, Op) else UNKNOWN
        error = VerificationError(f"{message} (in @{self.fn.name})", op=name, loc=loc, fix=fix)
        if isinstance(op, Op):
            at_op(error, op)
            show_ir(error, self.fn)
        return error

    def _describe(self, where: _Def) -> str:
        region, op, pos = where
        if op is not None:
            return f"result {pos} of '{op.name}' at {op.loc}"
        if region.owner is not None:
            owner = region.owner
            return f"parameter {pos} of region {region.index} of '{owner.name}' at {owner.loc}"
        return f"parameter {pos} of @{self.fn.name}"

    # -- structure -------------------------------------------------------------------------

    def _value(self, v: object, what: str, op: Op | None) -> None:
        if not isinstance(v, Value):
            raise self._error(f"{what} is {v!r}, not a Value", op)
        if not isinstance(v.type, ArrayType | RefType):
            raise self._error(
                f"{what} has type {v.type!r}, which is neither an array nor a Ref type", op
            )

    def _block_shape(self, block: object, op: Op | None, what: str) -> None:
        """What a type rule reads from a region: a Block whose parameters and yields are Values."""
        if not isinstance(block, Block):
            raise self._error(f"{what} is a {type(block).__name__}, not a Block", op)
        for i, p in enumerate(block.params):
            self._value(p, f"parameter {i} of {what}", op)
        for i, r in enumerate(block.results):
            self._value(r, f"value {i} yielded by {what}", op)

    # -- SSA -------------------------------------------------------------------------------

    def _define(self, v: Value, region: _Region, op: Op | None, pos: int) -> None:
        first = self.defs.get(id(v))
        if first is not None:
            if op is not None:
                what = f"result {pos}"
            elif region.owner is not None:
                what = f"parameter {pos} of region {region.index}"
            else:
                what = f"parameter {pos}"
            raise self._error(
                f"{what} ({v.type}) is already defined, as {self._describe(first)}; "
                "a value is defined exactly once",
                op or region.owner,
                fix="make a fresh Value for each definition",
            )
        self.defs[id(v)] = (region, op, pos)

    def _enter(self, region: _Region) -> _Region:
        for i, p in enumerate(region.block.params):
            self._define(p, region, None, i)
        return region

    def _leave(self, region: _Region) -> None:
        """The block's yields must be values it can see."""
        owner = region.owner
        for i, r in enumerate(region.block.results):
            where = self.defs.get(id(r))
            if where is None or where[0] is not region:
                what = (
                    f"value {i} yielded by region {region.index}"
                    if owner is not None
                    else f"result {i} of @{self.fn.name}"
                )
                self._misplaced(r, what, owner, region, "return" if owner is None else None)
            if owner is None and isinstance(r.type, RefType):
                # Blamed on the op that made the ref, the closest thing to the user's line.
                raise self._error(
                    f"result {i} of @{self.fn.name} is a Ref ({r.type}); functions return "
                    "arrays only",
                    where[1],
                    fix="read the ref with 'get' and return the array",
                    op_name="return",
                )

    def _misplaced(
        self, v: Value, what: str, op: Op | None, region: _Region, op_name: str | None = None
    ) -> None:
        """Raises the reason ``v`` is not in scope in ``region``, where ``op`` uses it."""
        what = f"{what} ({v.type})"
        where = self.defs.get(id(v))
        if where is None:
            later = self._find_definition(v)
            if later is not None:
                raise self._error(
                    f"{what} is used before its definition ({later})",
                    op,
                    fix="move the use after the op that defines the value",
                    op_name=op_name,
                )
            raise self._error(
                f"{what} is not defined anywhere in this function",
                op,
                fix="use a parameter or the result of an earlier op",
                op_name=op_name,
            )
        home, def_op, pos = where
        described = self._describe(where)
        closing = region
        while closing.parent is not None and closing.parent is not home:
            closing = closing.parent
        if closing.parent is home:
            owner = closing.owner
            raise self._error(
                f"{what} is defined outside this region ({described}); regions are closed "
                "and see only their own parameters and values",
                op,
                fix=f"pass it as an operand of '{owner.name}' at {owner.loc} and use the "
                "matching region parameter",
                op_name=op_name,
            )
        owner = home.owner
        if (
            owner is not None
            and owner.name == "run_scoped"
            and def_op is None
            and pos < len(home.block.params) - len(owner.operands)
        ):
            raise self._error(
                f"{what} is scoped allocation {pos} of 'run_scoped' at {owner.loc}, used "
                "outside its body; the buffer exists only while the body runs",
                op,
                fix="do the work inside the run_scoped body and yield the arrays you need",
                op_name=op_name,
            )
        if owner is not None:
            described += f", in region {home.index} of '{owner.name}' at {owner.loc}"
        raise self._error(
            f"{what} is used outside the region that defines it ({described})",
            op,
            fix="a value made inside a region is visible only there; yield it to use it outside",
            op_name=op_name,
        )

    def _find_definition(self, v: Value) -> str | None:
        """Error path only: scans the whole function for a later definition of ``v``."""
        blocks = [(self.fn.body, None, 0)]
        while blocks:
            block, owner, k = blocks.pop()
            if not isinstance(block, Block):
                continue
            for i, p in enumerate(block.params):
                if p is v:
                    owner_text = f"'{owner.name}' at {owner.loc}" if owner else f"@{self.fn.name}"
                    return f"parameter {i} of region {k} of {owner_text}"
            for op in block.ops:
                if not isinstance(op, Op):
                    continue
                for i, r in enumerate(op.results):
                    if r is v:
                        return f"result {i} of '{op.name}' at {op.loc}"
                blocks.extend((b, op, j) for j, b in enumerate(op.regions))
        return None

    # -- one op ----------------------------------------------------------------------------

    def _check_op(self, op: object, region: _Region) -> None:
        if not isinstance(op, Op):
            raise self._error(f"a block holds {op!r}, which is not an Op", region.owner)
        if not isinstance(op.name, str) or op.name not in OPS:
            close = difflib.get_close_matches(str(op.name), OPS, n=1)
            raise self._error(
                f"unknown op {op.name!r}",
                op,
                fix=f"did you mean '{close[0]}'?"
                if close
                else "ops are declared in ir/opset; see minipallas.ir.OPS",
            )
        for i, v in enumerate(op.operands):
            if not isinstance(v, Value):
                raise self._error(f"operand {i} is {v!r}, not a Value", op)
            where = self.defs.get(id(v))
            if where is None or where[0] is not region:
                self._misplaced(v, f"operand {i}", op, region)
        for i, r in enumerate(op.results):
            self._value(r, f"result {i}", op)
        for k, block in enumerate(op.regions):
            self._block_shape(block, op, f"region {k}")
            self._no_ref_yields(block, op, k)
        if op.name in CALLS:
            self._check_callee(op)
        try:
            expected = infer_result_types(
                op.name, [v.type for v in op.operands], op.attrs, op.regions, op.loc
            )
        except VerificationError as e:
            raise self._error(e.message, op, fix=e.fix) from None
        if len(expected) != len(op.results):
            raise self._error(
                f"expected {len(expected)} results, got {len(op.results)}",
                op,
                fix=f"its type rule gives ({', '.join(map(str, expected))})",
            )
        for i, (r, t) in enumerate(zip(op.results, expected, strict=True)):
            if r.type != t:
                raise self._error(f"result {i} has type {r.type}, expected {t}", op)
        for i, r in enumerate(op.results):
            self._define(r, region, op, i)

    def _no_ref_yields(self, block: Block, op: Op, k: int) -> None:
        """Refs stay in the region that has them: loop carries, branch and body results are
        arrays."""
        for i, r in enumerate(block.results):
            if isinstance(r.type, RefType):
                fix = (
                    "a scoped allocation lives only inside its body: yield the array read "
                    "from it ('get') instead"
                    if op.name == "run_scoped"
                    else "yield the array read from it ('get'), or pass the ref to the op as an "
                    "operand"
                )
                raise self._error(
                    f"region {k} yields a Ref as value {i} ({r.type}); regions "
                    "yield arrays only, so a ref cannot escape them",
                    op,
                    fix=fix,
                )

    def _check_callee(self, op: Op) -> None:
        callee = op.attrs.get("callee")
        if not isinstance(callee, Function):
            return  # the type rule says what is wrong
        self._block_shape(callee.body, op, f"the body of callee @{callee.name}")
        for i, r in enumerate(callee.body.results):
            if isinstance(r.type, RefType):
                raise self._error(
                    f"callee @{callee.name} returns a Ref as result {i} ({r.type}); a ref "
                    "cannot leave the function that has it",
                    op,
                    fix="return the array read from it ('get'), or pass the ref in as an argument",
                )
        self.calls.append((callee, op))
