"""``python -m minipallas.tools.fuzz.programs``: a long campaign checking discharge on programs.

Each program is drawn by the hypothesis strategy ``minipallas.tools.generate.programs`` and checked
by ``minipallas.tools.generate.check.check_all_modes``: full and random partial discharge, each with
and without cleanup, bit for bit against the reference interpreter, every output verified.

The campaign runs in batches of hypothesis runs, each with its own seed (derived from
``--seed``), until ``--count`` programs or ``--seconds`` have passed, checked between batches
(a test that stopped early on the clock would make hypothesis's replays disagree). When a
program fails, hypothesis shrinks it; the smallest failing program is printed as text IR
(with the output of the failing pass), saved under ``--save DIR`` if given, and the campaign
goes on with the next batch. At the end it prints programs/second and a summary by failing
stage; the exit code is 1 if anything failed.

``--replay FILE`` re-checks a saved failure (its header holds the mode and the input seed).

``--load FILE.py`` and ``--pass-pipeline PIPE`` (``minipallas.tools.user_passes``) check a user's
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
from dataclasses import dataclass, field
from pathlib import Path

from minipallas.ir.errors import MiniPallasError
from minipallas.ir.parser import parse
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge
from minipallas.tools.fuzz import loop
from minipallas.tools.generate import Config, programs, random_inputs
from minipallas.tools.generate.check import PropertyFailure, check_all_modes, check_pipeline
from minipallas.tools.progress import Progress, campaign_parser, print_summary
from minipallas.tools.user_passes import (
    PassCoverage,
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


def run_batch(campaign: Campaign, config: Config, batch: int, seed: int) -> None:
    """One hypothesis run of up to ``batch`` programs; records a shrunk failure if any."""
    from hypothesis import given, target
    from hypothesis import strategies as st

    strategy = programs(config)
    failed = False

    @loop.batch_settings(batch, seed, campaign.directed)
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

    text = loop.read_saved(path)
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
    pipeline = loop.saved_pipeline(header.get("pipeline", ""), path)
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
    parser = campaign_parser(
        "minipallas.tools.fuzz.programs",
        __doc__.split("\n")[0],
        unit="programs",
        count=100_000,
        seconds=60.0,
    )
    parser.add_argument("--save", type=Path, metavar="DIR", help="save failures here as text IR")
    parser.add_argument("--batch", type=int, default=50, help="programs per hypothesis run")
    parser.add_argument(
        "--max-stmts", type=int, default=16, help="statements per program body, at most"
    )
    parser.add_argument("--max-failures", type=int, default=10, help="stop after N failures")
    parser.add_argument("--replay", type=Path, metavar="FILE", help="re-check a saved failure")
    return loop.main(parser, argv, _main, functions=True)


def _main(args: argparse.Namespace, pipeline: str, targets: list[str]) -> int:
    if args.replay:
        try:
            return replay(args.replay)
        except MiniPallasError as e:
            print(f"python -m minipallas.tools.fuzz.programs: {e}", file=sys.stderr)
            return 2
    ops, numbers = loop.directed_choices(targets)
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
        print(loop.directed_note(targets, ops, numbers))
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


if __name__ == "__main__":
    sys.exit(main())
