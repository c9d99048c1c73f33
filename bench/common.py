"""Shared bench helpers: command-line sizes, timing, op counting and table printing."""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Callable, Sequence

from minipallas.ir.core import Function
from minipallas.tools.generate import Program, build
from minipallas.tools.generate.choices import RandomChoices
from minipallas.tools.generate.sampler import Sampler

DEFAULT_SIZES = (1_000, 10_000, 100_000)


def parse_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=list(DEFAULT_SIZES),
        help="comma-separated op counts of the generated programs (default 1000,10000,100000)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated programs")
    parser.add_argument(
        "--no-freeze", action="store_true", help="let the collector scan the input while timing"
    )
    args = parser.parse_args(argv)
    global FREEZE
    FREEZE = not args.no_freeze
    return args


def sampled(n_ops: int, seed: int) -> Program:
    """The abstract benchmark program of about ``n_ops`` ops (same size and seed, same program)."""
    rng = random.Random(seed * 1_000_003 + n_ops)
    return Sampler(RandomChoices(rng)).program(n_ops=n_ops)


def generated(n_ops: int, seed: int) -> Function:
    """``sampled(n_ops, seed)`` built as IR; equals ``random_program`` with the same rng."""
    return build(sampled(n_ops, seed))


def op_count(fn: Function) -> int:
    """Ops in ``fn`` and every function it calls, regions included."""
    return sum(1 for f in (fn, *fn.callees()) for _ in f.walk())


FREEZE = True  # see ``timed``; ``--no-freeze`` turns it off


def timed(thunk: Callable[[], object], repeat: int = 1) -> tuple[float, object]:
    """Best wall time of ``repeat`` runs (seconds) and the last run's result.

    Each run starts after a full collection with every object alive so far (the stage's
    input) frozen out of the garbage collector (``gc.freeze``): CPython rescans all live
    objects on each full collection, which would charge a 100k-op input's size to every
    stage that allocates, a cost of the heap rather than of the stage (2-4x at 100k ops).
    """
    best, result = float("inf"), None
    for _ in range(repeat):
        result = None
        gc.collect()
        if FREEZE:
            gc.freeze()
        start = time.perf_counter()
        result = thunk()
        best = min(best, time.perf_counter() - start)
        gc.unfreeze()
    return best, result


def repeats(n_ops: int) -> int:
    """Small programs are timed a few times (best of), large ones twice."""
    return 5 if n_ops <= 2_000 else 3 if n_ops <= 20_000 else 2


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table, columns right-aligned."""
    cells = [list(map(str, header))] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(cell: object) -> str:
    if isinstance(cell, float):
        return f"{cell:.2f}"
    return str(cell)


def per_op_us(seconds: float, ops: int) -> float:
    return seconds / max(ops, 1) * 1e6
