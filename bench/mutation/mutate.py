"""``make mutate``: how many planted bugs the difftest corpus and a short fuzz run catch.

Each mutant of ``mutants.py`` is applied to a fresh copy of the sources (the working tree is
never touched) and checked in a subprocess whose imports resolve to that copy:

1. the copy: ``minipallas/`` with ``ir/``, ``passes/`` and ``lowering/`` placed inside it as
   the installed package lays them out (``site/minipallas/ir`` ...), the corpora included
   (``minipallas.tools.corpora``); ``site`` goes first on ``PYTHONPATH``, ahead of the
   editable install's finder (last on ``sys.meta_path``) and of the checkout (where the
   worker, ``python -m bench.mutation.mutate --worker``, finds ``bench``), and the worker
   checks that every package and the mutated module were imported from the copy before it
   trusts a verdict;
2. the kill check, stopping at the first kill: every case of the difftest corpora
   (``corpora.difftest_cases``, ``corpora.float_corpus`` when it exists) through
   ``minipallas.tools.difftest.run``, a case whose finding is not the one it expects kills;
   then the front-end checks (``corpora.frontend_checks``'s ``CHECKS``: programs and kernels
   built with minipallas's own front end, which reach code no imported jaxpr does:
   integer ``pow``, an out-of-range ``switch`` index, dynamic gather/scatter starts, the
   batched kernel grid), a check that reports a problem kills; then three fuzzers, each given
   the number of programs the unmutated control ran in ``--fuzz-seconds`` (same seeds, so
   the same programs; ``--programs`` fixes the counts instead): the discharge property
   (``minipallas.tools.fuzz.programs``: interpreter before and after discharge and cleanup),
   the upstream fuzzer (``fuzz.upstream``: a ``minipallas-bug`` finding kills) and the kernel
   fuzzer (``fuzz.kernels``: a disagreement kills). A crash while importing or
   setting up kills too, and so does running past the time limit (a hang is noticed);
3. the control (no mutant) runs first and must survive, else the run stops: a false alarm.

The programs do not depend on the machine's speed: by default every run fuzzes the counts of
``DEFAULT_PROGRAMS`` (the same seeds, so the same programs on every machine), and the control
runs all of them, however long that takes on this machine (its only limit is the run's
``--budget``, past which nothing could run anyway). Each mutant's fuzzer then gets three times
what the control's took, plus 30 s, and the mutant as a whole four times the control's time
(at least 300 s): limits measured on the machine that runs them. ``--fuzz-seconds S`` time-boxes
the control instead (S seconds per fuzzer, whatever count that reaches here).

The table (mutant, category, where, verdict, seconds) and the kill rate, overall and per
category, over the mutants not marked ``equivalent``, are printed and, for a run of the whole
catalogue, written to ``mutate_results.md`` beside this file.

Usage: ``python -m bench.mutation.mutate [--only NAME[,NAME]] [--fuzz-seconds S] [--jobs J]
[--budget SECONDS] [--programs discharge=N,upstream=N,kernels=N] [--rev REV]``. With
``--programs`` (or the default counts) the control and every mutant run exactly those counts,
so a campaign on a loaded or slower machine runs the same programs as an earlier one.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench import ROOT
from bench.mutation.mutants import MUTANTS, Mutant
from bench.mutation.mutate_report import report_text, verdict_text
from minipallas.tools.progress import Progress

# Repository folder -> where the installed package has it (setup.cfg's package_dir).
PACKAGES = {
    "minipallas": "minipallas",
    "ir": "minipallas/ir",
    "passes": "minipallas/passes",
    "lowering": "minipallas/lowering",
}
# the corpora the kill check runs: modules of minipallas.tools.corpora, read from the copy
CORPUS_PACKAGE = "minipallas.tools.corpora"
CORPUS_FOLDER = "site/minipallas/tools/corpora"
CORPORA = ("difftest_cases", "float_corpus")
FRONTEND = "frontend_checks"
FUZZERS = ("discharge", "upstream", "kernels")
SEEDS = {"discharge": 1, "upstream": 2, "kernels": 3}
# The last full campaign's counts, and the upstream fuzzer's up to its program 140 (seed 47467:
# a masked load at an out-of-range 0-d index, once a false alarm of a faster machine's control).
DEFAULT_PROGRAMS = {"discharge": 625, "upstream": 140, "kernels": 17}
RESULTS = Path(__file__).resolve().parent / "mutate_results.md"


class CatalogueError(Exception):
    """A mutant's snippet does not occur exactly once in its file."""


