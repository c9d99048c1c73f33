"""The importer's engine: an interpreter over a jaxpr that builds minipallas IR.

Importing is ``eval_jaxpr`` with IR-building rules in place of numbers (autodidax's shape):

1. Bind the jaxpr's invars to fresh block parameters (an ``AbstractRef`` becomes a ``RefType``
   parameter, a ``ShapedArray`` an ``ArrayType`` one) and its consts to ``constant`` ops.
2. For each equation, set the scope's location to the user's ``file:line`` carried in
   ``eqn.source_info`` (where it records none, as for ``make_jaxpr(jnp.floor)``, the enclosing
   equation's, and at the top the line that called ``from_jaxpr``), look up the rule of
   ``eqn.primitive.name`` in ``RULES``, hold the equation's parameters to the rule's
   declaration (``params.check``: one it does not declare, or a value it does not accept, is
   refused) and call it; it emits minipallas ops through the scope and returns one value per
   outvar. Every error while importing an equation (no rule, a parameter, a form the rule
   refuses, a bad dtype, even a rule's own bug) is a ``JaxprImportError`` naming the
   primitive at that location, made once in ``ImportScope._located``. A primitive with a *scoped*
   rule (``@scoped_rule``: ``new_ref`` allocates a ref for the rest of its block) imports the
   equations after it itself, inside the region it opens.
3. The block yields the values of the jaxpr's outvars.

Sub-jaxprs (loop bodies, branches, scoped bodies, callees) are imported the same way into
nested scopes: upstream's sub-jaxprs are already closed over their invars, so closure
conversion is binding their invars (and a ``run_scoped`` body's constvars, which stand for the
equation's operands) to the region's parameters, and a ``ClosedJaxpr``'s consts to ``constant``
ops inside the region.

Rules live in one file per family beside this one (``state``, ``mutable``, ``pallas``,
``control``, ``lax``, ``lax_indexing``, ``kernel_call`` for whole kernels...) and register with
``@rule("primitive", ..., params={...})``, declaring every parameter of the primitive
(``params``); another package adds rules the same way. Upstream's avals become
IR types in ``avals``. Literal operands are static: ``scope.static`` gives their value, so rules
can fold what upstream computes from constants (index wrapping).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from minipallas.interop.importer.avals import JaxprImportError, dtype_of, type_of
from minipallas.interop.importer.params import ImportRuleTable, check
from minipallas.ir import dtypes
from minipallas.ir.builder import Builder
from minipallas.ir.conversions import to_dtype
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.literal import Literal
from minipallas.ir.location import UNKNOWN, Location, user_location
from minipallas.ir.types import (
    ANY,
    ArrayType,
    RefType,
    Type,
)
from minipallas.ir.verifier import verify as verify_fn
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import primitive_names, source_info_util

PALLAS_OOB_MODES = ("pad", "clamp")


class Rule(Protocol):
    """How one primitive imports: emit ops through ``scope``, return one value per outvar.

    Operands are read with ``scope.read(atom)`` (a literal becomes a ``constant``) and
    ``scope.static(atom)`` (a literal's value, or None for a variable). A rule reports a form it
    cannot import by raising ``scope.error(message)``.
    """

    def __call__(self, scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]: ...


RULES: ImportRuleTable[Rule] = ImportRuleTable("import rule", primitive_names, "jax primitive")
rule = RULES.register  # @rule("tanh", params={"accuracy": ACCURACY}): ``params`` declares them


class ScopedRule(Protocol):
    """How a primitive that opens a scope for the rest of its block imports (an allocation:
    ``new_ref``): it imports the equations after it, ``rest``, inside that scope and returns
    the values of the block's ``outvars``."""

    def __call__(
        self,
        scope: ImportScope,
        eqn: jax_core.JaxprEqn,
        rest: Sequence[jax_core.JaxprEqn],
        outvars: Sequence[jax_core.Atom],
    ) -> list[Value]: ...


SCOPED_RULES: ImportRuleTable[ScopedRule] = ImportRuleTable(
    "scoped import rule", primitive_names, "jax primitive"
)
scoped_rule = SCOPED_RULES.register


# ``jax.named_scope`` name -> how a run of consecutive equations traced in it imports as a
# whole (``pltpu.core_barrier``'s "sync_cores"): ``rule(scope, eqns)`` imports them and returns
# True, or False to import them one by one; no later equation may read what the run defines
NAMED_SCOPES: dict[str, Callable[[ImportScope, Sequence[jax_core.JaxprEqn]], bool]] = {}


def location(eqn: jax_core.JaxprEqn) -> Location:
    """The user's ``file:line`` that made ``eqn`` (upstream's own frames skipped)."""
    frame = source_info_util.user_frame(eqn.source_info.traceback)
    return Location(frame.file_name, frame.start_line) if frame is not None else UNKNOWN


# --- the importer and its scopes -------------------------------------------------------------


class Importer:
    """One ``from_jaxpr`` call: its options, and the callee functions made so far.

    ``pallas_oob`` says how a Pallas ``load``/``store`` window that runs off the end of its ref
    imports: "pad" (upstream's discharge: lanes past the end read the fill value and their
    writes are dropped) or "clamp" (the window is moved back inside, as for ``ref[...]``).
    ``caller`` is the user's line that asked for the import: the location of errors about the
    jaxpr as a whole (its inputs); ``current`` the location of the equation being imported,
    which an equation of a sub-jaxpr or callee that records no user line gets.
    ``kernel_passes`` is a pipeline run on every ``pallas_call``'s traced kernel before its
    CPU program is made (``kernel_call``), as ``pallas_call(..., passes=...)`` runs it.
    """

    def __init__(self, pallas_oob: str = "pad", kernel_passes: str = "") -> None:
        self.caller = self.current = user_location()
        if pallas_oob not in PALLAS_OOB_MODES:
            raise JaxprImportError(
                f"pallas_oob={pallas_oob!r} is not a mode",
                loc=self.caller,
                fix=f"use one of {', '.join(map(repr, PALLAS_OOB_MODES))}",
            )
        self.pallas_oob = pallas_oob
        self.kernel_passes = kernel_passes
        self.callees: dict[tuple, tuple[object, Function]] = {}
        self.names: set[str] = set()
        # inside a mesh kernel's body (``mesh``): its axis names and sizes
        self.mesh: tuple[tuple[str, ...], tuple[int, ...]] | None = None
        self.signals_cores = False  # and whether it signals other cores' semaphores
        # in a shard_map body over several devices: what importing it needs (``devices.Devices``)
        self.devices: Any = None
        self.grid_names: tuple[str, ...] | None = None  # a pallas_call body's named grid axes

    def unique_name(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name or "fn").strip("_") or "fn"
        if base[0].isdigit():
            base = f"fn_{base}"
        candidate, n = base, 1
        while candidate in self.names:
            n += 1
            candidate = f"{base}_{n}"
        self.names.add(candidate)
        return candidate

    def function(
        self,
        name: str,
        jaxpr: jax_core.Jaxpr,
        consts: Sequence[object] = (),
        types: Sequence[Type] | None = None,
        nonnegative: int = 0,
    ) -> Function:
        """The function a whole jaxpr imports to: invars become parameters (of ``types`` when
        given, else of their avals' types), consts constants. The first ``nonnegative``
        parameters are known to be >= 0 (grid indices), so indexing with them needs no wrap."""
        scope = ImportScope(self)
        if types is None:
            with scope.located():
                types = [type_of(v.aval, f"input {i}") for i, v in enumerate(jaxpr.invars)]
        params = [Value(t) for t in types]
        scope.nonnegative.update(params[:nonnegative])
        scope.bind_consts(jaxpr.constvars, consts)
        results = scope.run(jaxpr, params)
        return Function(self.unique_name(name), scope.builder.block(params, results))

    def callee(self, closed: jax_core.ClosedJaxpr, name: str, args: Sequence[Value]) -> Function:
        """The function for a called ``ClosedJaxpr`` on ``args``, made once per jaxpr object and
        argument types. A ref parameter whose aval names no memory space takes its argument's:
        a ``jax.jit`` helper called in a kernel does not say that its refs are in VMEM."""
        types = tuple(
            _placed(type_of(v.aval, f"input {i}"), a.type)
            for i, (v, a) in enumerate(zip(closed.jaxpr.invars, args, strict=True))
        )
        key = (id(closed), types)
        hit = self.callees.get(key)
        if hit is None or hit[0] is not closed:
            hit = (closed, self.function(name, closed.jaxpr, closed.consts, types))
            self.callees[key] = hit
        return hit[1]


def _placed(param: Type, arg: Type) -> Type:
    """``param`` in ``arg``'s memory space, where ``param`` is a ref in none (``ANY``); a ref
    of which each core of a mesh kernel has a row (``mesh``) is passed with its rows."""
    if isinstance(param, RefType) and isinstance(arg, RefType) and arg.shape != param.shape:
        return arg
    if isinstance(param, RefType) and isinstance(arg, RefType) and param.memory_space == ANY:
        return RefType(param.shape, param.dtype, arg.memory_space)
    return param


class ImportScope:
    """One block under construction: the jaxpr variables seen so far and the ops emitted.

    ``env`` maps upstream variables to minipallas values; ``loc`` is the location of the
    equation being imported (every op emitted gets it); ``primitive`` its name, for errors;
    ``outer`` the location an equation that records none gets (its enclosing equation's).
    """

    def __init__(self, importer: Importer, outer: Location | None = None) -> None:
        self.importer = importer
        self.builder = Builder()  # its errors are re-raised naming the primitive
        self.env: dict[jax_core.Var, Value] = {}
        self.outer = importer.current if outer is None else outer
        self.loc: Location = self.outer
        self.primitive: str | None = None
        self._constants: dict[tuple, Value] = {}
        self.nonnegative: set[Value] = set()  # integer values known >= 0 (e.g. a clamp from 0)
        self.memo: dict[tuple, Any] = {}  # values derived once per block (index wraps)
        self.used: set[jax_core.Var] = set()  # variables some equation or outvar reads
        self.ended: dict[jax_core.Var, str] = {}  # refs whose life ended, and where (freeze)

    def child(self) -> ImportScope:
        """A scope for a region of the current equation (same location)."""
        inner = ImportScope(self.importer, self.loc)
        inner.primitive = self.primitive
        return inner

    def error(self, message: str, fix: str | None = None) -> JaxprImportError:
        return JaxprImportError(message, op=self.primitive, loc=self.loc, fix=fix)

    @contextlib.contextmanager
    def located(self, eqn: jax_core.JaxprEqn | None = None) -> Iterator[None]:
        """Import ``eqn`` (or, with None, the jaxpr's inputs) inside: its location and name
        become the scope's, and any error raised is re-raised as a ``JaxprImportError``
        naming them. Errors located already (an inner equation's) and upstream's verbatim
        ones pass through; a Python error of a rule is reported as an importer bug."""
        if eqn is not None:
            self.loc = location(eqn) or self.outer
            self.primitive = eqn.primitive.name
        enclosing, self.importer.current = self.importer.current, self.loc
        try:
            yield
        except MiniPallasError as e:
            if e.verbatim or (isinstance(e, JaxprImportError) and e.loc):
                raise
            what = f"building '{e.op}': " if e.op and e.op != self.primitive else ""
            raise self.error(f"{what}{e.message}", fix=e.fix) from None
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, AssertionError) as e:
            raise self.error(
                f"the import rule failed: {type(e).__name__}: {e}",
                fix="this is an importer bug or a form it does not know; please report it "
                "with the program",
            ) from e
        finally:
            self.importer.current = enclosing

    # reading operands

    def read(self, atom: jax_core.Atom) -> Value:
        """The value of a variable, or a ``constant`` for a literal."""
        if isinstance(atom, jax_core.Literal):
            return self.constant(atom.val, dtype_of(atom.aval.dtype, "a literal"))
        try:
            return self.env[atom]
        except KeyError:
            if atom in self.ended:
                raise self.error(
                    f"a ref is used after {self.ended[atom]} ended its life",
                    fix="read or write the ref before freeing it, or freeze it last",
                ) from None
            raise self.error(f"variable {atom} is used before it is defined") from None

    def is_used(self, var: jax_core.Var) -> bool:
        """Whether anything reads ``var`` (upstream prints unused outputs as ``_``)."""
        return not isinstance(var, jax_core.DropVar) and var in self.used

    def static(self, atom: object) -> np.ndarray | None:
        """A literal operand's value as a numpy scalar or array; None for a variable."""
        if isinstance(atom, jax_core.Literal):
            return np.asarray(atom.val, dtype=atom.aval.dtype)
        return None

    # emitting ops

    def emit_op(
        self,
        name: str,
        operands: Sequence[Value],
        regions: Sequence[Block] = (),
        **attrs: Any,
    ) -> Op:
        return self.builder.create(name, operands, attrs, regions, self.loc)

    def emit(self, name: str, operands: Sequence[Value], **attrs: Any) -> Value:
        """Emit a one-result op and return its result."""
        return self.emit_op(name, operands, **attrs).result

    def constant(self, value: object, dtype: str, shape: tuple[int, ...] | None = None) -> Value:
        """A constant of ``dtype``; a scalar is made once per scope and broadcast to ``shape``."""
        array = to_dtype(value, dtype)
        splat = array.size > 0 and bool(np.all(array == array.flat[0]))
        if array.ndim == 0 or (shape is not None and splat):
            scalar = array.reshape(()) if array.ndim == 0 else array.flat[0]
            key = (dtype, np.asarray(scalar).tobytes())
            c = self._constants.get(key)
            if c is None:
                c = self.emit("constant", [], value=Literal.of(scalar, dtype))
                self._constants[key] = c
                if dtypes.is_int(dtype) and scalar >= 0:
                    self.nonnegative.add(c)
            return self.broadcast(c, shape) if shape else c
        c = self.emit("constant", [], value=Literal.of(array, dtype))
        if dtypes.is_int(dtype) and bool(np.all(array >= 0)):
            self.nonnegative.add(c)
        return c

    def broadcast(self, x: Value, shape: Sequence[int]) -> Value:
        """``x`` broadcast to ``shape`` by numpy's rule (trailing dimensions line up)."""
        shape = tuple(shape)
        if x.type.shape == shape:
            return x
        key = ("broadcast", x, shape)
        if key not in self.memo:  # made once per block: scalar literals broadcast often
            rank = x.type.ndim
            dims = tuple(range(len(shape) - rank, len(shape)))
            out = self.emit("broadcast_in_dim", [x], shape=shape, dims=dims)
            if x in self.nonnegative:
                self.nonnegative.add(out)
            self.memo[key] = out
        return self.memo[key]

    def convert(self, x: Value, dtype: str) -> Value:
        """``x`` as ``dtype``; a non-negative value stays known non-negative when the
        conversion cannot wrap it (from a signed integer or a bool to a wider integer)."""
        if x.type.dtype == dtype:
            return x
        out = self.emit("convert", [x], dtype=dtype)
        widening = dtypes.is_int(dtype) and (
            x.type.dtype == "bool"
            or (
                dtypes.is_signed(x.type.dtype)
                and dtypes.itemsize(x.type.dtype) <= dtypes.itemsize(dtype)
            )
        )
        if widening and (x.type.dtype == "bool" or x in self.nonnegative):
            self.nonnegative.add(out)
        return out

    # binding and running

    def bind(self, var: jax_core.Var, value: Value) -> None:
        if not isinstance(var, jax_core.DropVar):
            self.env[var] = value

    def bind_consts(self, constvars: Sequence[jax_core.Var], consts: Sequence[object]) -> None:
        """Each const of a closed jaxpr becomes a ``constant`` op (refs cannot be consts)."""
        for var, const in zip(constvars, consts, strict=True):
            t = type_of(var.aval, f"constant {var}")
            if not isinstance(t, ArrayType):
                raise self.error(f"constant {var} is a ref; minipallas cannot import ref constants")
            self.bind(var, self.constant(np.asarray(const), t.dtype, t.shape))

    def run(self, jaxpr: jax_core.Jaxpr, args: Sequence[Value]) -> list[Value]:
        """Bind ``jaxpr``'s invars to ``args``, import its equations, return its outvars' values."""
        for var, value in zip(jaxpr.invars, args, strict=True):
            self.bind(var, value)
        is_var = jax_core.Var.__instancecheck__
        self.used.update(v for eqn in jaxpr.eqns for v in eqn.invars if is_var(v))
        self.used.update(v for v in jaxpr.outvars if is_var(v))
        return self.run_eqns(jaxpr.eqns, jaxpr.outvars)

    def run_eqns(
        self, eqns: Sequence[jax_core.JaxprEqn], outvars: Sequence[jax_core.Atom]
    ) -> list[Value]:
        """Import ``eqns`` in order, return the values of ``outvars``. An equation with a
        scoped rule imports the equations after it itself (inside the scope it opens)."""
        k = 0
        while k < len(eqns):
            eqn = eqns[k]
            scoped = SCOPED_RULES.get(eqn.primitive.name)
            if scoped is not None:
                with self.located(eqn):
                    self.check_params(eqn, SCOPED_RULES)
                    return scoped(self, eqn, eqns[k + 1 :], outvars)
            named = _named_scope(eqn)
            if named is not None:
                n = next((j for j in range(k, len(eqns)) if _named_scope(eqns[j]) != named),
                         len(eqns))  # fmt: skip
                for e in eqns[k:n]:  # imported as a whole, each held to its rule's params
                    if e.primitive.name in RULES:
                        with self.located(e):
                            self.check_params(e, RULES)
                with self.located(eqns[n - 1]):
                    if NAMED_SCOPES[named](self, eqns[k:n]):
                        k = n
                        continue
            with self.located(eqn):
                self._import(eqn)
            k += 1
        self.loc, self.primitive = self.outer, None
        return [self.read(v) for v in outvars]

    def _import(self, eqn: jax_core.JaxprEqn) -> None:
        name = eqn.primitive.name
        fn = RULES.get(name)
        if fn is None:
            raise self.error(
                f"minipallas cannot import the primitive '{name}'",
                fix="rewrite this line with supported operations, or register an import rule "
                "with minipallas.interop.importer.rule",
            )
        self.check_params(eqn, RULES)
        outs = fn(self, eqn)
        if len(outs) != len(eqn.outvars):
            raise self.error(
                f"the import rule gave {len(outs)} results for {len(eqn.outvars)} outputs",
                fix="this is an importer bug; please report it with the program",
            )
        for var, value in zip(eqn.outvars, outs, strict=True):
            if isinstance(var, jax_core.DropVar):
                continue
            expected = type_of(var.aval, f"output of '{name}'", name == "get_barrier_semaphore")
            if value.type != expected and not self._rows_of(value.type, expected):
                raise self.error(
                    f"the import rule made {value.type} for an output of type {expected}",
                    fix="this is an importer bug; please report it with the program",
                )
            self.env[var] = value

    def _rows_of(self, got: Type, expected: Type) -> bool:
        """Whether ``got`` holds a row per program of a mesh kernel of what ``expected`` is (a
        kernel's barrier semaphore that spans devices, ``devices``)."""
        mesh = self.importer.mesh
        if mesh is None or not isinstance(got, RefType) or not isinstance(expected, RefType):
            return False
        rows = RefType((*mesh[1], *expected.shape), expected.dtype, expected.memory_space)
        return got == rows

    def check_params(self, eqn: jax_core.JaxprEqn, table: ImportRuleTable) -> None:
        """Refuses a parameter of ``eqn`` its rule in ``table`` does not declare, or a value
        it does not accept (``params.check``), at this scope's location."""
        name = eqn.primitive.name
        check(name, table.params.get(name), eqn.params, self.error)

    def inline(
        self, jaxpr: jax_core.Jaxpr, consts: Sequence[object], args: Sequence[Value]
    ) -> list[Value]:
        """Import ``jaxpr``'s equations into this block, its invars bound to ``args``."""
        loc, primitive = self.loc, self.primitive
        self.bind_consts(jaxpr.constvars, consts)
        outs = self.run(jaxpr, args)
        self.loc, self.primitive = loc, primitive
        return outs

    def region(
        self,
        jaxpr: jax_core.Jaxpr,
        consts: Sequence[object] | None,
        params: Sequence[Value],
        prologue: Callable[[ImportScope, list[Value]], list[Value]] | None = None,
        epilogue: Callable[[ImportScope, list[Value]], list[Value]] | None = None,
    ) -> Block:
        """A region with parameters ``params`` importing ``jaxpr``.

        ``prologue`` maps the parameters to the jaxpr's invars (emitting ops in the region,
        e.g. the slice of a scanned array); ``epilogue`` maps the jaxpr's outvars to what the
        region yields. Both default to the identity. ``consts`` are the values of the jaxpr's
        constvars, or None when the prologue binds them (a ``run_scoped`` body's operands).
        """
        inner = self.child()
        args = list(params)
        if prologue is not None:
            args = prologue(inner, args)
        if consts is not None:
            inner.bind_consts(jaxpr.constvars, consts)
        outs = inner.run(jaxpr, args)
        inner.loc, inner.primitive = self.loc, self.primitive
        if epilogue is not None:
            outs = epilogue(inner, outs)
        return inner.builder.block(params, outs)


