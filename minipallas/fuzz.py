"""``python -m minipallas.fuzz``: a long campaign checking discharge on random programs.

Each program is drawn by the hypothesis strategy ``minipallas.generate.programs`` and checked
by ``minipallas.generate.check.check_all_modes``: full and random partial discharge, each with
and without cleanup, bit for bit against the reference interpreter, every output verified.

The campaign runs in batches of hypothesis runs, each with its own seed (derived from
``--seed``), until ``--count`` programs or ``--seconds`` have passed, checked between batches
(a test that stopped early on the clock would make hypothesis's replays disagree). When a
program fails, hypothesis shrinks it; the smallest failing program is printed as text IR
(with the output of the failing pass), saved under ``--save DIR`` if given, and the campaign
goes on with the next batch. At the end it prints programs/second and a summary by failing
stage; the exit code is 1 if anything failed.

``--replay FILE`` re-checks a saved failure (its header holds the mode and the input seed).

``--load FILE.py`` and ``--pass-pipeline PIPE`` (``minipallas.user_passes``) check a user's
pipeline too: each program, fully discharged and cleaned up, then the pipeline, must keep
every output's bits (``generate.check.check_pipeline``). A failure there is at stage
``pass NAME``, names the pass and prints its IR before and after; its saved header holds the
pipeline, which ``--replay`` runs again (give the same ``--load``).

With a pipeline, the summary says how many programs each pass changed (its IR after differs
from its IR before, printed), and that a pass was never exercised when it changed none.
Generation is pass-directed by default at the user's passes of the pipeline (registered by a
``--load`` file or a script, not by minipallas), and at a pass that applies the ``@pattern``
rewrites a ``--load`` file registered (``cleanup``);
``--target-pass NAME`` picks one, ``--target-pass none`` turns it off. The op names and
numbers the pass's code and patterns name (``user_passes.pass_targets``) are drawn more often,
and hypothesis is told how many passes changed each program (``hypothesis.target``), so it
mutates the programs a pass fires on. ``--seconds`` bounds the whole run: once it has passed,
a shrink in progress stops where it is and its smallest failure so far is reported.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minipallas.generate import Config, programs, random_inputs
from minipallas.generate.check import PropertyFailure, check_all_modes, check_pipeline
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.parser import parse
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge
from minipallas.passes.pipeline import parse_pipeline, split_pipeline
from minipallas.passes.registry import PASSES, PassError
from minipallas.progress import Progress, print_summary
from minipallas.user_passes import (
    PassCoverage,
    add_arguments,
    directs,
    main_with_passes,
    pass_targets,
)


@dataclass
class Failure:
    stage: str
    message: str
    program: str
    detail: str  # the failing pass's output, when it produced one
    partial: list[bool]
    input_seed: int
    pipeline: str = ""  # the user's pipeline checked, if any
    found: str = ""  # when the first failing program came: "after 1.2 s, program 3"


@dataclass
class Campaign:
    """Counts and findings of one run; ``deadline`` is a ``time.monotonic()`` value."""

    count: int
    deadline: float
    pipeline: str = ""  # a user's pipeline, checked after discharge and cleanup
    programs: int = 0
    ops: int = 0
    shrink_runs: int = 0
    failures: list[Failure] = field(default_factory=list)
    last_failure: Failure | None = None
    coverage: PassCoverage | None = None  # with a pipeline: which passes changed each program
    start: float = field(default_factory=time.monotonic)
    directed: bool = False  # tell hypothesis how many passes fired (pass-directed generation)

    def done(self) -> bool:
        return self.programs >= self.count or time.monotonic() >= self.deadline


def _failing_output(fn: object, error: PropertyFailure) -> str:
    """The failing pass's output for the failing mode, as text (empty if the pass crashed); for
    a user's pass, its IR before and after."""

    if error.blame is not None:
        return error.blame.text()
    if error.mode is None or error.stage in ("original", "discharge"):
        return ""
    mode, clean = error.mode
    try:
        out = discharge(fn, mode)  # type: ignore[arg-type]
        return str(cleanup(out) if clean and error.stage != "cleanup" else out)
    except Exception as e:  # the failure itself is what we report
        return f"(could not rebuild the output: {type(e).__name__}: {e})"


