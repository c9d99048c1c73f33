"""A researcher's passes on the tools' command lines: ``--load FILE.py`` and ``--pass-pipeline``.

``minipallas-difftest`` and every fuzzer take the two flags ``minipallas-opt`` has: ``--load``
runs a file of passes (``passes.registry.load``; it may be given several times) and
``--pass-pipeline`` names the pipeline the tool runs, at the point its docstring states
(the table is in docs/guides/extending.md, "Testing and timing your pass").

``add_arguments(parser)`` adds both flags; ``loaded(args)`` loads the files for the length of a
command and checks the pipeline before anything runs (an unknown pass or option is a
``PassError`` naming it), then unregisters what the files registered (passes and ``@pattern``
rewrites), so one process (a test, a worker) may run several commands with the same file.

A finding after the pipeline names the pass it comes from (``first_bad_pass``):

1. ``split_pipeline(pipeline)``: each pass written as a pipeline of its own, options included;
2. for k = 1, 2, ...: run the pipeline's first k passes (``text``: the IR after them; a raise
   is the k-th pass's) and compute the outputs the tool compares (``outputs``: the reference
   interpreter on the program, a kernel's programs compiled, ...; a raise is a failure of
   the k-th pass's result);
3. the first k whose outputs differ from those before the pipeline (``differs``) is the pass.

The ``Blame`` holds that pass's IR before and after it; a ``Kernel``'s is its text (``str``: its
grid, each block spec with its index map, and its body).
"""

from __future__ import annotations

import argparse
import contextlib
import dis
import functools
import inspect
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from minipallas.cli import add_load_argument
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.rules import declared_ops
from minipallas.passes.cleanup_patterns import PATTERNS
from minipallas.passes.pipeline import parse_pipeline, split_pipeline
from minipallas.passes.pipeline import run as run_pipeline
from minipallas.passes.registry import PASSES, load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--load FILE.py`` (repeatable) and ``--pass-pipeline PIPE``, as ``minipallas-opt``'s."""
    add_load_argument(parser)
    parser.add_argument(
        "--pass-pipeline",
        metavar="PIPE",
        default="",
        help="passes to run where this tool runs a pipeline (see its description), e.g. "
        "my-pass{opt=1},cleanup; a finding names the pass it comes from",
    )


def argv_of(args: argparse.Namespace) -> list[str]:
    """The two flags as ``args`` holds them, for a worker process's command line."""
    flags = [arg for path in args.load for arg in ("--load", path)]
    return flags + (["--pass-pipeline", args.pass_pipeline] if args.pass_pipeline else [])


@contextlib.contextmanager
def loaded(args: argparse.Namespace) -> Iterator[str]:
    """Registers the passes of ``args.load`` and yields ``args.pass_pipeline``, checked; the
    ``@pattern`` rewrites the files registered count their rewrites (``PassCoverage``). What
    the files registered, passes and patterns, is removed on the way out."""
    before = set(PASSES)
    patterns = {name: list(fns) for name, fns in PATTERNS.items()}
    try:
        for path in args.load:
            load(path)
        for name, fns in PATTERNS.items():  # the files' patterns, counted (``PassCoverage``)
            fns[:] = [_counted(f) if _loaded(f, patterns.get(name, ())) else f for f in fns]
        if args.pass_pipeline:
            parse_pipeline(args.pass_pipeline)
        yield args.pass_pipeline
    finally:
        for name in set(PASSES) - before:
            del PASSES[name]
        for name, fns in list(PATTERNS.items()):  # and the @pattern rewrites they registered
            _COUNTED.difference_update(fns)
            fns[:] = [f for f in fns if not _loaded(f, patterns.get(name, ()))]
            if not fns:
                del PATTERNS[name]


def _loaded(pattern: Callable, before: Sequence[Callable]) -> bool:
    """Whether a ``--load`` file of this command registered ``pattern``."""
    return pattern not in before and getattr(pattern, "__module__", None) == LOADED


def main_with_passes(prog: str, args: argparse.Namespace, body: Callable[[str], int]) -> int:
    """``body(pipeline)`` with ``args``' passes loaded (``loaded``); a pass file or pipeline
    that fails is printed as ``PROG: error`` and exits 2, as a bad argument does."""
    with contextlib.ExitStack() as stack:
        try:
            pipeline = stack.enter_context(loaded(args))
        except MiniPallasError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 2
        return body(pipeline)


@dataclass(frozen=True)
class Blame:
    """The pass of ``pipeline`` a finding comes from: ``step`` as written, its position
    (``number``, from 1), what went wrong, and the IR before and after it (None when it
    raised)."""

    pipeline: str
    step: str
    number: int
    why: str
    before: str
    after: str | None

    @property
    def name(self) -> str:
        return self.step.partition("{")[0].strip()

    def __str__(self) -> str:
        return f"pass '{self.step}' (pass {self.number} of '{self.pipeline}'): {self.why}"

    def text(self) -> str:
        """The pass, then its IR before and after."""
        after = self.after if self.after is not None else "(the pass raised: no IR after it)"
        return "\n".join(
            [f"the pass: {self}", f"--- IR before pass '{self.step}' ---", self.before]
            + [f"--- IR after pass '{self.step}' ---", after]
        )


