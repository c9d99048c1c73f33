"""Where an error happened, shown in the program: a few lines around the failing op, the op's
name underlined with carets, as JAX and xDSL show a failing equation or op.

::

    in @kernel:
        %2 = get %0[:] : f32[8]
        %3 = exp %2 : f32[8]
             ^^^
        swap %1[:], %3
        return

Two renderings share one layout (``_marked``):

- ``excerpt(fn, op)``: the printed IR of the function (``fn`` or one of its callees) that holds
  ``op``, since a traced program has no text of its own;
- ``source_excerpt(text, loc)``: the line of text IR a ``line:col`` location points into.

An error learns its op in two steps, because the walk that meets the op does not know the
function and the entry point that knows the function does not know the op: the walk (verifier,
discharge, an emitter's ``run_block``) calls ``at_op(error, op)`` as the error passes it (the
innermost walk is first, so it wins), and the entry point (``verify``, a pass in the pipeline,
a lowering) calls ``show_ir(error, fn)``, which adds the excerpt as a note, once. A note keeps
the message (often upstream's exact words) as it is; tracebacks and ``minipallas-opt`` print
notes after it.
"""

from __future__ import annotations

import re

from minipallas.ir.core import Function, Op
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.location import Location
from minipallas.ir.printer import INDENT, Printer

CONTEXT = 2  # lines shown before and after the failing op's line


def excerpt(fn: Function, op: Op, *, context: int = CONTEXT) -> str | None:
    """The lines of printed IR around ``op``, its name underlined; ``None`` when neither ``fn``
    nor a function it calls holds ``op``, or the IR is too broken to print (the verifier reports
    IR the printer cannot read: a malformed indexer, a literal of the wrong size, ...)."""
    for f in (fn, *fn.callees()):
        printer = _Finder(op)
        try:
            printer.function(f)
        except Exception:  # noqa: BLE001  IR too broken to print: the error stands without it
            return None
        if printer.at is not None:
            line = printer.lines[printer.at]
            col = line.index(op.name, printer.indent)
            lines = _marked(printer.lines, printer.at, col, len(op.name), context)
            return "\n".join([f"in @{f.name}:", *lines])
    return None


def source_excerpt(
    text: str, loc: Location, name: str | None = None, *, context: int = CONTEXT
) -> str | None:
    """The lines of ``text`` around the one ``loc`` (``line:col``) points into, a caret under
    column ``col`` of it, or carets under op ``name`` when it follows on that line; ``None`` for
    a location outside ``text``."""
    lines = text.splitlines()
    if loc.file or not 0 < loc.line <= len(lines):
        return None
    line, col, width = lines[loc.line - 1], max(loc.col - 1, 0), 1
    found = name and re.compile(rf"(?<![%\w.]){re.escape(name)}(?![\w.])").search(line, col)
    if found:
        col, width = found.start(), len(name)
    return "\n".join(_marked(lines, loc.line - 1, col, width, context))


def at_op(error: MiniPallasError, op: Op) -> None:
    """Records ``op`` as where ``error`` happened, unless a walk nested deeper already did."""
    if error.failing_op is None:
        error.failing_op = op


def show_ir(error: MiniPallasError, fn: Function) -> None:
    """Adds the excerpt of ``error``'s op in ``fn`` as a note, unless it has one already or
    ``fn`` does not hold the op (an entry point further out may)."""
    if error.excerpt is None and error.failing_op is not None:
        error.excerpt = excerpt(fn, error.failing_op)
        if error.excerpt is not None:
            error.add_note(error.excerpt)


def _marked(lines: list[str], at: int, col: int, width: int, context: int) -> list[str]:
    """``lines[at]`` with ``context`` lines either side, indented, and a line of ``width``
    carets under column ``col`` of ``lines[at]``."""
    shown = lines[max(at - context, 0) : at + 1]
    shown.append(" " * col + "^" * width)
    shown += lines[at + 1 : at + 1 + context]
    return [(INDENT + line).rstrip() for line in shown]


class _Finder(Printer):
    """A printer that notes the line where it prints one op (``at``) and that line's indent."""

    def __init__(self, target: Op) -> None:
        super().__init__()
        self.target = target
        self.at: int | None = None
        self.indent = 0

    def op(self, op: Op, indent: str) -> None:
        if op is self.target:
            self.at, self.indent = len(self.lines), len(indent)
        super().op(op, indent)