# -- copies -------------------------------------------------------------------------------------


def copied_path(file: str) -> str:
    """Where repository file ``file`` lies in a copy (``passes/x.py`` -> ``site/minipallas/
    passes/x.py``; tests keep their path)."""
    top, _, rest = file.partition("/")
    if top in PACKAGES:
        return f"site/{PACKAGES[top]}/{rest}"
    return file


def module_name(file: str) -> str | None:
    """The module a package file is imported as (None for a test file)."""
    if not copied_path(file).startswith("site/"):
        return None
    return copied_path(file)[len("site/") : -len(".py")].replace("/", ".")


def snapshot(dest: Path, rev: str) -> Path:
    """The sources of git revision ``rev`` ("worktree": the files as they are now) under
    ``dest``, in the repository's layout; returns ``dest``. Other helpers edit the working
    tree while a run goes on, so the default is the last commit."""
    folders = [*PACKAGES]
    if rev == "worktree":
        for folder in folders:
            shutil.copytree(ROOT / folder, dest / folder, ignore=_IGNORE)
        return dest
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "--", *folders], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def make_copy(dest: Path, source: Path) -> None:
    """The sources of ``source`` (a snapshot) under ``dest`` as the installed package lays
    them out (the corpora are in the package)."""
    for folder, inside in PACKAGES.items():  # minipallas first: the others go inside it
        shutil.copytree(source / folder, dest / "site" / inside, ignore=_IGNORE)


_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def snippet_line(mutant: Mutant, path: Path | None = None) -> int:
    """The line of ``path`` (default: the mutant's file in this checkout) where the snippet
    starts; CatalogueError unless it occurs there exactly once."""
    path = ROOT / mutant.file if path is None else path
    if not path.is_file():
        raise CatalogueError(f"mutant {mutant.name}: {mutant.file} does not exist")
    text = path.read_text()
    count = text.count(mutant.find)
    if count != 1:
        raise CatalogueError(
            f"mutant {mutant.name}: its snippet occurs {count} times in {mutant.file} "
            f"(expected once); update it in bench/mutation/mutants_*.py to the code as it is now"
        )
    return text[: text.index(mutant.find)].count("\n") + 1


def apply(mutant: Mutant, copy: Path) -> Path:
    """Plants ``mutant`` in the copy at ``copy``; returns the file it changed."""
    path = copy / copied_path(mutant.file)
    snippet_line(mutant, path)
    path.write_text(path.read_text().replace(mutant.find, mutant.replace))
    return path


# -- the worker: runs inside the copy -----------------------------------------------------------


def _check_isolation(copy: Path, mutant: Mutant | None) -> None:
    """Raises unless every package (and the mutated module) comes from the copy."""
    import importlib

    site = (copy / "site").resolve()
    for name in ("minipallas", "minipallas.ir", "minipallas.passes", "minipallas.lowering"):
        where = Path(importlib.import_module(name).__file__).resolve()
        if not where.is_relative_to(site):
            raise RuntimeError(f"not isolated: {name} imported from {where}, not {site}")
    if mutant is not None and module_name(mutant.file) is not None:
        module = importlib.import_module(module_name(mutant.file))
        where = Path(module.__file__).resolve()
        if where != (copy / copied_path(mutant.file)).resolve():
            raise RuntimeError(f"not isolated: the mutated module runs from {where}")
        if mutant.replace not in where.read_text():
            raise RuntimeError(f"the mutant is not in {where}")


def _corpus_kill(copy: Path) -> tuple[str | None, list[str]]:
    """The first corpus case whose finding is not the one it expects, and notes."""
    import importlib

    from minipallas.tools.difftest import run

    notes = []
    for name in CORPORA:
        if not (copy / CORPUS_FOLDER / f"{name}.py").exists():
            notes.append(f"{CORPUS_PACKAGE}.{name} does not exist: skipped")
            continue
        cases = importlib.import_module(f"{CORPUS_PACKAGE}.{name}").CASES
        planted = [c for c in cases if getattr(c, "plant", None) is not None]
        if planted:
            notes.append(
                f"{len(planted)} planted cases of {name}.py skipped "
                "(each carries its own bug for the compile way)"
            )
        for case in cases:
            if getattr(case, "plant", None) is not None:
                continue
            report = run(case)
            if not report.expected:
                want = case.expect or "agree"
                return f"{name}:{case.name} ({report.finding.name}, expected {want})", notes
    return None, notes


