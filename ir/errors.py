"""One exception hierarchy for every rejection minipallas makes.

Each error carries the op name and the source location so the message can point at the user's
code (``file:line``) or at the text IR (``line:col``), and optionally a fix.
"""

from __future__ import annotations


class MiniPallasError(Exception):
    """Base class of every error minipallas raises on bad input.

    A subclass that sets ``verbatim = True`` renders as its message alone, with no location or
    fix: for errors that must read word for word like upstream's (they carry the rest in a note).
    An error on a program also notes the IR around its op (``minipallas.ir.excerpt``).
    """

    verbatim = False
    failing_op: object = None  # the Op it is about, once a walk over the IR met it (ir.excerpt)
    excerpt: str | None = None  # the IR around that op, shown as a note (ir.excerpt.show_ir)

    def __init__(
        self, message: str, *, op: str | None = None, loc: object = None, fix: str | None = None
    ) -> None:
        self.message = message
        self.op = op
        self.loc = loc
        self.fix = fix
        super().__init__(self._render())

    def _render(self) -> str:
        if self.verbatim:
            return self.message
        where = f"{self.loc}: " if self.loc else ""
        what = f"'{self.op}': " if self.op else ""
        text = f"{where}{what}{self.message}"
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class VerificationError(MiniPallasError):
    """The IR breaks a structural or typing rule."""


class ParseError(MiniPallasError):
    """The text IR could not be parsed."""


class TraceError(MiniPallasError):
    """A mistake in user code found while tracing it."""


class InterpretError(MiniPallasError):
    """The reference interpreter found an error at run time (bad access, uninitialized read)."""


class PassError(MiniPallasError):
    """A pass was asked for something it cannot do."""


class RaceError(InterpretError):
    """Two programs that run together touch the same shared element unordered, one writing.

    ``first`` and ``second`` are ``(op name, location, program)`` of the two accesses; the
    error is located at the second."""

    def __init__(self, message: str, *, first: tuple, second: tuple, **kw: object) -> None:
        self.first = first
        self.second = second
        super().__init__(message, **kw)  # type: ignore[arg-type]


class DeadlockError(InterpretError):
    """Programs that run together cannot all go on: a barrier some of its group never reach,
    or a collective ``run_scoped`` some of its group skip.

    ``consequence``: the ``RaceError`` the skip caused first, when one did (a program that
    skips a barrier runs on into accesses the barrier was there to order)."""

    def __init__(self, message: str, *, consequence: RaceError | None = None, **kw: object):
        self.consequence = consequence
        super().__init__(message, **kw)  # type: ignore[arg-type]


class ScheduleDependentError(InterpretError):
    """Programs run together give different results under two schedules, with no race or
    deadlock named (``interpret(..., schedule=[...])``, ``ir/interpret/schedules.py``).

    ``schedules`` are the two schedules, ``where`` what differs (a result or a ref argument, and
    the element)."""

    def __init__(self, message: str, *, schedules: tuple, where: str, **kw: object) -> None:
        self.schedules = schedules
        self.where = where
        super().__init__(message, **kw)  # type: ignore[arg-type]
