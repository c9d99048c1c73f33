"""The op registry: every op is declared once, with its type rule, effects and printed form.

An ``OpDef`` is found by name in ``OPS``. Its ``infer`` function is the op's type rule: given
operand types (an ``OperandTypes``, read by the declared names: ``types.group("indices")``),
static attributes and regions it returns the result types, or raises
``TypeCheckError`` with a plain statement of what is wrong. The builder calls it to give new
ops their result types, and the verifier calls it to check existing ops, so the two can never
disagree. Its ``syntax`` (an ``ir.syntax.Rule``) is how the printer writes the op and the
parser reads it back; it is given in the same declaration, so an op cannot exist without one.
Its ``operands`` name the operand positions, so an error about one says ``operand 'ref'``, and
a pass reads them by name (``op.group("consts")``); its ``params`` say which operands each
region's parameters receive, so a pass reads those by name too (``op.param_group("consts")``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from minipallas.ir.types import Type

if TYPE_CHECKING:  # a leaf at run time: ir.syntax needs ir.nodes, which the type rules do not
    from minipallas.ir.syntax import Rule

Types = tuple[Type, ...]
Attrs = Mapping[str, Any]
Regions = tuple[Any, ...]  # tuple[Block, ...]; Block is not imported to keep this module a leaf
InferFn = Callable[[Types, Attrs, Regions], Types]


class EffectKind(Enum):
    """How an op touches a ref: upstream's three effect kinds (``ReadEffect``, ``WriteEffect``,
    ``AccumEffect``). Declared in the order effects print in: ``{read 0, write 0, accum 1}``."""

    READ = "read"
    WRITE = "write"
    ACCUM = "accum"

    def __str__(self) -> str:
        return self.value


READ, WRITE, ACCUM = EffectKind.READ, EffectKind.WRITE, EffectKind.ACCUM


class TypeCheckError(Exception):
    """Raised by a type rule; the builder and verifier add the op name and location, and, when
    the error is about the operand at position ``operand``, that operand's declared name."""

    def __init__(self, message: str, operand: int | None = None, fix: str | None = None) -> None:
        super().__init__(message)
        self.operand = operand
        self.fix = fix


@dataclass(frozen=True)
class Variadic:
    """Zero or more operands under one name (``indices``, named ``indices[k]`` one by one).

    ``count`` names the int attribute that says how many (``for``'s ``num_consts``); without
    it the group takes the operands the others leave, which at most one group per op may do.
    """

    name: str
    count: str | None = None


@dataclass(frozen=True)
class Flagged:
    """One operand, present when the bool attribute ``flag`` is set (``load``'s ``mask``)."""

    name: str
    flag: str


Operand = str | Variadic | Flagged  # a plain string: exactly one operand of that name
Param = str | Variadic  # a region parameter entry (``OpDef.params``)
Slices = Mapping[str, slice]