def _frontend_kill(copy: Path) -> str | None:
    """The first front-end check that reports a problem (its name and the problem)."""
    import importlib

    if not (copy / CORPUS_FOLDER / f"{FRONTEND}.py").exists():
        return None
    for c in importlib.import_module(f"{CORPUS_PACKAGE}.{FRONTEND}").CHECKS:
        problem = c.run()
        if problem:
            return f"{FRONTEND}:{c.name} ({problem.splitlines()[0]})"[:300]
    return None


def _programs(seed: int, transcendental: bool):  # noqa: ANN202 - a generator of programs
    """Generated programs (the fuzzers' generator, drawn from a seeded ``random.Random``) with
    an input seed each."""
    from minipallas.tools.generate import Config, build
    from minipallas.tools.generate.choices import RandomChoices
    from minipallas.tools.generate.sampler import Sampler

    rng, config = random.Random(seed), Config(transcendental=transcendental)
    while True:
        yield build(Sampler(RandomChoices(rng), config).program()), rng.randrange(2**16), rng


def _fuzz_discharge(count: int, deadline: float) -> tuple[int, str | None]:
    from minipallas.tools.generate import random_inputs
    from minipallas.tools.generate.check import PropertyFailure, check_all_modes

    n = 0
    for fn, seed, rng in _programs(SEEDS["discharge"], True):
        if n >= count or time.monotonic() >= deadline:
            return n, None
        n += 1
        partial = [rng.random() < 0.5 for _ in fn.params]
        try:
            check_all_modes(fn, random_inputs(fn, seed), partial)
        except PropertyFailure as e:
            return n, f"program {n}: {str(e).splitlines()[0]}"
    raise AssertionError("unreachable")


def _fuzz_upstream(count: int, deadline: float) -> tuple[int, str | None]:
    from minipallas.tools.difftest import run
    from minipallas.tools.fuzz.upstream import case_for

    n = 0
    for fn, seed, _ in _programs(SEEDS["upstream"], False):
        if n >= count or time.monotonic() >= deadline:
            return n, None
        n += 1
        finding = run(case_for(fn, seed)).finding
        if finding.kind == "minipallas-bug":
            return n, f"program {n}: {finding}"
    raise AssertionError("unreachable")


def _fuzz_kernels(count: int, deadline: float) -> tuple[int, str | None]:
    from minipallas.tools.fuzz.kernels import check
    from minipallas.tools.generate.choices import RandomChoices
    from minipallas.tools.generate.kernels import random_kernel

    rng, n = random.Random(SEEDS["kernels"]), 0
    while n < count and time.monotonic() < deadline:
        n += 1
        problem = check(random_kernel(RandomChoices(rng)), rng.randrange(2**16)).problem
        if problem:
            return n, f"kernel {n}: {problem.splitlines()[0]}"
    return n, None


_FUZZ = {"discharge": _fuzz_discharge, "upstream": _fuzz_upstream, "kernels": _fuzz_kernels}