def batch_settings(
    batch: int, seed: int, directed: bool = False, **options: Any
) -> Callable[[Any], Any]:
    """The hypothesis settings of one fuzzing batch (here and in ``difftest.fuzz_upstream``):
    up to ``batch`` examples from ``seed``, generate (``directed``: then mutate the examples
    with the highest ``hypothesis.target``) then shrink, no deadline, no example database,
    quiet; ``options`` are further ``settings``."""
    from hypothesis import HealthCheck, Phase, Verbosity, settings
    from hypothesis import seed as hypothesis_seed

    chosen = settings(
        max_examples=batch,
        deadline=None,
        database=None,
        phases=[Phase.generate, *([Phase.target] * directed), Phase.shrink],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        print_blob=False,
        **options,
    )
    return lambda test: hypothesis_seed(seed)(chosen(test))


def run_batch(campaign: Campaign, config: Config, batch: int, seed: int) -> None:
    """One hypothesis run of up to ``batch`` programs; records a shrunk failure if any."""
    from hypothesis import given, target
    from hypothesis import strategies as st

    strategy = programs(config)
    failed = False

    @batch_settings(batch, seed, campaign.directed)
    @given(st.data())
    def one(data: st.DataObject) -> None:
        nonlocal failed
        if time.monotonic() >= campaign.deadline:
            return  # out of time: every example passes at once, so a shrink ends where it is
        try:
            fn = data.draw(strategy)
        except Exception as e:  # a generator bug: it must only draw well-typed programs
            failed = True
            campaign.last_failure = Failure("generate", f"{type(e).__name__}: {e}", "", "", [], 0)
            raise
        partial = [data.draw(st.booleans()) for _ in fn.params]
        input_seed = data.draw(st.integers(0, 2**16))
        new = not failed  # a shrink run is not a new program
        if new:
            campaign.programs += 1
            campaign.ops += sum(1 for f in (fn, *fn.callees()) for _ in f.walk())
        else:
            campaign.shrink_runs += 1
        texts: list[str] = []  # the IR before the pipeline and after each pass
        try:
            check_all_modes(fn, random_inputs(fn, input_seed), partial)
            if campaign.pipeline:
                check_pipeline(fn, random_inputs(fn, input_seed), campaign.pipeline, texts)
        except PropertyFailure as e:
            failed = True
            found = (
                campaign.last_failure.found
                if campaign.last_failure
                else (
                    f"after {time.monotonic() - campaign.start:.1f} s, program {campaign.programs}"
                )
            )
            campaign.last_failure = Failure(
                e.stage, str(e), str(fn), _failing_output(fn, e), partial, input_seed,
                campaign.pipeline, found,
            )  # fmt: skip
            for note in getattr(e, "__notes__", ()):
                campaign.last_failure.message += f"\n{note}"
            if new and texts and campaign.coverage is not None:
                campaign.coverage.record(texts)
            raise
        if new and texts and campaign.coverage is not None:
            fired = campaign.coverage.record(texts)
            if campaign.directed:
                target(float(fired), label="passes that changed the program")

    try:
        one()
    except Exception:  # hypothesis re-raises the shrunk example's failure last
        if campaign.last_failure is None:
            if time.monotonic() >= campaign.deadline:
                return  # out of time: hypothesis calls the examples that drew nothing flaky
            raise  # not a finding: hypothesis itself failed
        campaign.failures.append(campaign.last_failure)
        campaign.last_failure = None


def report(failure: Failure, number: int, save: Path | None) -> None:
    text = (
        f"# stage: {failure.stage}\n"
        f"# should_discharge (partial mode): {failure.partial}\n"
        f"# input seed: {failure.input_seed}\n"
        + (f"# pipeline: {failure.pipeline}\n" if failure.pipeline else "")
        + "".join(f"# {line}\n" for line in failure.message.splitlines())
        + failure.program
        + "\n"
    )
    print(f"\n=== failure {number}: {failure.stage} ===")
    if failure.found:
        print(f"found {failure.found} (then shrunk)")
    print(text)
    if failure.detail:
        print("--- output of the failing pass ---")
        print(failure.detail)
    if save is not None:
        save.mkdir(parents=True, exist_ok=True)
        path = save / f"failure-{number:03d}-{failure.stage.replace(' ', '-')}.mir"
        path.write_text(text)
        print(f"saved to {path}")