@dataclass(frozen=True)
class OpDef:
    """One op kind.

    ``operands`` names the operands in order. ``effect`` is how the op touches the ref in
    operand 0 (upstream's effect kind for the same primitive, or ``None`` when it touches
    none), or a tuple of them for an op that touches several refs, one per leading operand
    (``dma_start``: read 0, write 1, accum 2); effects of region ops come from their regions.
    ``pure`` ops may be removed when their results are unused; ``observable`` ones act outside
    the program (``debug_print``) and may never be removed.

    ``params`` lines each region's parameters up with the operands: per region, names in order.
    The name of an operand group stands for the parameters that receive those operands, one
    each (``for``'s ``"consts"``; its ``"inits"`` are the carries' parameters); any other name
    is one parameter of the region's own (``for``'s ``"index"``), and a ``Variadic`` the
    parameters the others leave (``run_scoped``'s allocations). An op with any number of
    regions (``cond``) declares one entry for all of them.
    """

    name: str
    infer: InferFn
    doc: str
    operands: tuple[Operand, ...]
    syntax: Rule
    regions: int | None = 0  # how many regions; None means one or more
    effect: EffectKind | tuple[EffectKind | None, ...] | None = None
    pure: bool = True
    observable: bool = False
    params: tuple[tuple[Param, ...], ...] = ()
    # the answers of ``groups`` and ``param_groups``: a pass asks per op, they are per shape
    _layouts: dict[tuple, Slices | None] = field(default_factory=dict, repr=False, compare=False)
    _param_layouts: dict[tuple, Slices | None] = field(
        default_factory=dict, repr=False, compare=False
    )
    _sized: tuple[Operand, ...] = field(init=False, repr=False, compare=False)  # by attributes

    def __post_init__(self) -> None:
        sized = tuple(e for e in self.operands if isinstance(e, Flagged) or _counted(e))
        object.__setattr__(self, "_sized", sized)

    @property
    def form(self) -> str:
        """How the op is written, as its docstring shows it: the first ````...```` span that
        writes this op (``%z = add %x, %y : f32[8]``), else the ``::`` block (a region op's
        lines), else a span of a sibling sharing the docstring, with this op's name put in,
        else the docstring's first sentence. Messages that say how to write the op quote it."""
        return _printed_form(self.name, self.doc)

    @property
    def effects(self) -> tuple[tuple[EffectKind, int], ...]:
        """Each effect the op has, with the position of the operand it is on."""
        kinds = self.effect if isinstance(self.effect, tuple) else (self.effect,)
        return tuple((kind, i) for i, kind in enumerate(kinds) if kind is not None)

    def groups(self, count: int, attrs: Attrs) -> Slices | None:
        """Where each declared operand (or group) sits among an op's ``count`` operands, by
        name: ``for``'s ``{"lower": slice(0, 1), "upper": ..., "consts": slice(2, 2 + n),
        "inits": ...}``; ``None`` when that many do not fit the declaration."""
        return self._groups(self._key(count, attrs), attrs)

    def _key(self, count: int, attrs: Attrs) -> tuple:
        """What decides the operand layout: the count and the sizes the attributes give."""
        return (count, *[_declared_size(entry, attrs) for entry in self._sized])

    def _groups(self, key: tuple, attrs: Attrs) -> Slices | None:
        if key not in self._layouts:
            sizes = tuple(_declared_size(entry, attrs) for entry in self.operands)
            self._layouts[key] = _lay_out(self.operands, sizes, key[0])
        return self._layouts[key]

    def param_groups(self, region: int, count: int, attrs: Attrs, n_params: int) -> Slices | None:
        """Where each entry of ``params`` for region ``region`` sits among its ``n_params``
        parameters, given an op of ``count`` operands: ``for``'s body ``{"index": slice(0, 1),
        "consts": slice(1, 1 + n), "inits": ...}``; ``None`` when they do not fit."""
        if not self.params:
            return None
        layout = self._key(count, attrs)
        operands = self._groups(layout, attrs)
        if operands is None:
            return None
        k = min(region, len(self.params) - 1)
        key = (layout, k, n_params)
        if key not in self._param_layouts:
            entries = self.params[k]
            sizes = tuple(
                None if isinstance(e, Variadic) else _size(operands[e]) if e in operands else 1
                for e in entries
            )
            self._param_layouts[key] = _lay_out(entries, sizes, n_params)
        return self._param_layouts[key]

    def operand_names(self, count: int, attrs: Attrs) -> tuple[str, ...] | None:
        """The name of each of an op's ``count`` operands, or ``None`` when that many do not
        fit the declaration (the type rule then says what is wrong)."""
        groups = self.groups(count, attrs)
        if groups is None:
            return None
        variadic = {e.name for e in self.operands if isinstance(e, Variadic)}
        names: list[str] = []
        for name, where in groups.items():
            size = _size(where)
            names += [f"{name}[{k}]" for k in range(size)] if name in variadic else [name] * size
        return tuple(names)

    def operand_label(self, position: int, count: int, attrs: Attrs) -> str:
        """``'ref'`` for the operand at ``position``; just the position when the operands do
        not fit the declaration."""
        names = self.operand_names(count, attrs)
        return f"'{names[position]}'" if names and 0 <= position < len(names) else str(position)


def _declared_size(entry: Operand, attrs: Attrs) -> int | None:
    """How many operands ``entry`` is, as far as the attributes say: ``None`` for the group
    that takes those left, -1 for a count attribute that is not a count."""
    if isinstance(entry, Flagged):
        return 1 if attrs.get(entry.flag) else 0
    if not isinstance(entry, Variadic):
        return 1
    if not _counted(entry):
        return None
    n = attrs.get(entry.count)
    return n if isinstance(n, int) and n >= 0 else -1


def _counted(entry: Operand) -> bool:
    return isinstance(entry, Variadic) and entry.count is not None


def _size(where: slice) -> int:
    return where.stop - where.start