def worker(
    copy: Path,
    mutant: Mutant | None,
    counts: dict[str, int],
    seconds: float,
    limits: dict[str, float] | None = None,
) -> dict:
    """The kill check (module doc, step 2) in this process; returns the verdict as a dict:
    ``killed_by`` (None: survived), ``stage``, ``detail``, ``counts`` (programs per fuzzer),
    ``fuzz_seconds`` (time per fuzzer). ``limits``: a mutant's seconds per fuzzer."""
    out: dict = {"killed_by": None, "stage": "", "detail": "", "counts": {}, "notes": []}
    out["fuzz_seconds"] = {}
    stage = "setup"
    try:
        _check_isolation(copy, mutant)
        stage = "corpus"
        killed, out["notes"] = _corpus_kill(copy)
        if killed:
            return {**out, "killed_by": "corpus", "stage": stage, "detail": killed}
        stage = "frontend"
        killed = _frontend_kill(copy)
        if killed:
            return {**out, "killed_by": "frontend", "stage": stage, "detail": killed}
        for name in FUZZERS:
            stage = f"fuzz {name}"
            # The control runs its fixed ``counts`` to the end (or, time-boxed, ``seconds``);
            # a mutant runs the control's count of programs within ``limits`` (3x the
            # control's time: room for a slower mutant; a hang is caught by the parent).
            if mutant is not None:
                limit = (limits or {}).get(name, 3 * seconds + 30)
            else:
                limit = math.inf if name in counts else seconds
            began = time.monotonic()
            n, found = _FUZZ[name](counts.get(name, 10**9), began + limit)
            out["counts"][name] = n
            out["fuzz_seconds"][name] = time.monotonic() - began
            if found:
                return {**out, "killed_by": f"fuzz {name}", "stage": stage, "detail": found}
    except RuntimeError as e:
        if "isolated" in str(e) or "not in" in str(e):
            return {**out, "killed_by": "not isolated", "stage": stage, "detail": str(e)}
        return {**out, "killed_by": f"crash ({stage})", "stage": stage, "detail": _brief(e)}
    except Exception as e:  # a mutant that breaks import or setup is killed by the crash
        return {**out, "killed_by": f"crash ({stage})", "stage": stage, "detail": _brief(e)}
    return out


def _brief(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


# -- the parent ---------------------------------------------------------------------------------


@dataclass
class Verdict:
    mutant: Mutant | None  # None: the control
    killed_by: str | None
    detail: str
    seconds: float
    counts: dict[str, int]
    notes: list[str]
    line: int = 0
    fuzz_seconds: dict[str, float] = field(default_factory=dict)

    def limits(self) -> dict[str, float]:
        """A mutant's seconds per fuzzer, from this (the control's) time there."""
        return {name: 3 * t + 30 for name, t in self.fuzz_seconds.items()}

    @property
    def name(self) -> str:
        return self.mutant.name if self.mutant else "(control)"

    @property
    def by_corpus(self) -> bool:
        """Killed without the fuzzers: by the corpora or the front-end checks, or by a crash
        before the fuzzers (not "crash (fuzz kernels)", a crash inside one)."""
        return self.killed_by is not None and "fuzz" not in self.killed_by


def check(
    mutant: Mutant | None,
    source: Path,
    counts: dict[str, int],
    seconds: float,
    timeout: float,
    limits: dict[str, float] | None = None,
) -> Verdict:
    """Copies the snapshot ``source``, plants ``mutant`` and runs the worker on the copy."""
    line = snippet_line(mutant, source / mutant.file) if mutant else 0
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="minipallas-mutant-") as tmp:
        copy = Path(tmp)
        make_copy(copy, source)
        if mutant is not None:
            apply(mutant, copy)
        path = os.pathsep.join([str(copy / "site"), str(ROOT)])
        env = {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}
        env.setdefault("JAX_PLATFORMS", "cpu")
        command = [sys.executable, "-m", __spec__.name, "--worker", str(copy)]
        command += ["--only", mutant.name] if mutant else []
        command += ["--counts", json.dumps(counts), "--fuzz-seconds", str(seconds)]
        command += ["--limits", json.dumps(limits or {})]
        try:
            done = subprocess.run(
                command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return Verdict(mutant, "timeout", f"ran past {timeout:.0f} s", timeout, {}, [], line)
    elapsed = time.monotonic() - start
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Verdict(mutant, "crash (worker)", tail[:300], elapsed, {}, [], line)
    got = json.loads(lines[-1])
    return Verdict(
        mutant, got["killed_by"], got["detail"], elapsed, got["counts"], got["notes"], line,
        got["fuzz_seconds"],
    )  # fmt: skip


def parse_programs(text: str) -> dict[str, int]:
    """``--programs``: ``discharge=625,upstream=69`` -> ``{"discharge": 625, "upstream": 69}``
    (fuzzers left out are time-boxed by the control as usual)."""
    counts = {}
    for item in text.split(","):
        name, eq, number = item.strip().partition("=")
        if name not in FUZZERS or not eq or not number.isdigit():
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r}: expected FUZZER=COUNT with FUZZER one of {', '.join(FUZZERS)}"
            )
        counts[name] = int(number)
    return counts


