"""``minipallas-difftest``: run a module's programs against upstream JAX, or the fuzzer.

``minipallas-difftest FILE.py [FILE.py ...] [-k TEXT] [--show] [--device tpu]`` runs every ``Case``
that the files define (at module level, or in a list or tuple there, such as ``CASES``), each
through ``minipallas.tools.difftest.run``, with a progress bar on a terminal
(``minipallas.tools.progress``: none in logs), then prints a summary table: one row per case with
its finding, whether that is the finding the case expects, and each way's time, then the count of
each kind (exact agreement and agreement within the numerics envelope apart). ``--show`` prints the
full report (both programs) of every case whose finding is not the expected one (the table itself
prints, under it, the detail of a ``case-error``, the case's own mistake with its fix, and of a
``kernel-bug``). The exit code is 1 if any case's finding is not the one it expects (a finding), 2
for a usage error (a file that cannot be read or defines no case, an unknown pass or option), as
every minipallas command's. Every case's TPU kernels also go through the kernel checks
(``minipallas.tools.difftest.checks``): a bug found is the finding ``kernel-bug (its kind)``, and
the table gives the checks' time. ``--device tpu`` adds the TPU ways
(``minipallas.tools.difftest.tpu``): the table gains their times and the TPU verdict, and a case
whose verdict is not good counts as not as expected; on a machine without a TPU it adds what needs
no chip (libtpu's compile of both sides, the verdict ``no-chip``).

``--load FILE.py`` (repeatable) and ``--pass-pipeline PIPE`` put a researcher's passes under the
difftest: every case runs with ``Case.passes=PIPE`` (``user_pipeline``: on each kernel, as
``pallas_call(..., passes=PIPE)``; a case without kernels, on its program after discharge and
cleanup, before ``compile`` lowers it). A finding the pipeline causes is ``pass-bug``, named
after the pass, and ``--show`` prints its IR before and after; with a pipeline, ``--show``
prints every case, with the IR after the pipeline. Under the table, as the fuzzers do
(``user_passes.PassCoverage``), a line a pass says on how many of the cases it ran on it
changed the IR (``pass P changed 0 of 3 cases: it was never exercised``: agreement then
proves nothing about it), a line a ``@pattern`` of the ``--load`` files how many it rewrote an
op in, and a line names the cases the pipeline did not run on. A difference a loaded
``@pattern`` causes is ``pass-bug (pass pattern NAME)``; without ``--pass-pipeline``, files that
register patterns run with ``--pass-pipeline=cleanup``, so that their rewrites are counted and
blamed (every cleanup applies them anyway).

A case whose ``jax.shard_map`` spans several devices (``devices``) needs that many devices in
this process too: ``--devices N`` makes jax see N CPU devices (``jax_num_cpu_devices``, set
before the files run, so before jax starts; setting
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` in the environment does the same).
Upstream runs such a case in a worker process of its own, each run time-boxed by
``--upstream-seconds`` (default 60): a run that outlives it is the finding ``upstream-hangs``.

``minipallas-difftest fuzz [ARGS]`` runs ``python -m minipallas.tools.fuzz.upstream ARGS``.
"""

from __future__ import annotations

import argparse
import dataclasses
import runpy
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from minipallas.lowering.runtime.libtpu import quiet_libtpu
from minipallas.passes.cleanup_patterns import PATTERNS
from minipallas.tools.difftest import user_pipeline
from minipallas.tools.difftest.devices import UPSTREAM_SECONDS, use_cpu_devices
from minipallas.tools.difftest.harness import DEVICES, run
from minipallas.tools.difftest.report import SCHEDULE_WAYS, Case, Report
from minipallas.tools.difftest.tpu import TPU_WAYS
from minipallas.tools.fuzz.upstream import main as fuzz_main
from minipallas.tools.progress import Progress
from minipallas.tools.user_passes import LOADED, PassCoverage, add_arguments, main_with_passes


