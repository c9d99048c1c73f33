"""The collective-axes pass: the one place that decides what a ``run_scoped`` with
``collective_axes`` may do.

``run_scoped(..., collective_axes=("x",))`` asks for one allocation shared by every program
that differs only along grid axis ``x``. No path of minipallas implements that yet, so each path
rejects it here, with upstream JAX's exception class and exact message for that path:

- ``"discharge"`` (state discharge, the reference path), and ``"triton"`` (the GPU path, which
  discharges scratch): upstream ``_run_scoped_discharge_rule``'s ``NotImplementedError``;
- ``"lowering"`` (StableHLO outside any kernel): upstream ``_run_scoped_lowering_rule``'s
  ``ValueError``;
- ``"mosaic"`` (a TPU kernel): the Mosaic lowering rule's ``NotImplementedError``.

The message (``str(error)``) is upstream's line word for word; a PEP 678 note names the op, its
source location, the axes and the ways out. A future implementation of collective scratch goes
here too: a path that learns to support it stops rejecting it in this file and nowhere else.

Algorithm:
1. Walk the function's ops in program order, entering every region and, at each ``call``, the
   callee (each function once).
2. At the first ``run_scoped`` whose ``collective_axes`` is non-empty, raise the context's error.
"""

from __future__ import annotations

from collections.abc import Iterator

from minipallas.errors import MiniPallasError, PassError
from minipallas.ir.core import Block, Function, Op


class CollectiveAxesError(MiniPallasError):
    """A ``run_scoped`` with collective axes on a path that cannot take them.

    ``str(error)`` is upstream's message alone; ``axes``, ``context`` (the path) and ``function``
    (where the op lives) say the rest, and so does the note.
    """

    verbatim = True

    def __init__(
        self, message: str, *, loc: object, axes: tuple[str, ...], context: str, function: str
    ) -> None:
        super().__init__(message, op="run_scoped", loc=loc)
        self.axes = axes
        self.context = context
        self.function = function


class CollectiveAxesUnsupported(CollectiveAxesError, NotImplementedError):
    """Collective axes on a path that does not implement them yet (upstream's class)."""


class CollectiveAxesLoweringError(CollectiveAxesError, ValueError):
    """Collective axes lowered outside any kernel (upstream's class)."""


DISCHARGE_MESSAGE = "run_scoped discharge does not support collective_axes yet."
LOWERING_MESSAGE = "run_scoped lowering outside of Pallas does not support collective_axes."
MOSAIC_MESSAGE = "run_scoped lowering does not support collective axes"

# context -> (error class, upstream's message, what the path is, in words)
CONTEXTS: dict[str, tuple[type[CollectiveAxesError], str, str]] = {
    "discharge": (CollectiveAxesUnsupported, DISCHARGE_MESSAGE, "state discharge"),
    "lowering": (
        CollectiveAxesLoweringError,
        LOWERING_MESSAGE,
        "StableHLO lowering outside a kernel",
    ),
    "mosaic": (CollectiveAxesUnsupported, MOSAIC_MESSAGE, "Mosaic TPU kernel lowering"),
    "triton": (
        CollectiveAxesUnsupported,
        DISCHARGE_MESSAGE,
        "Triton GPU lowering, which discharges scratch",
    ),
}

WAYS_OUT = (
    "drop collective_axes if each program may have its own scratch;",
    "keep the collective outside the run_scoped body and pass its result in as an operand;",
    "run the body inside a kernel whose backend supports collective allocations (upstream "
    "Pallas: Mosaic GPU, for thread-collective scratch); no minipallas path does yet.",
)


def check_collective_axes(fn: Function, context: str) -> None:
    """Raises the ``context`` path's error at the first ``run_scoped`` with collective axes."""
    if context not in CONTEXTS:
        raise PassError(
            f"unknown collective-axes context '{context}'", fix=f"use one of: {', '.join(CONTEXTS)}"
        )
    error, message, path = CONTEXTS[context]
    for op, where in _run_scopeds(fn):
        axes = op.attrs.get("collective_axes", ())
        if axes:
            exc = error(message, loc=op.loc, axes=tuple(axes), context=context, function=where)
            exc.add_note(_note(op, tuple(axes), where, path))
            raise exc


def collectives(fn: Function, *, context: str = "discharge") -> Function:
    """The check as a pass: returns ``fn`` unchanged when no ``run_scoped`` has collective axes."""
    check_collective_axes(fn, context)
    return fn


def _note(op: Op, axes: tuple[str, ...], where: str, path: str) -> str:
    ways = "\n".join(f"  - {way}" for way in WAYS_OUT)
    return (
        f"'run_scoped' at {op.loc} in {where} has collective_axes {axes}, which {path} "
        f"does not support. Ways out:\n{ways}"
    )


def _run_scopeds(fn: Function) -> Iterator[tuple[Op, str]]:
    """Every ``run_scoped`` reachable from ``fn`` in program order, with where it lives."""
    seen = {id(fn)}

    def visit(block: Block, where: str) -> Iterator[tuple[Op, str]]:
        for op in block.ops:
            if not op.regions and op.name != "call":  # most ops: nothing to look into
                continue
            if op.name == "run_scoped":
                yield op, where
            for region in op.regions:
                yield from visit(region, where)
            callee = op.attrs.get("callee") if op.name == "call" else None
            if isinstance(callee, Function) and id(callee) not in seen:
                seen.add(id(callee))
                yield from visit(callee.body, f"@{callee.name} (called from {where})")

    yield from visit(fn.body, f"@{fn.name}")
