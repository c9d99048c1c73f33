"""``platform_index``: which branch of a platform-dependent ``cond`` runs, decided by the
platform the program is lowered for (``lax.platform_dependent``; ``jnp.diagonal`` emits one).

``platforms`` holds one entry per branch: a tuple of platform names, or ``None`` for the
default branch. The choice is made where the platform is known, by one of upstream's two
rules: XLA's (``PLATFORM``: the branch naming the platform, else the default) and Pallas TPU's
(``MOSAIC``: the first branch that is the default or names ``mosaic``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from minipallas.ir.errors import PassError
from minipallas.ir.opdef import Attrs, Regions, Types, declare, require
from minipallas.ir.syntax import Parsed, Pieces
from minipallas.ir.types import ArrayType

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer

Platforms = tuple[tuple[str, ...] | None, ...]


def xla_branch(platforms: Platforms, platform: str) -> int | None:
    """XLA's choice (jax's ``platform_index`` lowering): the branch naming ``platform``, else
    the default branch; ``None`` when there is neither."""
    named = [i for i, ps in enumerate(platforms) if ps is not None and platform in ps]
    default = [i for i, ps in enumerate(platforms) if ps is None]
    return (named or default or [None])[0]


def cpu_branch(op: Op) -> int:
    """XLA's choice for ``cpu`` (the interpreter and the StableHLO module stand for the CPU);
    a ``PassError`` naming the op when there is none."""
    branch = xla_branch(op.attrs["platforms"], "cpu")
    if branch is None:
        raise PassError(
            f"no branch for the CPU among {op.attrs['platforms']}",
            op=op.name,
            loc=op.loc,
            fix="give lax.platform_dependent a cpu= or default= branch",
        )
    return branch


def mosaic_branch(platforms: Platforms) -> int | None:
    """Upstream Pallas TPU's choice: the first branch that is the default or names
    ``mosaic``; ``None`` when there is none."""
    return next((i for i, ps in enumerate(platforms) if ps is None or "mosaic" in ps), None)


class Branches:
    """``("mosaic"), default``: each branch's platform names, ``default`` for ``None``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        entries = [
            "default" if ps is None else f"({', '.join(json.dumps(n) for n in ps)})"
            for ps in op.attrs.get("platforms", ())
        ]
        return [" " + ", ".join(entries)]

    def parse(self, r: Parser) -> Parsed:
        platforms: list[tuple[str, ...] | None] = []
        while not platforms or r.accept(","):
            platforms.append(None if r.accept("default") else r.string_tuple("a branch"))
        return Parsed([], {"platforms": tuple(platforms)})


def _well_formed(platforms: object) -> bool:
    def entry(ps: object) -> bool:
        return ps is None or (isinstance(ps, tuple) and all(isinstance(n, str) for n in ps))

    return isinstance(platforms, tuple) and bool(platforms) and all(map(entry, platforms))


@declare("platform_index", operands=(), syntax=Branches())
def platform_index(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """The branch for the platform lowered to:
    ``%i = platform_index ("mosaic"), default : i32[]``."""
    require(not types, "takes no operands")
    platforms: Sequence = attrs.get("platforms", ())
    require(
        _well_formed(platforms),
        f"'platforms' must be a non-empty tuple of name tuples or None, got {platforms!r}",
    )
    return (ArrayType((), "int32"),)
