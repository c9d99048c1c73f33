"""``python -m minipallas.tools.fuzz.upstream``: fuzz upstream JAX against minipallas.

Each program is drawn by the generator's hypothesis strategy (``minipallas.tools.generate``),
emitted as an upstream JAX function over refs (``interop/exporter/stateful.py``) and run by
the harness every way (upstream ``discharge_state`` + evaluation; ``from_jaxpr`` + interpret,
discharge, compile; and the generated program itself as the reference). Transcendentals are
left out, so every comparison is bit for bit.

The campaign runs in batches of hypothesis runs, each with its own seed (from ``--seed``),
until ``--count`` programs or ``--seconds`` have passed. Any outcome but agreement is a
finding, classified (``classify``). The first finding of each name is printed and saved as
text under ``--save DIR`` (the finding, the generated program, the upstream jaxpr and the
import); findings ``KNOWN`` does not name (and, with ``--shrink-known``, known ones too) are
shrunk by hypothesis first (only programs with the same finding count as failing, for at most
``--shrink-seconds``). Later findings of a name already seen are counted. The
campaign ends with a summary table (one row per finding name) and programs/second; the exit
code is 1 if any finding was a ``minipallas-bug``.

``--replay FILE`` runs a saved finding's program again and prints what it finds now.

``--load FILE.py`` and ``--pass-pipeline PIPE`` (``minipallas.tools.user_passes``) run a
researcher's pipeline in every case (``Case.passes``): on the program after discharge and cleanup,
before the ``compile`` way lowers it (``--no-compile`` skips it with that way). A finding it causes
is ``pass-bug``, named after the pass, saved with its IR before and after; it counts for the exit
code as a ``minipallas-bug`` does. ``--replay`` runs the saved pipeline again (give the same
``--load``). As ``python -m minipallas.tools.fuzz.programs``, it prints how many programs each pass
changed, and generation is directed at the user's passes (``--target-pass``).

``--seconds`` bounds the whole run: a shrink ends at ``--shrink-seconds`` or there, whichever
comes first.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from minipallas.interop.exporter.stateful import emit
from minipallas.ir.core import Function
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.ir.parser import parse_module
from minipallas.ir.types import RefType
from minipallas.lowering.runtime.libtpu import quiet_libtpu
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge
from minipallas.tools.difftest.classify import KNOWN, Finding
from minipallas.tools.difftest.harness import run
from minipallas.tools.difftest.outputs import ref
from minipallas.tools.difftest.report import Case, Report
from minipallas.tools.fuzz import loop
from minipallas.tools.generate import Config, programs, random_inputs
from minipallas.tools.progress import Progress, campaign_parser
from minipallas.tools.user_passes import (
    PassCoverage,
    pipeline_texts,
)

REFERENCE_HEADER = "--- minipallas IR (reference) ---"
FAILING = ("minipallas-bug", "pass-bug")  # the kinds that make the exit code 1


def case_for(fn: Function, seed: int, name: str = "generated", passes: str = "") -> Case:
    """The harness case for a generated program: its emission, inputs from ``seed``, the
    user's pipeline ``passes``."""
    args = random_inputs(fn, seed)
    wrapped = tuple(
        ref(a) if isinstance(t, RefType) else a for t, a in zip(fn.param_types, args, strict=True)
    )
    return Case(name, emit(fn), wrapped, reference=fn, emitted=True, passes=passes)


@dataclass
class Saved:
    finding: Finding
    text: str
    input_seed: int
    passes: str = ""  # the user's pipeline it ran with


@dataclass
class Campaign:
    """Counts and findings of one run; ``deadline`` is a ``time.monotonic()`` value."""

    count: int
    deadline: float
    compile: bool = True
    shrink_seconds: float = 60.0
    shrink_known: bool = False  # KNOWN findings come with a minimal repro already
    passes: str = ""  # the user's pipeline, run in every case
    programs: int = 0
    shrink_runs: int = 0
    counts: Counter = field(default_factory=Counter)
    kinds: dict[str, str] = field(default_factory=dict)
    saved: list[Saved] = field(default_factory=list)
    coverage: PassCoverage | None = None  # with a pipeline: which passes changed each program

    def done(self) -> bool:
        return self.programs >= self.count or time.monotonic() >= self.deadline

    def record(self, finding: Finding) -> bool:
        """Counts ``finding``; True if its name is new (it deserves shrinking)."""
        new = finding.name not in self.counts
        self.counts[finding.name] += 1
        self.kinds[finding.name] = finding.kind
        return new and finding.kind != "agree"