def _named_scope(eqn: jax_core.JaxprEqn) -> str | None:
    """The innermost ``jax.named_scope`` of ``eqn`` when a rule imports that scope as a whole."""
    if not NAMED_SCOPES:
        return None
    stack = eqn.source_info.name_stack.stack
    name = str(getattr(stack[-1], "name", "")) if stack else ""
    return name if name in NAMED_SCOPES else None


def closed_parts(jaxpr: object) -> tuple[jax_core.Jaxpr, Sequence[object]]:
    """A ``ClosedJaxpr``'s jaxpr and consts, or an open jaxpr with no consts."""
    if isinstance(jaxpr, jax_core.ClosedJaxpr):
        return jaxpr.jaxpr, jaxpr.consts
    return jaxpr, ()  # type: ignore[return-value]


def from_jaxpr(
    jaxpr: jax_core.ClosedJaxpr | jax_core.Jaxpr,
    consts: Sequence[object] = (),
    *,
    name: str | None = None,
    pallas_oob: str = "pad",
    verify: bool = True,
    kernel_passes: str = "",
) -> Function:
    """Import an upstream JAX jaxpr (``jax.make_jaxpr(f)(...)``) as a minipallas function.

    Accepts a ``ClosedJaxpr``, or a ``Jaxpr`` with the values of its constvars in ``consts``.
    Ref inputs become ``Ref`` parameters, array inputs array parameters, consts ``constant``
    ops. The function computes what upstream's ``discharge_state`` + evaluation computes,
    index wrapping and clamping, uninitialized scratch and Pallas window padding included
    (see ``pallas_oob`` on ``Importer``). ``kernel_passes`` runs on each ``pallas_call``'s
    kernel (kernel passes on the kernel, function passes on its body), as
    ``pallas_call(..., passes=...)`` runs it on minipallas's own. With ``verify`` the result is
    checked by ``minipallas.verify``. Raises ``JaxprImportError`` (a ``MiniPallasError``) naming the
    primitive and the user's line for anything it cannot import.
    """

    importer = Importer(pallas_oob, kernel_passes)
    if isinstance(jaxpr, jax_core.ClosedJaxpr):
        if consts:
            raise JaxprImportError(
                "a ClosedJaxpr carries its own consts; pass none", loc=importer.caller
            )
        jaxpr, consts = jaxpr.jaxpr, jaxpr.consts
    elif not isinstance(jaxpr, jax_core.Jaxpr):
        raise JaxprImportError(
            f"from_jaxpr expects a jaxpr, got {type(jaxpr).__name__}",
            loc=importer.caller,
            fix="pass jax.make_jaxpr(f)(*args)",
        )
    if len(consts) != len(jaxpr.constvars):
        raise JaxprImportError(
            f"the jaxpr has {len(jaxpr.constvars)} constvars but {len(consts)} consts were given",
            loc=importer.caller,
        )
    if name is None:
        debug = getattr(jaxpr, "debug_info", None)
        name = getattr(debug, "func_name", None) or "main"
    fn = importer.function(name, jaxpr, consts)
    if verify:
        verify_fn(fn)
    return fn