def replay(path: Path) -> int:
    """Re-checks a saved failure; 0 if it now passes."""

    text = read_saved(path)
    header = dict(
        line[2:].split(": ", 1)
        for line in text.splitlines()
        if line.startswith("# ") and ": " in line
    )
    fn = parse("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    partial = [
        p.strip() == "True"
        for p in header["should_discharge (partial mode)"].strip("[]").split(",")
        if p.strip()
    ]
    args = random_inputs(fn, int(header["input seed"]))
    pipeline = saved_pipeline(header.get("pipeline", ""), path)
    try:
        check_all_modes(fn, args, partial)
        if pipeline:
            check_pipeline(fn, args, pipeline)
    except PropertyFailure as e:
        print(e)
        return 1
    print(f"{path}: passes now")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m minipallas.fuzz", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--count", type=int, default=100_000, help="stop after N programs")
    parser.add_argument("--seconds", type=float, default=60.0, help="stop after S seconds")
    parser.add_argument("--seed", type=int, default=0, help="seed of the whole campaign")
    parser.add_argument("--save", type=Path, metavar="DIR", help="save failures here as text IR")
    parser.add_argument("--batch", type=int, default=50, help="programs per hypothesis run")
    parser.add_argument(
        "--max-stmts", type=int, default=16, help="statements per program body, at most"
    )
    parser.add_argument("--max-failures", type=int, default=10, help="stop after N failures")
    parser.add_argument("--replay", type=Path, metavar="FILE", help="re-check a saved failure")
    add_target_argument(parser)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return main_with_passes(parser.prog, args, lambda pipeline: _main(args, pipeline))


def _main(args: argparse.Namespace, pipeline: str) -> int:
    if args.replay:
        try:
            return replay(args.replay)
        except MiniPallasError as e:
            print(f"python -m minipallas.fuzz: {e}", file=sys.stderr)
            return 2

    try:
        function_pipeline(pipeline)
        targets = targeted_passes(pipeline, args.target_pass)
    except MiniPallasError as e:
        print(f"python -m minipallas.fuzz: {e}", file=sys.stderr)
        return 2
    ops, numbers = directed_choices(targets)
    config = Config(max_stmts=args.max_stmts, favour_ops=ops, favour_numbers=numbers)
    start = time.monotonic()
    campaign = Campaign(args.count, start + args.seconds, pipeline, directed=bool(targets))
    campaign.start = start
    if pipeline:
        campaign.coverage = PassCoverage(pipeline)
    seeds = random.Random(args.seed)
    next_progress = start + 5
    checked = f"discharge, then '{pipeline}'" if pipeline else "discharge"
    print(f"fuzzing {checked}: up to {args.count} programs or {args.seconds:g} s, seed {args.seed}")
    if targets:
        print(directed_note(targets, ops, numbers))
    bar = Progress("fuzz", args.count, args.seconds, unit="program")
    while not campaign.done() and len(campaign.failures) < args.max_failures:
        before, programs = len(campaign.failures), campaign.programs
        run_batch(
            campaign, config, min(args.batch, args.count - campaign.programs), seeds.getrandbits(64)
        )
        bar.update(campaign.programs - programs, failures=len(campaign.failures))
        for k in range(before, len(campaign.failures)):
            report(campaign.failures[k], k + 1, args.save)
        if time.monotonic() >= next_progress:
            next_progress = time.monotonic() + 5
            rate = campaign.programs / (time.monotonic() - start)
            print(
                f"  {campaign.programs} programs, {len(campaign.failures)} failures, "
                f"{rate:.1f} programs/s",
                flush=True,
            )

    bar.close()
    elapsed = time.monotonic() - start
    stages = Counter(f.stage for f in campaign.failures)
    rows = {"programs": campaign.programs, "ops": campaign.ops, "shrink runs": campaign.shrink_runs}
    rows |= {f"failures: {stage}": n for stage, n in stages.items()} or {"failures": 0}
    print_summary(f"fuzz (discharge), seed {args.seed}, {elapsed:.1f} s", rows)
    print(
        f"\n{campaign.programs} programs ({campaign.ops} ops) in {elapsed:.1f} s: "
        f"{campaign.programs / elapsed:.1f} programs/second, "
        f"{campaign.ops / elapsed:.0f} ops/second"
    )
    print(f"shrink runs: {campaign.shrink_runs}")
    for line in campaign.coverage.lines() if campaign.coverage else ():
        print(line)
    if not campaign.failures:
        print("no failures")
        return 0
    print(f"{len(campaign.failures)} failures: " + ", ".join(f"{n} {s}" for s, n in stages.items()))
    return 1