class _Found(Exception):
    """Raised inside hypothesis for the finding being shrunk."""


def run_batch(campaign: Campaign, config: Config, batch: int, seed: int) -> None:
    """One hypothesis run of up to ``batch`` programs; shrinks the first new finding."""
    from hypothesis import given
    from hypothesis import strategies as st

    strategy = programs(config)
    target: str | None = None
    smallest: Saved | None = None
    shrink_deadline = 0.0

    @loop.batch_settings(batch, seed, report_multiple_bugs=False)
    @given(st.data())
    def one(data: st.DataObject) -> None:
        nonlocal target, smallest, shrink_deadline
        fn = data.draw(strategy)  # drawn first, always: hypothesis replays draws exactly
        input_seed = data.draw(st.integers(0, 2**16))
        if target is None and campaign.done():
            return
        if target is not None and time.monotonic() > shrink_deadline:
            return  # shrinking has had its time: the smallest so far is kept
        report = run(case_for(fn, input_seed, passes=campaign.passes), compile=campaign.compile)
        finding = report.finding
        if target is not None:
            campaign.shrink_runs += 1
        else:
            campaign.programs += 1
            if campaign.coverage is not None:
                campaign.coverage.record(_texts(fn, campaign.passes))
            if campaign.record(finding) and (campaign.shrink_known or finding.name not in KNOWN):
                target = finding.name
                shrink_deadline = min(time.monotonic() + campaign.shrink_seconds, campaign.deadline)
            elif campaign.counts[finding.name] == 1 and finding.kind != "agree":
                campaign.saved.append(Saved(finding, report.text(), input_seed, campaign.passes))
        if finding.name == target:  # one raise site: hypothesis tells failures apart by it
            smallest = Saved(finding, report.text(), input_seed, campaign.passes)
            raise _Found(target)

    try:
        one()
    except Exception:  # hypothesis re-raises the shrunk failure (or reports it flaky)
        if smallest is None:
            raise  # not a finding: hypothesis itself failed
    if smallest is not None:
        campaign.saved.append(smallest)


def _texts(fn: Function, passes: str) -> list[str]:
    """The program after discharge and cleanup (where the harness runs the pipeline), then
    after each pass of ``passes``: for ``PassCoverage``."""
    try:
        return pipeline_texts(cleanup(discharge(fn)), passes)
    except Exception:  # the harness reports the program's own failure
        return []


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def report(saved: Saved, number: int, directory: Path | None) -> None:
    """Prints a shrunk finding; saves it under ``directory`` if given."""
    known = KNOWN.get(saved.finding.name)
    header = [
        f"finding: {saved.finding}",
        f"input seed: {saved.input_seed}",
        *([f"pipeline: {saved.passes}"] if saved.passes else []),
        f"reason: {known.reason if known else saved.finding.detail}",
    ]
    if known is not None:
        header.append(f"minimal upstream repro: {known.repro}")
    text = "".join(f"# {line}\n" for h in header for line in h.splitlines()) + saved.text + "\n"
    print(f"\n=== finding {number}: {saved.finding} ===")
    print(text)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{number:03d}-{_slug(saved.finding.name)}.txt"
        path.write_text(text)
        print(f"saved to {path}")


def summary(campaign: Campaign, elapsed: float) -> str:
    """The table of findings: name, kind, how many programs, the share of all programs."""
    rows = [("finding", "kind", "programs", "share")]
    for name, n in campaign.counts.most_common():
        share = f"{100 * n / max(campaign.programs, 1):.1f}%"
        rows.append((name, campaign.kinds[name], str(n), share))
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    rate = campaign.programs / max(elapsed, 1e-9)
    lines.append(
        f"\n{campaign.programs} programs in {elapsed:.1f} s: {rate:.2f} programs/second; "
        f"{campaign.shrink_runs} shrink runs"
    )
    return "\n".join(lines)


