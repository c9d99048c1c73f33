"""The collective-axes check (``minipallas.ir.collectives``) as a pipeline pass:
``collectives{context=triton}`` raises upstream's error for that path, or returns the function
unchanged."""

from __future__ import annotations

from minipallas.ir.collectives import COLLECTIVE_MODES, CONTEXTS, check_collective_axes
from minipallas.ir.core import Function
from minipallas.passes.registry import Option, choice, register


@register(
    "collectives",
    Option("context", choice(*CONTEXTS), "the path whose upstream error to raise"),
    Option("mode", choice(*COLLECTIVE_MODES), "simulate lets collective run_scopeds through"),
    doc="reject run_scoped with collective_axes with upstream's error for the path",
)
def collectives(fn: Function, *, context: str = "discharge", mode: str = "reject") -> Function:
    """The check as a pass: returns ``fn`` unchanged when no ``run_scoped`` has collective
    axes, or with ``mode=simulate`` (the multi-program interpreter and the collective kernel
    program run them; ``discharge{collectives=simulate}`` takes them as one program's own)."""
    if mode == "reject":
        check_collective_axes(fn, context)
    return fn
