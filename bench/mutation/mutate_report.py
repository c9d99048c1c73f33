"""``make mutate``'s report: a campaign's verdicts (``mutate.Verdict``) as the table it prints
and the Markdown it writes to ``mutate_results.md``: the kill rate over the mutants that
change semantics, overall, by the corpora alone and per category, the survivors and the
equivalent mutants."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench.mutation.mutants import CATEGORIES

if TYPE_CHECKING:
    from bench.mutation.mutate import Verdict


def verdict_text(v: Verdict) -> str:
    if v.mutant is not None and v.mutant.equivalent:
        return "equivalent" if v.killed_by is None else f"equivalent, yet killed: {v.killed_by}"
    return "SURVIVED" if v.killed_by is None else f"killed: {v.killed_by}"


def table(verdicts: Sequence[Verdict]) -> list[tuple[str, ...]]:
    rows = [("mutant", "category", "where", "verdict", "detail", "s")]
    for v in verdicts:
        m = v.mutant
        rows.append((v.name, m.category, f"{m.file}:{v.line}", verdict_text(v),
                     v.detail, f"{v.seconds:.0f}"))  # fmt: skip
    return rows


def summary(verdicts: Sequence[Verdict]) -> dict:
    """Kill counts over the mutants that change semantics, overall and per category."""
    real = [v for v in verdicts if not v.mutant.equivalent]
    per = {}
    for category in CATEGORIES:
        group = [v for v in real if v.mutant.category == category]
        if group:
            per[category] = (sum(v.killed_by is not None for v in group), len(group))
    return {
        "total": len(verdicts),
        "equivalent": len(verdicts) - len(real),
        "semantic": len(real),
        "killed": sum(v.killed_by is not None for v in real),
        "by_corpus": sum(v.by_corpus for v in real),
        "per_category": per,
        "survivors": [v for v in real if v.killed_by is None],
        "equivalents": [v for v in verdicts if v.mutant.equivalent],
    }


def _percent(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / max(b, 1):.1f}%)"


def report_text(
    verdicts: Sequence[Verdict], control: Verdict, wall: float, args: argparse.Namespace
) -> str:  # noqa: E501
    """The results as Markdown (also readable as plain text)."""
    s = summary(verdicts)
    counts = ", ".join(f"{k} {n}" for k, n in control.counts.items())
    fuzz = f"fuzz {args.fuzz_seconds:g} s per fuzzer for the control"
    if args.programs:
        fuzz = "fuzz program counts fixed by --programs"
    out = [
        "# Mutation testing of the difftest harness (`make mutate`)",
        "",
        f"{s['total']} mutants ({s['equivalent']} marked equivalent), {fuzz} "
        f"({counts} programs; each mutant runs the same programs), "
        f"{args.jobs} jobs, wall time {wall / 60:.1f} min.",
        "",
        f"- killed, corpus and fuzz: **{_percent(s['killed'], s['semantic'])}**",
        f"- killed by the corpora and front-end checks alone (or a crash before the fuzzers): "
        f"{_percent(s['by_corpus'], s['semantic'])}",
        "",
        "| category | killed |",
        "|---|---|",
        *(f"| {c} | {k}/{n} |" for c, (k, n) in s["per_category"].items()),
        "",
        "Survivors:" if s["survivors"] else "No survivors.",
        *(
            f"- `{v.name}` ({v.mutant.file}:{v.line}): {v.mutant.description}"
            + (
                f" (unreachable from jaxprs: {v.mutant.unreachable})"
                if v.mutant.unreachable
                else ""
            )
            for v in s["survivors"]
        ),  # fmt: skip
        "",
    ]
    if s["equivalents"]:
        out += ["Equivalent (not counted):", *(f"- `{v.name}`: {v.mutant.equivalent}"
                                               for v in s["equivalents"]), ""]  # fmt: skip
    notes = sorted({n for v in (control, *verdicts) for n in v.notes})
    out += [f"Note: {n}" for n in notes] + ([""] if notes else [])
    rows = table(verdicts)
    out += ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]]
    return "\n".join(out) + "\n"
