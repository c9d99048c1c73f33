"""The hypothesis strategy: the sampler driven by hypothesis draws, so failures shrink.

Every decision the sampler makes is one ``st.integers`` draw, and menus list the simplest
choice first, so hypothesis's shrinker (which lowers draws and deletes runs of them) turns a
failing program into a short one built from the simplest statements that still fail.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from minipallas.ir.core import Function
from minipallas.tools.generate.choices import Choices
from minipallas.tools.generate.program import Program
from minipallas.tools.generate.sampler import Config, Sampler
from minipallas.tools.generate.to_ir import build

_integers = functools.lru_cache(maxsize=4096)(st.integers)  # a strategy is validated once


class DrawChoices(Choices):
    """Decisions drawn from a hypothesis ``draw`` function."""

    def __init__(self, draw: Any) -> None:  # noqa: ANN401 - hypothesis's DrawFn
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return lo if lo == hi else self.draw(_integers(lo, hi))


def abstract_programs(config: Config | None = None, **overrides: Any) -> st.SearchStrategy[Program]:  # noqa: ANN401
    """Strategy of abstract ``Program`` s (for back ends other than minipallas IR)."""
    cfg = replace(config or Config(), **overrides)

    @st.composite
    def draw_program(draw: Any) -> Program:  # noqa: ANN401
        return Sampler(DrawChoices(draw), cfg).program()

    return draw_program()


def programs(config: Config | None = None, **overrides: Any) -> st.SearchStrategy[Function]:  # noqa: ANN401
    """Strategy of small random stateful programs as minipallas ``Function`` s.

    ``overrides`` set ``Config`` fields, e.g. ``programs(max_stmts=4, calls=False)``.
    """
    return abstract_programs(config, **overrides).map(build)