def replay(path: Path) -> Report:
    """Runs a saved finding's generated program again; returns the harness's report."""

    text = loop.read_saved(path)
    seed = re.search(r"^# input seed: (\d+)$", text, re.M)
    pipeline = re.search(r"^# pipeline: (.+)$", text, re.M)
    if REFERENCE_HEADER not in text or seed is None:
        raise PassError(f"{path} is not a saved finding of this fuzzer",
                        fix="give --replay a file its --save wrote")  # fmt: skip
    program = text.split(REFERENCE_HEADER, 1)[1].split("\n--- ", 1)[0]  # the IR after it is not
    fn = parse_module(program).entry
    passes = loop.saved_pipeline(pipeline.group(1) if pipeline else "", path)
    return run(case_for(fn, int(seed.group(1)), path.stem, passes))


def main(argv: list[str] | None = None) -> int:
    quiet_libtpu()  # no chip: libtpu, loaded at jax's first device query, logs no errors
    parser = campaign_parser(
        "minipallas.tools.fuzz.upstream",
        __doc__.split("\n")[0],
        unit="programs",
        count=100_000,
        seconds=60.0,
    )
    parser.add_argument("--save", type=Path, metavar="DIR", help="save findings here as text")
    parser.add_argument("--batch", type=int, default=50, help="programs per hypothesis run")
    parser.add_argument("--max-stmts", type=int, default=Config.max_stmts)
    parser.add_argument("--shrink-seconds", type=float, default=60.0, help="per finding")
    parser.add_argument(
        "--shrink-known", action="store_true", help="shrink known defects too (they have repros)"
    )
    parser.add_argument("--no-compile", action="store_true", help="skip minipallas.compile")
    parser.add_argument("--replay", type=Path, metavar="FILE", help="re-run a saved finding")
    return loop.main(parser, argv, _main, functions=True)


def _main(args: argparse.Namespace, passes: str, targets: list[str]) -> int:
    if args.replay:
        try:
            found = replay(args.replay)
        except MiniPallasError as e:
            print(f"python -m minipallas.tools.fuzz.upstream: {e}", file=sys.stderr)
            return 2
        print(found.text())
        return 0 if found.ok else 1

    ops, numbers = loop.directed_choices(targets)
    config = Config(
        max_stmts=args.max_stmts, transcendental=False, favour_ops=ops, favour_numbers=numbers
    )
    if targets:
        print(loop.directed_note(targets, ops, numbers))
    start = time.monotonic()
    campaign = Campaign(
        args.count,
        start + args.seconds,
        not args.no_compile,
        args.shrink_seconds,
        args.shrink_known,
        passes,
    )
    if passes:
        campaign.coverage = PassCoverage(passes)
    seeds = random.Random(args.seed)
    print(
        f"fuzzing upstream JAX against minipallas: up to {args.count} programs or "
        f"{args.seconds:g} s, seed {args.seed}",
        flush=True,
    )
    bar = Progress("fuzz-upstream", args.count, args.seconds, unit="program")
    while not campaign.done():
        before, programs = len(campaign.saved), campaign.programs
        batch = min(args.batch, args.count - campaign.programs)
        run_batch(campaign, config, batch, seeds.getrandbits(64))
        for k in range(before, len(campaign.saved)):
            report(campaign.saved[k], k + 1, args.save)
        bar.update(campaign.programs - programs, findings=len(campaign.saved))
        rate = campaign.programs / (time.monotonic() - start)
        print(f"  {campaign.programs} programs, {rate:.2f} programs/s", flush=True)
    bar.close()
    table = summary(campaign, time.monotonic() - start)
    if campaign.coverage is not None:
        table += "\n" + "\n".join(campaign.coverage.lines())
    print("\n" + table)
    if args.save is not None:
        args.save.mkdir(parents=True, exist_ok=True)
        (args.save / "summary.txt").write_text(table + "\n")
    return int(any(kind in FAILING for kind in campaign.kinds.values()))


if __name__ == "__main__":
    sys.exit(main())