def fuzz_plan(
    programs: dict[str, int] | None, seconds: float | None
) -> tuple[dict[str, int], float]:
    """The fixed counts and the seconds of a time-boxed fuzzer: ``DEFAULT_PROGRAMS`` unless
    ``--programs`` or ``--fuzz-seconds`` says otherwise (20 s for a fuzzer left out)."""
    if programs is None:
        programs = {} if seconds is not None else dict(DEFAULT_PROGRAMS)
    return programs, 20.0 if seconds is None else seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated mutant names (default: all)")
    parser.add_argument("--fuzz-seconds", type=float, default=None,
                        help="time-box the control's fuzzers (per fuzzer) instead of fixed "
                        "counts")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=2, help="mutants checked at once")
    parser.add_argument("--programs", type=parse_programs, default=None,
                        help="fix the fuzz program counts: discharge=N,upstream=N,kernels=N "
                        f"(default: {DEFAULT_PROGRAMS}, or with --fuzz-seconds what the "
                        "control runs in that time)")  # fmt: skip
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds for the run")
    parser.add_argument("--output", type=Path, help=f"Markdown results (default for a full "
                        f"run: {RESULTS.relative_to(ROOT)})")  # fmt: skip
    parser.add_argument(
        "--rev", default="HEAD", help='git revision to mutate, or "worktree" (default HEAD)'
    )
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--counts", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--limits", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.programs, args.fuzz_seconds = fuzz_plan(args.programs, args.fuzz_seconds)

    by_name = {m.name: m for m in MUTANTS}
    chosen = list(MUTANTS)
    if args.only:
        unknown = [n for n in args.only.split(",") if n not in by_name]
        if unknown:
            parser.error(f"unknown mutants: {', '.join(unknown)}")
        chosen = [by_name[n] for n in args.only.split(",")]
    if args.worker:
        mutant = chosen[0] if args.only else None
        counts, limits = json.loads(args.counts), json.loads(args.limits)
        print(json.dumps(worker(args.worker, mutant, counts, args.fuzz_seconds, limits)))
        return 0

    with tempfile.TemporaryDirectory(prefix="minipallas-snapshot-") as tmp:
        return campaign(args, chosen, snapshot(Path(tmp), args.rev))


def campaign(args: argparse.Namespace, chosen: Sequence[Mutant], source: Path) -> int:
    """The control, then every chosen mutant, on copies of the snapshot ``source``."""
    problems = []
    for m in chosen:
        try:
            snippet_line(m, source / m.file)
        except CatalogueError as e:
            problems.append(str(e))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2

    start = time.monotonic()
    # The control may take the whole budget: its fixed counts take what this machine needs.
    control = check(None, source, args.programs, args.fuzz_seconds, args.budget)
    print(f"control ({args.rev}): {control.killed_by or 'survived'} in {control.seconds:.0f} s, "
          f"fuzz programs {control.counts}; {control.detail}", flush=True)  # fmt: skip
    if control.killed_by is not None:
        print("false alarm: the unmutated sources fail the kill check; no verdict is meaningful")
        return 2

    def one(m: Mutant) -> Verdict | None:
        if time.monotonic() - start > args.budget:
            return None
        # Past the limit a mutant counts as killed (a hang): 4x the control's time leaves
        # room for a machine that other jobs slow down.
        v = check(m, source, control.counts, args.fuzz_seconds, max(4 * control.seconds, 300),
                  control.limits())  # fmt: skip
        print(f"  {m.name:<34} {verdict_text(v):<40} {v.seconds:5.0f} s", flush=True)
        done.append(v)
        bar.update(survived=sum(r.killed_by is None for r in done))
        return v

    done: list[Verdict] = []
    with (
        Progress("mutate", len(chosen), unit="mutant") as bar,
        ThreadPoolExecutor(max_workers=args.jobs) as pool,
    ):
        results = list(pool.map(one, chosen))
    verdicts = [v for v in results if v is not None]
    skipped = [m.name for m, v in zip(chosen, results, strict=True) if v is None]
    wall = time.monotonic() - start
    text = report_text(verdicts, control, wall, args)
    if skipped:
        text += f"\nNot run (budget of {args.budget:g} s spent): {', '.join(skipped)}\n"
    print("\n" + text)
    output = args.output or (RESULTS if not args.only and not skipped else None)
    if output is not None:
        output.write_text(text)
        print(f"written to {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