Outputs = Sequence[Any]  # what a tool compares: arrays, or anything its ``differs`` reads


def first_bad_pass(
    pipeline: str,
    outputs: Callable[[str], Outputs],
    text: Callable[[str], str],
    differs: Callable[[Outputs, Outputs], str | None],
    want: Outputs | None = None,
) -> Blame | None:
    """The pass of ``pipeline`` after which ``outputs`` first differ from ``want`` (by
    default ``outputs("")``, before any pass), or that raises (module doc); None when none
    does, or when the outputs before the pipeline cannot be computed."""
    passes = split_pipeline(pipeline)
    if want is None:
        try:
            want = outputs("")
        except Exception:  # the program fails without the pipeline: no pass to blame
            return None
    before = text("")
    for k, step in enumerate(passes):
        prefix = ",".join(passes[: k + 1])
        try:
            after = text(prefix)
        except Exception as e:  # the pass raised, whatever its class
            return Blame(pipeline, step, k + 1, f"it raised {_error(e)}", before, None)
        try:
            got = outputs(prefix)
        except Exception as e:  # its result does not run
            return Blame(pipeline, step, k + 1, f"its result fails: {_error(e)}", before, after)
        message = differs(want, got)
        if message is not None:
            return Blame(pipeline, step, k + 1, f"the outputs change: {message}", before, after)
        before = after
    return None


