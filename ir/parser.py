"""The parser: the printer's text back to IR, with errors at ``line:col``.

Grammar (each op's declaration gives its ``op-body``: ``OPS[name].syntax``)::

    module    := function*
    function  := 'func' SYMBOL '(' params? ')' '->' '(' types? ')' effects?
                 '{' op* 'return' values? '}'
    effects   := 'effects' '{' (KIND INT (',' KIND INT)*)? '}'
    op        := (VALUE (',' VALUE)* '=')? NAME op-body (':' types)? location?
    region    := '{' ('^' '(' params? ')' ':')? op* 'yield' values? '}'
    location  := 'loc' '(' (STRING ':' INT (':' INT)? | INT ':' INT | 'unknown') ')'
    type      := DTYPE '[' ints? ']' | 'Ref' '{' DTYPE '[' ints? ']' (',' SPACE)? '}'

Regions are closed, so each region starts a fresh scope: using a value from outside it is an
error that says so. Ops are built through their type rules (``infer_result_types``), so a type
error is reported at the op's ``line:col``: as the verifier's ``VerificationError`` (the text
parsed; the program is wrong), with the rule's fix or the op's documented form. Each op gets
that position as its location unless the text gives an explicit ``loc(...)``. A ``call`` names
a function defined earlier in the text. Every token is looked at a bounded number of times:
parsing is linear.
"""

from __future__ import annotations

import difflib
import gc
import json
import math
from typing import Any

from minipallas.ir import dtypes
from minipallas.ir.builder import infer_result_types
from minipallas.ir.core import Block, Function, Module, Op, Value
from minipallas.ir.effects import Effect, effects
from minipallas.ir.errors import ParseError, VerificationError
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.lexer import EOF, IDENT, NUMBER, STRING, SYMBOL, VALUE, Source, Token, tokenize
from minipallas.ir.location import UNKNOWN, Location
from minipallas.ir.opdef import OPS, EffectKind, OpDef
from minipallas.ir.printer import effects_text
from minipallas.ir.types import ANY, MEMORY_SPACES, ArrayType, RefType, Semaphores, Type


def parse(text: str) -> Function:
    """The last function in ``text``; the functions before it are its callees."""
    return parse_module(text).entry


def parse_module(text: str) -> Module:
    """Every function in ``text``, in order."""
    # Parsing builds millions of small objects and no reference cycles. Left running, the
    # cyclic garbage collector re-scans the growing IR again and again (a third of the time
    # at 100k ops), so it is paused meanwhile.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return Parser(text).module()
    finally:
        if was_enabled:
            gc.enable()


