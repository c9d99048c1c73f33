"""The op registry: every op is declared once, with its type rule, effects and printed form.

An ``OpDef`` is found by name in ``OPS``. Its ``infer`` function is the op's type rule: given
operand types, static attributes and regions it returns the result types, or raises
``TypeCheckError`` with a plain statement of what is wrong. The builder calls it to give new
ops their result types, and the verifier calls it to check existing ops, so the two can never
disagree. Its ``syntax`` (an ``ir.syntax.Rule``) is how the printer writes the op and the
parser reads it back; it is given in the same declaration, so an op cannot exist without one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from minipallas.ir.types import Type

if TYPE_CHECKING:  # a leaf at run time: ir.syntax needs ir.core, which the type rules do not
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
    """Raised by a type rule; the builder and verifier add the op name and location."""


@dataclass(frozen=True)
class OpDef:
    """One op kind.

    ``effect`` is how the op touches the ref in operand 0 (upstream's effect kind for the same
    primitive, or ``None`` when it touches none);
    effects of region ops come from their regions. ``pure`` ops may be removed when their
    results are unused; ``observable`` ones act outside the program (``debug_print``) and may
    never be removed.
    """

    name: str
    infer: InferFn
    doc: str
    syntax: Rule
    regions: int | None = 0  # how many regions; None means one or more
    effect: EffectKind | None = None
    pure: bool = True
    observable: bool = False


OPS: dict[str, OpDef] = {}


def declare(
    name: str,
    *,
    syntax: Rule,
    regions: int | None = 0,
    effect: EffectKind | None = None,
    pure: bool = True,
    observable: bool = False,
) -> Callable[[InferFn], InferFn]:
    """Register ``infer`` as the type rule of op ``name``, printed and parsed by ``syntax``;
    ``infer``'s docstring documents the op."""

    def register(infer: InferFn) -> InferFn:
        if name in OPS:
            raise ValueError(f"op {name!r} declared twice")
        doc = (infer.__doc__ or "").strip()
        OPS[name] = OpDef(name, infer, doc, syntax, regions, effect, pure, observable)
        return infer

    return register


def require(condition: bool, message: str) -> None:
    """State a fact a type rule needs; when false, raise it as a ``TypeCheckError``."""
    if not condition:
        raise TypeCheckError(message)