def _error(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


class PassCoverage:
    """How many programs (or kernels) each pass of ``pipeline`` changed: a pass changed one
    when the IR after it is not the IR before it, printed. A fuzzer that checks a pipeline
    ``record`` s each program's IR texts and prints ``lines()`` at the end, so a pass that never
    fired reads as such instead of as "no failures". The ``@pattern`` rewrites of the
    ``--load`` files count too, as ``pattern NAME``: on the programs whose checks they
    rewrote an op in (they are tried by every ``cleanup``, before the pipeline too)."""

    def __init__(self, pipeline: str, unit: str = "programs") -> None:
        self.steps = split_pipeline(pipeline)
        self.unit = unit
        self.seen = 0
        patterns = [
            f"pattern {f.__name__}" for fns in PATTERNS.values() for f in fns if f in _COUNTED
        ]
        self.changed = dict.fromkeys([*self.steps, *patterns], 0)  # a step written twice: once
        self._rewrites = dict(REWRITES)

    def record(self, texts: Sequence[str]) -> int:
        """One program: ``texts`` is its IR before the pipeline, then after each pass as far
        as the pipeline ran; returns how many of the passes (and patterns) changed it."""
        return self.count(self.fired(texts))

    def count(self, fired: Sequence[str]) -> int:
        """One program on which the passes ``fired`` (steps as written, and ``pattern NAME``
        s) changed the IR."""
        self.seen += 1
        for step in set(fired):
            self.changed[step] += 1
        return len(set(fired))

    def fired(self, texts: Sequence[str]) -> list[str]:
        """The passes that changed the IR, from ``record``'s ``texts``, and the patterns that
        rewrote an op since the last call, without counting."""
        steps = [step for step, a, b in zip(self.steps, texts, texts[1:], strict=False) if a != b]
        now, before = dict(REWRITES), self._rewrites
        self._rewrites = now
        hit = [f"pattern {name}" for name, n in now.items() if n != before.get(name, 0)]
        return steps + [name for name in hit if name in self.changed]

    def lines(self) -> list[str]:
        """One line a pass: ``pass P changed N of M programs``, and that it was never
        exercised when N is 0 (or that no program reached the pipeline: each failed before);
        one a loaded pattern: ``pattern P rewrote N of M programs``."""
        never = ": none reached the pipeline" if self.seen == 0 else ": it was never exercised"
        lines = []
        for step, n in self.changed.items():
            did = "rewrote" if step.startswith("pattern ") else "changed"
            name = step if did == "rewrote" else f"pass {step}"
            lines.append(f"{name} {did} {n} of {self.seen} {self.unit}" + (never if n == 0 else ""))
        return lines


REWRITES: Counter[str] = Counter()  # a loaded pattern's name -> the ops it rewrote (``loaded``)
_COUNTED: set[Callable] = set()  # the loaded patterns, wrapped to count into REWRITES


def _counted(pattern: Callable) -> Callable:
    """``pattern``, counting into ``REWRITES`` each op it rewrites."""

    @functools.wraps(pattern)
    def counted(op: Any, defs: Any) -> Any:  # noqa: ANN401 - a Pattern's
        out = pattern(op, defs)
        if out is not None:
            REWRITES[pattern.__name__] += 1
        return out

    _COUNTED.add(counted)
    return counted


def pipeline_texts(subject: Any, pipeline: str) -> list[str]:  # noqa: ANN401 - Function or Kernel
    """The text of ``subject`` (a ``Function`` or a ``Kernel``) before ``pipeline`` and after
    each of its passes, up to the first that raises: what ``PassCoverage.record`` takes, for a
    tool whose pipeline runs out of sight (in the harness, in ``pallas_call``)."""
    texts = [str(subject)]
    for step in split_pipeline(pipeline):
        try:
            subject = run_pipeline(subject, step)
        except Exception:  # the tool's own run reports it; coverage stops here
            break
        texts.append(str(subject))
    return texts


# numbers a pass's code names that say nothing about the programs it wants (indices, counts)
_PLAIN_NUMBERS = (0, 1, -1)
LOADED = "__minipallas_load__"  # the module a ``--load`` file runs as (``registry.load``)


@dataclass
class _Read:
    """What the code of some functions names (``_read``)."""

    functions: list[Callable]  # those functions and the functions of their files they call
    named: set[str] = field(default_factory=set)  # every op name the code holds
    compared: set[str] = field(default_factory=set)  # those it compares with: the ops it matches
    numbers: set[float] = field(default_factory=set)
    patterns: dict[str, list[Callable]] = field(default_factory=dict)  # of tables it names


def pass_targets(step: str) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """What pass-directed generation favours for the pass ``step`` names: the op names its
    code compares with (``op.name == "mul"``, ``op.name in ("add", "sub")``; every op name it
    holds if it compares with none) and the numbers it names (``== 2``), read from the pass
    function and the functions of its file it calls. A pass that applies ``@pattern``
    rewrites a ``--load`` file registered (``cleanup``, or a pass of the file applying a table
    of its own) is about them: the ops they are registered for and the numbers their code
    names. A pass whose code names no op gets ``((), ())``: generation is not biased."""
    code = _read([PASSES[step.partition("{")[0].strip()].run])
    if code.patterns:
        patterns = _read([inspect.unwrap(f) for fns in code.patterns.values() for f in fns])
        return tuple(sorted(code.patterns)), tuple(sorted(patterns.numbers))
    reached = {name for name, fns in PATTERNS.items() for f in fns if f in code.functions}
    return tuple(sorted((code.compared or code.named) | reached)), tuple(sorted(code.numbers))


def directs(step: str) -> bool:
    """Whether fuzzing directs generation at the pass ``step`` names by default: it is the
    user's (a ``--load`` file or a script registered it, not minipallas), or it applies
    ``@pattern`` rewrites a ``--load`` file registered."""
    module = getattr(PASSES[step.partition("{")[0].strip()].run, "__module__", None) or ""
    return module.partition(".")[0] != "minipallas" or applies_patterns(step)


def applies_patterns(step: str) -> bool:
    """Whether the pass ``step`` names applies ``@pattern`` rewrites a ``--load`` file
    registered (as ``cleanup`` does): they, not the pass, are what a fuzzer directs at."""
    return bool(_read([PASSES[step.partition("{")[0].strip()].run]).patterns)


def _read(functions: list[Callable]) -> _Read:
    """The op names, comparisons, numbers and ``--load`` files' patterns the code of
    ``functions`` names (theirs, their nested functions' and the functions of their files
    they call)."""
    read = _Read([f for f in functions if hasattr(f, "__code__")])
    codes = [(f.__code__, f.__globals__) for f in read.functions]
    declared = set(declared_ops())
    while codes:
        code, home = codes.pop()
        for name in code.co_names:
            f = home.get(name)
            # a class of the file: its methods (cleanup's ``_Simplify``)
            for g in vars(f).values() if isinstance(f, type) else [f]:
                if getattr(g, "__globals__", None) is home and g not in read.functions:
                    read.functions.append(g)
                    codes.append((g.__code__, home))
            if _is_table(f):
                for op, fns in f.items():  # the user's: cleanup's own are not under test
                    mine = [g for g in fns if getattr(g, "__module__", None) == LOADED]
                    if mine:
                        read.patterns.setdefault(op, []).extend(mine)
        for const in code.co_consts:
            if isinstance(const, int | float) and not isinstance(const, bool):
                if const not in _PLAIN_NUMBERS:
                    read.numbers.add(const)
            elif hasattr(const, "co_consts"):
                codes.append((const, home))
        steps = list(dis.get_instructions(code))
        for here, after in zip(steps, steps[1:], strict=False):
            if here.opname != "LOAD_CONST":
                continue
            value = here.argval
            names = {value} if isinstance(value, str) else set(value) if _strings(value) else set()
            read.named |= names & declared
            if after.opname in ("COMPARE_OP", "CONTAINS_OP"):
                read.compared |= names & declared
    return read


def _is_table(value: object) -> bool:
    """A table of rewrite patterns: op name -> pattern functions (``cleanup_patterns``)."""
    return (
        isinstance(value, dict)
        and bool(value)
        and all(isinstance(k, str) and isinstance(v, list) for k, v in value.items())
        and all(callable(f) for fns in value.values() for f in fns)
    )


def _strings(value: object) -> bool:
    return isinstance(value, tuple | frozenset) and all(isinstance(v, str) for v in value)