def function_pipeline(pipeline: str) -> None:
    """Refuses a pipeline holding a kernel pass (``subject="kernel"``): the program fuzzers
    draw functions, on which it cannot run (each program was its failure, 'it raised
    PassError', or, in ``fuzz_upstream``'s cases, it never ran)."""
    for step in split_pipeline(pipeline):
        name = step.partition("{")[0].strip()
        if PASSES[name].subject == "kernel":
            raise PassError(
                f"pass '{name}' transforms a kernel (its grid and block specs), and this fuzzer "
                "draws programs, not kernels",
                fix="fuzz it with python -m minipallas.difftest.fuzz_kernels (or fuzz_tpu)",
            )


def read_saved(path: Path) -> str:
    """The text of a saved failure (``--replay``'s); a file that cannot be read is a
    ``PassError`` (a usage error)."""
    try:
        return path.read_text()
    except OSError as e:
        raise PassError(
            f"cannot read {path}: {e.strerror}", fix="give --replay a file --save wrote"
        ) from None


def saved_pipeline(pipeline: str, path: Path) -> str:
    """The pipeline a saved failure's header names, checked: one naming a pass no ``--load``
    file of this command registered is a ``PassError`` saying what to load (it read as the
    pass's own failure: 'it raised PassError: unknown pass')."""
    try:
        if pipeline:
            parse_pipeline(pipeline)
    except PassError as e:
        raise PassError(
            f"{path} was saved with the pipeline '{pipeline}': {e.message}",
            fix="give --replay the --load files that register its passes, as the run that saved it",
        ) from None
    return pipeline


def add_target_argument(parser: argparse.ArgumentParser) -> None:
    """``--target-pass NAME``: the pass generation is directed at (``targeted_passes``)."""
    parser.add_argument(
        "--target-pass",
        metavar="NAME",
        help="draw programs (kernels) this pass of the pipeline rewrites (default: each pass in "
        "it that is yours, not minipallas's, or that applies your @pattern rewrites; 'none': "
        "plain generation)",
    )


def targeted_passes(pipeline: str, chosen: str | None) -> list[str]:
    """The passes generation is directed at: ``chosen`` (a pass of ``pipeline``; ``none``: no
    pass), by default every pass of the pipeline that is the user's or applies the user's
    ``@pattern`` rewrites (``user_passes.directs``)."""
    names = [step.partition("{")[0].strip() for step in split_pipeline(pipeline)]
    if chosen == "none":
        return []
    if chosen is not None:
        if chosen not in names:
            raise PassError(
                f"--target-pass {chosen}: not a pass of the pipeline '{pipeline}'",
                fix=f"name one of {names or 'its passes (give --pass-pipeline)'}",
            )
        return [chosen]
    return list(dict.fromkeys(n for n in names if directs(n)))


def directed_note(passes: list[str], ops: tuple[str, ...], numbers: tuple[float, ...]) -> str:
    """The line a fuzzer starts with when its generation is directed at ``passes``."""
    return f"pass-directed: {', '.join(passes)}; favouring ops {list(ops)}, numbers {list(numbers)}"


def directed_choices(passes: list[str]) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The op names and numbers the ``passes`` name (``user_passes.pass_targets``), merged."""
    ops: set[str] = set()
    numbers: set[float] = set()
    for name in passes:
        more_ops, more_numbers = pass_targets(name)
        ops |= set(more_ops)
        numbers |= set(more_numbers)
    return tuple(sorted(ops)), tuple(sorted(numbers))


if __name__ == "__main__":
    sys.exit(main())
