"""Progress bars and closing tables for the long commands (``make fuzz``, ``fuzz-upstream``,
``fuzz-kernels``, ``mutate``, ``minipallas-difftest``).

Both go to stderr, so stdout, which tests and scripts parse, reads as it did. The bar is tqdm's
(chosen over rich because it has no dependencies of its own: one line in setup.cfg and one in
the lock); it is drawn only when stderr is a terminal, so logs and captured runs stay clean.
A campaign bounded by both a count and a time shows whichever will end it first.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from typing import Any


class Progress:
    """A bar over ``total`` items or ``seconds`` of work, whichever ends first."""

    def __init__(self, what: str, total: int, seconds: float | None = None, unit: str = "it"):
        from tqdm import tqdm  # imported on first use: only the long commands need it

        self.total, self.seconds, self.start = total, seconds, time.monotonic()
        self.done = 0
        off = not on_a_terminal(sys.stderr)  # tqdm's disable=None draws on a stream it cannot ask
        self.bar = tqdm(total=total, desc=what, unit=unit, file=sys.stderr, disable=off)

    def update(self, n: int = 1, **status: Any) -> None:
        """``n`` more items done; ``status`` (``failures=2``) is shown after the bar."""
        self.done += n
        if self.seconds is not None and self.done:
            elapsed = time.monotonic() - self.start
            expected = min(self.total, max(self.done, int(self.done * self.seconds / elapsed)))
            if expected != self.bar.total:
                self.bar.total = expected  # time runs out before the count does
        self.bar.update(n)
        if status:
            self.bar.set_postfix(status, refresh=False)

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def on_a_terminal(stream: object) -> bool:
    """Whether ``stream`` says it is a terminal; a stream that cannot say (no ``isatty``, or
    closed) is not one."""
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False


def summary_table(title: str, rows: Mapping[str, Any]) -> str:
    """A two-column table (name, value), as the commands print it to stderr at the end."""
    width = max((len(k) for k in rows), default=0)
    values = [str(v) for v in rows.values()]
    rule = "-" * (width + 2 + max((len(v) for v in values), default=0))
    lines = [title, rule]
    lines += [f"{k:<{width}}  {v}" for k, v in zip(rows, values, strict=True)]
    return "\n".join([*lines, rule])


def print_summary(title: str, rows: Mapping[str, Any]) -> None:
    print(summary_table(title, rows), file=sys.stderr, flush=True)


def campaign_parser(
    module: str, description: str, *, unit: str = "kernels", count: int = 200, seconds: float = 600
) -> argparse.ArgumentParser:
    """The options every fuzzing campaign takes (``python -m module``): how many ``unit``s, for
    how long, from which seed."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--count", type=int, default=count, help=f"stop after N {unit}")
    parser.add_argument("--seconds", type=float, default=seconds, help="stop after S seconds")
    parser.add_argument("--seed", type=int, default=0, help="seed of the whole campaign")
    return parser