def cases_in(path: Path) -> list[Case]:
    """The ``Case`` s a Python file defines, in definition order, each once.

    The file's folder goes first on ``sys.path`` (and stays there, since cases may import when
    they run), as ``python FILE`` and pytest do, so the file can import the modules beside it.
    """
    folder = str(Path(path).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    found: dict[int, Case] = {}
    for value in runpy.run_path(str(path)).values():
        items = value if isinstance(value, list | tuple) else [value]
        for item in items:
            if isinstance(item, Case):
                found.setdefault(id(item), item)
    return list(found.values())


DEVICE_WAYS = (*SCHEDULE_WAYS, "on-devices")
SAID = ("case-error", "kernel-bug")  # findings whose detail the table prints: what to fix


def table(reports: Sequence[Report]) -> str:
    """One row per case: name, finding, expected or not, milliseconds per way (and, for cases
    run on a TPU, the TPU ways' times and verdict)."""
    on_tpu = any(r.tpu is not None for r in reports)
    ways = ("upstream", "interpret", "discharge", "compile", *(TPU_WAYS if on_tpu else ()))
    # cases that span devices: the simulator's other schedules, and the compiled way if it ran
    spans = [w for w in DEVICE_WAYS if any(w in r.outcomes for r in reports)]
    ways = (*ways, *spans)
    head = ("case", "finding", "expected", *(f"{w} ms" for w in ways), "checks ms")
    rows = [(*head, "on the TPU") if on_tpu else head]
    for r in reports:
        times = []
        for w in ways:
            o = r.outcomes.get(w)
            times.append("-" if o is None or not o.ok else f"{o.seconds * 1e3:.0f}")
        checks = f"{r.check_seconds * 1e3:.0f}"
        row = (r.case.name, str(r.finding), "yes" if _as_expected(r) else "NO", *times, checks)
        rows.append((*row, str(r.tpu).splitlines()[0][:80]) if on_tpu else row)
    widths = [max(len(row[k]) for row in rows) for k in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.extend(f"{r.case.name}: {r.finding.detail}" for r in reports if r.finding.kind in SAID)
    kinds = Counter(r.finding.kind for r in reports)
    lines.append("")
    lines.append(", ".join(f"{n} {kind}{_gloss(kind, reports)}" for kind, n in kinds.most_common()))
    unexpected = sum(not _as_expected(r) for r in reports)
    lines.append(f"{len(reports)} cases, {unexpected} not as expected")
    return "\n".join(lines)


def _as_expected(r: Report) -> bool:
    return r.expected and (r.tpu is None or r.tpu.ok)


def _gloss(kind: str, reports: Sequence[Report]) -> str:
    """What agreement meant: exact bits, or XLA's float rounding within the envelope."""
    if kind == "agree":
        return " (bit for bit)"
    if kind == "within-envelope":
        widest = max(r.finding.fraction for r in reports if r.finding.kind == kind)
        return f" (XLA's float rounding; at most {widest:.2g}x the envelope)"
    return ""


def _count(coverage: PassCoverage, report: Report) -> bool:
    """Counts the passes (and loaded patterns) that changed the case's IR; False if the
    pipeline did not run on the case."""
    texts = user_pipeline.texts(report)
    fired = coverage.fired(texts)  # also the patterns' rewrites since the last case
    if texts:
        coverage.count(fired)
    return bool(texts)


def _not_reached(missed: Sequence[Report], total: int) -> list[str]:
    """The cases the pipeline did not run on, which the counts of ``PassCoverage`` leave out,
    and why."""
    if not missed:
        return []
    why = [
        "no kernel for its kernel pass" if r.program is not None and not user_pipeline.ways(r)
        else "it failed before the pipeline"
        for r in missed
    ]  # fmt: skip
    cases = "; ".join(f"{r.case.name} ({w})" for r, w in zip(missed, why, strict=True))
    return [f"the pipeline did not run on {len(missed)} of {total} cases: {cases}"]


def run_files(
    paths: Sequence[Path],
    keyword: str | None,
    show: bool,
    device: str = "cpu",
    passes: str = "",
    upstream_seconds: float = UPSTREAM_SECONDS,
) -> int:
    """Runs the cases of ``paths`` (whose name has ``keyword``), each with the pipeline
    ``passes`` when given; prints the table, and with ``show`` the reports (module doc)."""
    try:
        found = [c for p in paths for c in cases_in(p)]
    except OSError as e:  # a usage error, in one line
        print(f"minipallas-difftest: cannot read {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    cases = [c for c in found if keyword is None or keyword in c.name]
    if passes:
        cases = [dataclasses.replace(c, passes=passes) for c in cases]
    if not cases:
        where = ", ".join(map(str, paths)) + (f" with -k {keyword}" if keyword else "")
        print(f"minipallas-difftest: no cases found in {where}", file=sys.stderr)
        return 2
    coverage = PassCoverage(passes, "cases") if passes else None
    reports, missed = [], []  # missed: the cases the pipeline did not run on
    with Progress("difftest", len(cases), unit="case") as bar:
        for case in cases:
            report = run(case, device=device, upstream_seconds=upstream_seconds)
            reports.append(report)
            if coverage is not None and not _count(coverage, report):
                missed.append(report)
            bar.update(unexpected=sum(not _as_expected(r) for r in reports))
    print(table(reports))
    if coverage is not None:
        print("\n".join(["", *coverage.lines(), *_not_reached(missed, len(reports))]))
    if show:
        for r in reports:
            if passes or not _as_expected(r):
                print("\n" + r.text())
    return int(any(not _as_expected(r) for r in reports))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    quiet_libtpu()  # no chip: libtpu, loaded at jax's first device query, logs no errors
    if argv[:1] == ["fuzz"]:
        return fuzz_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="minipallas-difftest",
        description=__doc__.split("\n")[0],
        epilog="minipallas-difftest fuzz --help: the fuzzer's options",
    )
    parser.add_argument("files", nargs="+", type=Path, help="Python files defining Case objects")
    parser.add_argument("-k", dest="keyword", help="only cases whose name contains this")
    parser.add_argument(
        "--show",
        action="store_true",
        help="print unexpected cases in full (with --pass-pipeline: every case, with the IR "
        "after the pipeline)",
    )
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="cpu",
        help="tpu: add the TPU ways (without a TPU: libtpu's compile of both sides)",
    )
    parser.add_argument(
        "--devices",
        type=int,
        default=0,
        help="how many CPU devices jax sees, for cases whose shard_map spans several (set "
        "before the files run)",
    )
    parser.add_argument(
        "--upstream-seconds",
        type=float,
        default=UPSTREAM_SECONDS,
        help="the time box of each upstream run of a case that spans devices: a run that "
        "outlives it is the finding upstream-hangs",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.devices:
        use_cpu_devices(args.devices)
    return main_with_passes(
        parser.prog,
        args,
        lambda passes: run_files(
            args.files,
            args.keyword,
            args.show,
            args.device,
            passes or _for_patterns(),
            args.upstream_seconds,
        ),  # fmt: skip
    )


def _for_patterns() -> str:
    """``cleanup`` when the ``--load`` files register ``@pattern`` rewrites and no pipeline is
    given: every cleanup applies them, and as a pipeline they are counted and blamed."""
    loaded = any(getattr(f, "__module__", None) == LOADED for fns in PATTERNS.values() for f in fns)
    if loaded:
        print("minipallas-difftest: the --load files' @pattern rewrites run as --pass-pipeline="
              "cleanup", file=sys.stderr)  # fmt: skip
    return "cleanup" if loaded else ""


if __name__ == "__main__":
    sys.exit(main())