def _lay_out(
    entries: tuple[Operand, ...], sizes: tuple[int | None, ...], count: int
) -> Slices | None:
    """Consecutive slices of ``count`` items, one per entry, of the given sizes (``None``: the
    items the others leave); ``None`` when they do not add up."""
    if -1 in sizes:
        return None
    left = count - sum(n for n in sizes if n is not None)
    if left < 0 or (left and None not in sizes):
        return None
    found, start = {}, 0
    for entry, n in zip(entries, sizes, strict=True):
        n = left if n is None else n
        found[entry if isinstance(entry, str) else entry.name] = slice(start, start + n)
        start += n
    return MappingProxyType(found)


class OperandTypes(tuple):
    """An op's operand types as its type rule receives them: a tuple, read by the names the op
    declares (``types.group("indices")``, ``types.one("value")``) rather than sliced by position.

    The declaration places each operand (``OpDef.groups``); a rule checks the operand count it
    expects first (its own message says what is missing), then reads by name. Reading a name
    when the operands do not fit the declaration is a ``TypeCheckError``."""

    def __new__(cls, types: Iterable[Type], opdef: OpDef, attrs: Attrs) -> OperandTypes:
        self = super().__new__(cls, types)
        self._opdef, self._attrs = opdef, attrs
        return self

    def group(self, name: str) -> Types:
        """The types of the operands declared as ``name`` (a ``Variadic``: any number; a
        ``Flagged`` one: none when its flag is off)."""
        groups = self._opdef.groups(len(self), self._attrs)
        if groups is None:
            names = ", ".join(e if isinstance(e, str) else e.name for e in self._opdef.operands)
            raise TypeCheckError(f"{len(self)} operands do not fit the declared ({names})")
        return tuple.__getitem__(self, groups[name])

    def one(self, name: str) -> Type:
        """The type of the one operand declared as ``name``."""
        found = self.group(name)
        if len(found) != 1:
            raise TypeCheckError(f"operand '{name}' is missing")
        return found[0]


OPS: dict[str, OpDef] = {}


def declare(
    name: str,
    *,
    operands: tuple[Operand, ...],
    syntax: Rule,
    regions: int | None = 0,
    effect: EffectKind | tuple[EffectKind | None, ...] | None = None,
    pure: bool = True,
    observable: bool = False,
    params: tuple[tuple[Param, ...], ...] = (),
) -> Callable[[InferFn], InferFn]:
    """Register ``infer`` as the type rule of op ``name``, whose operands are ``operands``,
    printed and parsed by ``syntax``; ``infer``'s docstring documents the op."""
    if sum(isinstance(e, Variadic) and e.count is None for e in operands) > 1:
        raise ValueError(f"op {name!r}: only one Variadic may go without a count")
    if any(sum(isinstance(e, Variadic) for e in region) > 1 for region in params):
        raise ValueError(f"op {name!r}: only one Variadic per region's parameters")

    def register(infer: InferFn) -> InferFn:
        if name in OPS:
            raise ValueError(f"op {name!r} declared twice")
        doc = (infer.__doc__ or "").strip()
        OPS[name] = OpDef(
            name, infer, doc, operands, syntax, regions, effect, pure, observable, params
        )
        return infer

    return register


def _printed_form(name: str, doc: str) -> str:
    """``OpDef.form``, read from the docstring ``doc`` of op ``name``. A docstring shared by a
    family of ops (``atomic_add``, ``atomic_max``...) writes one of them."""
    spans = [" ".join(span.split()) for span in re.findall(r"``(.+?)``", doc, re.S)]
    for span in spans:
        if re.search(rf"(?:^|= ){re.escape(name)} ", span) and re.search(r"[%\"]", span):
            return span
    if "::" in doc:
        lines = doc.split("::", 1)[1].splitlines()[1:]
        while lines and not lines[0].strip():
            lines.pop(0)
        indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
        block = []
        for line in lines:
            if line.strip() and len(line) - len(line.lstrip()) < indent:
                break
            block.append(line[indent:])
        return "\n".join(block).rstrip()
    for span in spans:
        sibling = re.match(r"(%\w+ = )[\w.]+( .*)", span)
        if sibling:
            return f"{sibling.group(1)}{name}{sibling.group(2)}"
    return " ".join(re.split(r"\.\s", doc.replace("``", ""))[0].split())


def require(condition: bool, message: str) -> None:
    """State a fact a type rule needs; when false, raise it as a ``TypeCheckError``."""
    if not condition:
        raise TypeCheckError(message)