class Parser:
    """A cursor over the tokens plus the scopes of value names and the functions seen so far."""

    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.source = Source(text)
        self.pos = 0
        self.scopes: list[dict[str, tuple[Value, Token]]] = []
        self.functions: dict[str, Function] = {}
        # types are frozen values: one object per distinct type saves re-checking each use
        self.array_types: dict[tuple, ArrayType] = {}
        self.ref_types: dict[tuple, RefType] = {}

    # -- tokens -------------------------------------------------------------------------------

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def next(self) -> Token:
        tok = self.tokens[self.pos]
        if tok.kind != EOF:
            self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.tokens[self.pos]
        return tok.text == text and tok.kind not in (STRING, VALUE, SYMBOL)

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.pos += 1
            return True
        return False

    def expect(self, text: str, context: str) -> Token:
        if not self.at(text):
            raise self.error(_expected(f"'{text}'", context))
        return self.next()

    def expect_kind(self, kind: str, what: str, context: str = "") -> Token:
        if self.peek().kind != kind:
            raise self.error(_expected(what, context))
        return self.next()

    def where(self, tok: Token) -> Location:
        """The ``line:col`` at which ``tok`` starts."""
        return self.source.loc(tok.offset)

    def error(self, message: str, tok: Token | None = None) -> ParseError:
        """``message, got <token>`` at the current token (or at ``tok`` without 'got')."""
        if tok is not None:
            return ParseError(message, loc=self.where(tok))
        here = self.peek()
        return ParseError(f"{message}, got {here.describe()}", loc=self.where(here))

    # -- functions and blocks -----------------------------------------------------------------

    def module(self) -> Module:
        order = [self.function()]
        while self.peek().kind != EOF:
            order.append(self.function())
        return Module(order)

    def function(self) -> Function:
        self.expect("func", "to start a function")
        sym = self.expect_kind(SYMBOL, "a function name like @kernel", "after 'func'")
        name = _symbol_name(sym)
        if name in self.functions:
            raise self.error(f"redefinition of function @{name}", sym)
        self.scopes = [{}]
        self.expect("(", "after the function name")
        params = self.params()
        self.expect("->", "after the parameter list")
        self.expect("(", "before the result types")
        result_types = [] if self.at(")") else self.types()
        self.expect(")", "after the result types")
        claimed, effects_tok = None, self.peek()
        if self.accept("effects"):
            claimed = self.effect_set()
        self.expect("{", "to open the function body")
        ops, results, ret = self.ops("return")
        self.expect("}", "after 'return'")
        if [v.type for v in results] != result_types:
            got = ", ".join(str(v.type) for v in results)
            want = ", ".join(map(str, result_types))
            raise self.error(f"returns ({got}), but the header says ({want})", ret)
        fn = Function(name, Block(tuple(params), ops, tuple(results)))
        if claimed is not None:
            _check_effects(fn, claimed, self.where(effects_tok))
        self.functions[name] = fn
        return fn

    def effect_set(self) -> set[tuple[EffectKind, int]]:
        self.expect("{", "after 'effects'")
        found = set()
        while not self.accept("}"):
            if found:
                self.expect(",", "between effects")
            tok = self.expect_kind(IDENT, "an effect (read, write or accum)", "in 'effects'")
            try:
                kind = EffectKind(tok.text)
            except ValueError:
                raise self.error(
                    f"unknown effect '{tok.text}'; expected read, write or accum", tok
                ) from None
            found.add((kind, self.integer("after the effect kind", minimum=0)))
        return found

    def params(self) -> list[Value]:
        """``%a: T, %b: T )`` — defines each name; consumes the closing parenthesis."""
        params: list[Value] = []
        while not self.accept(")"):
            if params:
                self.expect(",", "between parameters")
            tok = self.expect_kind(VALUE, "a parameter name like %0", "in the parameter list")
            self.expect(":", f"after parameter {tok.text}")
            params.append(self.define(tok, Value(self.type())))
        return params

    def ops(self, terminator: str) -> tuple[list[Op], list[Value], Token]:
        """Ops up to and including ``terminator`` (``yield`` or ``return``) and its values."""
        ops = []
        while True:
            tok = self.peek()
            if tok.kind == IDENT and tok.text == terminator:
                self.next()
                return ops, self.values(), tok
            if tok.kind == EOF or tok.text in ("}", "yield", "return"):
                raise self.error(f"expected an op or '{terminator}'")
            ops.append(self.op())

    def region(self) -> Block:
        self.expect("{", "to open a region")
        outer, self.scopes = self.scopes, [*self.scopes, {}]
        params: list[Value] = []
        if self.accept("^"):
            self.expect("(", "after '^'")
            params = self.params()
            self.expect(":", "after the region parameters")
        ops, results, _ = self.ops("yield")
        self.expect("}", "after 'yield'")
        self.scopes = outer
        return Block(tuple(params), ops, tuple(results))

    def op(self) -> Op:
        names = []
        if self.peek().kind == VALUE:
            names.append(self.next())
            while self.accept(","):
                names.append(self.expect_kind(VALUE, "a result name", "after ','"))
            self.expect("=", "after the result names")
        name_tok = self.expect_kind(IDENT, "an op name", "")
        name = name_tok.text
        opdef = OPS.get(name)
        text_loc = self.where(name_tok)  # as mlir-opt: an op is where its name is
        if opdef is None:
            close = difflib.get_close_matches(name, OPS, n=1, cutoff=0.7)
            raise ParseError(
                f"unknown op '{name}'",
                loc=text_loc,
                fix=f"did you mean '{close[0]}'?"
                if close
                else "the op reference (docs/reference/ops.md) lists every op",
            )
        parsed = opdef.syntax.parse(self)
        types: list[Type] = []
        if names or self.at(":"):
            after = "the regions" if parsed.regions else "operand list"
            colon = self.expect(":", f"after {after}")
            if not self.at_type():
                raise ParseError(
                    f"expected the result types after ':', got {self.peek().describe()}",
                    op=name,
                    loc=self.where(colon),
                    fix="an op with no results has no ':' (a loop carrying nothing ends "
                    "with '}' alone)"
                    if not names
                    else f"write {_count(len(names), 'result type')} after the ':'",
                )
            types = self.types()
        if len(types) != len(names):
            raise ParseError(
                f"{_count(len(names), 'result name')} but {_count(len(types), 'result type')}",
                op=name,
                loc=text_loc,
            )
        if parsed.from_types is not None:
            if not types:
                raise ParseError("needs a result name and type", op=name, loc=text_loc)
            parsed.attrs.update(parsed.from_types(types))
        loc = self.location()
        loc = text_loc if loc is None else loc
        inferred = _inferred(name, opdef, parsed, text_loc)
        if len(inferred) != len(types):
            raise ParseError(
                f"the op has {_count(len(inferred), 'result')}, but the text names {len(types)}",
                op=name,
                loc=text_loc,
            )
        if list(inferred) != types:
            got, written = ", ".join(map(str, inferred)), ", ".join(map(str, types))
            raise VerificationError(
                f"result types are ({got}), but the text says ({written})",
                op=name,
                loc=text_loc,
                fix=f"write the type the op's rule gives after the colon: ': {got}'",
            )
        results = tuple(self.define(tok, Value(t)) for tok, t in zip(names, types, strict=True))
        return Op(name, tuple(parsed.operands), results, parsed.attrs, tuple(parsed.regions), loc)

    def location(self) -> Location | None:
        if not self.accept("loc"):
            return None
        self.expect("(", "after 'loc'")
        if self.accept("unknown"):
            self.expect(")", "after 'unknown'")
            return UNKNOWN
        if self.peek().kind == STRING:
            file = json.loads(self.next().text)
            self.expect(":", "after the file name")
            line = self.integer("as the line number", minimum=0)
            col = self.integer("as the column", minimum=0) if self.accept(":") else 0
        else:
            file = ""
            line = self.integer("as the line number", minimum=0)
            self.expect(":", "after the line number")
            col = self.integer("as the column", minimum=0)
        self.expect(")", "to close 'loc'")
        return Location(file, line, col)

    # -- values -------------------------------------------------------------------------------

    def define(self, tok: Token, value: Value) -> Value:
        scope = self.scopes[-1]
        if tok.text in scope:
            first = scope[tok.text][1]
            raise self.error(
                f"redefinition of {tok.text} (first defined at {self.where(first)})", tok
            )
        scope[tok.text] = (value, tok)
        return value

    def operand(self, context: str) -> Value:
        tok = self.expect_kind(VALUE, "a value like %0", context)
        found = self.scopes[-1].get(tok.text)
        if found is not None:
            return found[0]
        if any(tok.text in scope for scope in self.scopes[:-1]):
            raise ParseError(
                f"{tok.text} is defined outside this region; regions are closed, so "
                f"pass it in as an operand of the region's op",
                loc=self.where(tok),
            )
        raise ParseError(f"undefined value {tok.text}", loc=self.where(tok))

    def values(self) -> list[Value]:
        """A possibly empty comma-separated list of values (no brackets). A comma followed by
        something else is left for the caller (``%x, permutation (1, 0)``)."""
        if self.peek().kind != VALUE:
            return []
        values = [self.operand("")]
        while self.at(",") and self.tokens[self.pos + 1].kind == VALUE:
            self.pos += 1
            values.append(self.operand(""))
        return values

    def paren_values(self, context: str) -> list[Value]:
        """``(%a, %b)``, possibly ``()``."""
        self.expect("(", context)
        values = self.values()
        self.expect(")", "after the operand list")
        return values

    # -- types and attributes -----------------------------------------------------------------

    def at_type(self) -> bool:
        """Whether a type starts here: ``Ref``, an element type, or a word followed by ``[``."""
        tok, after = self.peek(), self.tokens[min(self.pos + 1, len(self.tokens) - 1)]
        known = tok.text == "Ref" or tok.text in dtypes.FROM_SHORT
        return tok.kind == IDENT and (known or after.text == "[")

    def types(self) -> list[Type]:
        types = [self.type()]
        while self.accept(","):
            types.append(self.type())
        return types

    def type(self) -> Type:
        tok = self.expect_kind(IDENT, "a type like f32[8] or Ref{f32[8]}", "")
        if tok.text != "Ref":
            return self.array_type(tok)
        self.expect("{", "after 'Ref'")
        array = self.array_type(self.expect_kind(IDENT, "an element type", "in a Ref type"))
        space = ANY
        if self.accept(","):
            space_tok = self.expect_kind(IDENT, "a memory space", "after ','")
            space = MEMORY_SPACES.get(space_tok.text)
            if space is None:
                raise self.error(
                    f"unknown memory space '{space_tok.text}'; expected one of "
                    f"{', '.join(MEMORY_SPACES)}",
                    space_tok,
                )
        self.expect("}", "to close the Ref type")
        key = (array, space)
        if key not in self.ref_types:
            if isinstance(space, Semaphores) and array.dtype != "int32":
                raise self.error(f"semaphores count in int32, got {array} in a semaphore ref", tok)
            self.ref_types[key] = RefType(array.shape, array.dtype, space)
        return self.ref_types[key]

    def array_type(self, tok: Token) -> ArrayType:
        dtype = dtypes.FROM_SHORT.get(tok.text)
        if dtype is None and self.at("["):
            close = difflib.get_close_matches(tok.text, dtypes.FROM_SHORT, n=1)
            raise ParseError(
                f"unknown element type '{tok.text}'",
                loc=self.where(tok),
                fix=(f"did you mean '{close[0]}'? " if close else "")
                + f"The element types are {', '.join(dtypes.FROM_SHORT)}",
            )
        if dtype is None:
            raise self.error(f"expected a type like f32[8] or Ref{{f32[8]}}, got '{tok.text}'", tok)
        self.expect("[", f"after '{tok.text}'")
        dims = []
        while not self.accept("]"):
            if dims:
                self.expect(",", "between dimensions")
            dims.append(self.integer("as a dimension", minimum=0))
        key = (dtype, tuple(dims))
        if key not in self.array_types:
            self.array_types[key] = ArrayType(*reversed(key))
        return self.array_types[key]

    def integer(self, context: str, minimum: int | None = None) -> int:
        tok = self.peek()
        if tok.kind != NUMBER or not tok.text.lstrip("-").isdigit():
            raise self.error(_expected("an integer", context))
        self.next()
        value = int(tok.text)
        if minimum is not None and value < minimum:
            raise self.error(f"expected an integer >= {minimum} {context}, got {value}", tok)
        return value

    def int_tuple(self, context: str) -> tuple[int, ...]:
        """``(1, 0)``, possibly ``()``."""
        self.expect("(", context)
        values: list[int] = []
        while not self.accept(")"):
            if values:
                self.expect(",", "between integers")
            values.append(self.integer("in the list"))
        return tuple(values)

    def string_tuple(self, context: str) -> tuple[str, ...]:
        """``("x", "y")``, possibly ``()``."""
        self.expect("(", context)
        values: list[str] = []
        while not self.accept(")"):
            if values:
                self.expect(",", "between strings")
            values.append(json.loads(self.expect_kind(STRING, "a string", "in the list").text))
        return tuple(values)

    def callee(self) -> Function:
        tok = self.expect_kind(SYMBOL, "a function name like @f", "after 'call'")
        fn = self.functions.get(_symbol_name(tok))
        if fn is None:
            raise self.error(
                f"unknown function {tok.text}; a callee must be defined before its callers", tok
            )
        return fn

    def literal(self) -> tuple[list[Token], tuple[int, ...] | None, Token]:
        """A scalar (shape ``None``: a splat) or nested lists; returns tokens, shape, start."""
        start = self.peek()
        if not self.at("["):
            if start.kind != NUMBER and start.text not in ("true", "false"):
                raise self.error("expected a number, true, false or a list")
            return [self.next()], None, start
        tokens: list[Token] = []
        return tokens, self._nested(tokens), start

    def _nested(self, tokens: list[Token]) -> tuple[int, ...]:
        open_tok = self.expect("[", "to open a list")
        shapes = []
        while not self.accept("]"):
            if shapes:
                self.expect(",", "between list elements")
            if self.at("["):
                shapes.append(self._nested(tokens))
            else:
                tok = self.peek()
                if tok.kind != NUMBER and tok.text not in ("true", "false"):
                    raise self.error("expected a number, true, false or a list")
                tokens.append(self.next())
                shapes.append(())
        if any(s != shapes[0] for s in shapes):
            raise self.error("ragged list: all elements must have the same shape", open_tok)
        return (len(shapes), *(shapes[0] if shapes else ()))

    def indexed(self) -> tuple[Value, list[Value], tuple]:
        """``%r[...]``: the indexed value, the dynamic index values, and the indexer.

        Dynamic indices are numbered in order of appearance. Beyond what the printer writes,
        ``...``, open slices (``2:``, ``:4``, ``::2``), ``ds(3, 8)`` with a static start and
        missing trailing dimensions are accepted, as in Python.
        """
        base = self.operand("to index")
        shape = base.type.shape
        open_tok = self.expect("[", "to open the indexer")
        dyn: list[Value] = []
        raw: list[Any] = []
        while not self.accept("]"):
            if raw:
                self.expect(",", "between indices")
            raw.append(self.index_entry(dyn))
        ellipses = sum(1 for e in raw if e == "...")
        if ellipses > 1:
            raise self.error("an indexer can have only one '...'", open_tok)
        if len(raw) - ellipses > len(shape):
            raise self.error(
                f"{len(raw) - ellipses} indices for {base.type} of rank {len(shape)}", open_tok
            )
        fill = [(None, None, None)] * (len(shape) - len(raw) + ellipses)
        if ellipses:
            at = raw.index("...")
            raw[at : at + 1] = fill
        else:
            raw += fill
        indexer = tuple(
            _slice(e, extent) if isinstance(e, tuple) else e
            for e, extent in zip(raw, shape, strict=True)
        )
        return base, dyn, indexer

    def index_entry(self, dyn: list[Value]) -> Any:
        """One entry: an indexer entry, ``"..."``, or a static slice still to be sized as
        ``(start, stop, stride)`` with ``None`` for omitted parts."""
        tok = self.peek()
        if self.accept("..."):
            return "..."
        if tok.kind == VALUE:
            value = self.operand("")
            dyn.append(value)
            is_array = isinstance(value.type, ArrayType) and value.type.ndim > 0
            return Array(Dyn(len(dyn) - 1)) if is_array else Int(Dyn(len(dyn) - 1))
        if tok.kind == IDENT and tok.text in ("ds", "array"):
            self.next()
            self.expect("(", f"after '{tok.text}'")
            if tok.text == "array":
                dyn.append(self.operand("in 'array(...)'"))
                self.expect(")", "to close 'array('")
                return Array(Dyn(len(dyn) - 1))
            if self.peek().kind == VALUE:
                dyn.append(self.operand(""))
                start: int | Dyn = Dyn(len(dyn) - 1)
            else:
                start = self.integer("as the start of 'ds'", minimum=0)
            self.expect(",", "after the start of 'ds'")
            size = self.integer("as the size of 'ds'", minimum=0)
            stride = self.integer("as the stride of 'ds'", minimum=1) if self.accept(",") else 1
            self.expect(")", "to close 'ds('")
            return Slice(start, size, stride)
        parts: list[int | None] = [None, None, None]
        if tok.kind == NUMBER:
            parts[0] = self.integer("as an index", minimum=0)
            if not self.at(":"):
                return Int(parts[0])
        if not self.accept(":"):
            raise self.error("expected an index: an integer, a slice, ds(...) or a value")
        for k in (1, 2):
            if self.peek().kind == NUMBER:
                parts[k] = self.integer("in the slice", minimum=1 if k == 2 else 0)
            if k == 1 and not self.accept(":"):
                break
        return tuple(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _expected(what: str, context: str) -> str:
    return f"expected {what} {context}" if context else f"expected {what}"


def _slice(parts: tuple, extent: int) -> Slice:
    start, stop, stride = parts
    start = 0 if start is None else start
    stop = extent if stop is None else stop
    stride = 1 if stride is None else stride
    return Slice(start, max(0, math.ceil((stop - start) / stride)), stride)


def _symbol_name(tok: Token) -> str:
    text = tok.text[1:]
    return json.loads(text) if text.startswith('"') else text


def _check_effects(fn: Function, claimed: set[tuple[EffectKind, int]], loc: Location) -> None:

    actual = effects(fn)
    if {(e.kind, e.input) for e in actual} != claimed:
        written = effects_text(frozenset(Effect(kind, i) for kind, i in claimed))
        raise ParseError(
            f"the header says effects {written}, but the body has {effects_text(actual)}",
            loc=loc,
            fix=f"write 'effects {effects_text(actual)}', or leave the header's effects out "
            "(they are checked only when written)",
        )


def _inferred(name: str, opdef: OpDef, parsed: Any, loc: Location) -> tuple[Type, ...]:
    """The op's result types by its type rule. A rule that refuses the operands is a
    verifier error (the text parsed; the program is wrong), located at the op, with the
    rule's fix or else the op's documented form."""
    try:
        return infer_result_types(
            name,
            [v.type for v in parsed.operands],
            parsed.attrs,
            parsed.regions,
            loc,
            VerificationError,
        )
    except VerificationError as e:
        if e.fix:
            raise
        form = opdef.form.replace("\n", "\n      ")
        raise VerificationError(e.message, op=name, loc=loc, fix=f"write it as {form}") from None
