"""``make fuzz-tpu``: random kernels on a TPU, minipallas's Mosaic module against upstream's.

Each kernel is ``random_kernel`` made Mosaic-legal (``tpu_sized``: blocks tiled (16, 128),
outputs written rather than accumulated into), with inputs from its seed, written once for
both sides (``fuzz_kernels.upstream_call``). Two modes:

1. ``--aot`` (any machine; CI runs a few seeds): minipallas's module and upstream's, each
   compiled ahead of time by libtpu for a v5e. A kernel one side compiles and the other
   refuses is a finding (``minipallas-refuses`` / ``beyond-upstream``); both refusing is
   counted, not a finding.
2. on the chip (the default; needs a TPU): ``difftest.run(case, device="tpu", compile=False)``:
   minipallas's module against upstream's bit for bit on the elements the kernel defines, and
   each TPU way against the reference interpreter within the chip's numerics envelope
   (``minipallas.difftest.tpu``). The verdict's kind is the finding's class.

A finding is shrunk: each simplification of its spec (one option back to its plainest value,
a grid axis of size 1, one input fewer) that keeps the same class is kept, until none does;
the smallest spec is printed. The summary gives kernels per second and findings by class.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import jax

from minipallas.difftest.fuzz_kernels import upstream_call
from minipallas.difftest.harness import run
from minipallas.difftest.mosaic import UpstreamError, upstream_mosaic
from minipallas.difftest.report import Case
from minipallas.difftest.tpu import evaluate, upstream_kernel
from minipallas.generate.choices import RandomChoices
from minipallas.generate.kernels import (
    KernelSpec,
    kernel_inputs,
    minipallas_call,
    random_kernel,
    tpu_sized,
)
from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.tpu import compile_check
from minipallas.progress import Progress, print_summary
from minipallas.tpu import VMEM

GOOD = ("agree", "both-refuse")


@dataclass
class Summary:
    kernels: int = 0
    classes: Counter = field(default_factory=Counter)  # verdict kind -> kernels
    findings: list[tuple[str, KernelSpec, str]] = field(default_factory=list)


def kernel(rng: random.Random) -> tuple[KernelSpec, int]:
    """The next kernel of a campaign, and its inputs' seed."""
    return tpu_sized(random_kernel(RandomChoices(rng))), rng.randrange(2**16)


def aot_verdict(spec: KernelSpec, seed: int) -> tuple[str, str]:
    """Both modules compiled by libtpu for a v5e (mode 1): the class and why."""
    args = kernel_inputs(spec, seed)
    try:
        compile_check(minipallas_call(spec).trace(*args, memory_space=VMEM))
        ours = None
    except MiniPallasError as e:
        ours = str(e).splitlines()[0]
    jaxpr = jax.make_jaxpr(upstream_call(spec))(*args)
    lowered_for_chip = lambda *xs: evaluate(jaxpr.jaxpr, jaxpr.consts, xs, upstream_kernel)  # noqa: E731
    try:
        upstream_mosaic(lowered_for_chip, *args)
        theirs = None
    except UpstreamError as e:
        theirs = str(e).splitlines()[0]
    if ours and theirs:
        return "both-refuse", f"minipallas: {ours}; upstream: {theirs}"
    if ours:
        return "minipallas-refuses", ours
    return ("beyond-upstream", theirs) if theirs else ("agree", "")


def chip_verdict(spec: KernelSpec, seed: int) -> tuple[str, str]:
    """The difftest's TPU ways (mode 2): the verdict's kind and message."""
    case = Case(f"fuzz-tpu {seed}", upstream_call(spec), tuple(kernel_inputs(spec, seed)))
    verdict = run(case, compile=False, device="tpu").tpu
    return verdict.kind, verdict.message


def simpler(spec: KernelSpec) -> Iterator[KernelSpec]:
    """Specs one step plainer than ``spec`` (module doc)."""
    plain = {
        "scratch": None, "reduce": None, "inner_loop": False, "staged": False,
        "branch_axis": None, "dtype": "float32",
    }  # fmt: skip
    for name, value in plain.items():
        if getattr(spec, name) != value:
            yield dataclasses.replace(spec, **{name: value})
    for axis, n in enumerate(spec.grid):
        if n > 1:
            yield dataclasses.replace(spec, grid=(*spec.grid[:axis], 1, *spec.grid[axis + 1 :]))
    if len(spec.inputs) > 1:
        yield dataclasses.replace(spec, inputs=spec.inputs[:1])


def shrink(
    spec: KernelSpec, seed: int, kind: str, verdict: Callable[[KernelSpec, int], tuple[str, str]]
) -> KernelSpec:
    """The plainest spec reached by steps that keep the finding's class."""
    progressed = True
    while progressed:
        progressed = False
        for candidate in simpler(spec):
            try:
                same = verdict(candidate, seed)[0] == kind
            except Exception:  # a simplification that breaks the harness is not kept
                same = False
            if same:
                spec, progressed = candidate, True
                break
    return spec


def campaign(
    count: int,
    seconds: float,
    seed: int,
    verdict: Callable[[KernelSpec, int], tuple[str, str]],
    out: object = sys.stdout,
    progress: Progress | None = None,
) -> Summary:
    rng = random.Random(seed)
    summary = Summary()
    deadline = time.monotonic() + seconds
    while summary.kernels < count and time.monotonic() < deadline:
        spec, inputs_seed = kernel(rng)
        kind, why = verdict(spec, inputs_seed)
        summary.kernels += 1
        summary.classes[kind] += 1
        if kind not in GOOD:
            small = shrink(spec, inputs_seed, kind, verdict)
            summary.findings.append((kind, small, why))
            print(f"FINDING {kind} (inputs seed {inputs_seed}): {why}", file=out)
            print(f"  shrunk: {small.describe()}", file=out)
        if progress is not None:
            progress.update(findings=len(summary.findings))
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="kernels to check")
    parser.add_argument("--seconds", type=float, default=600, help="stop after this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--aot", action="store_true", help="compile both sides only (no chip)")
    args = parser.parse_args(argv)
    verdict = aot_verdict if args.aot else chip_verdict
    start = time.monotonic()
    with Progress("fuzz-tpu", args.count, args.seconds, unit="kernel") as bar:
        s = campaign(args.count, args.seconds, args.seed, verdict, progress=bar)
    elapsed = time.monotonic() - start
    mode = "ahead of time (libtpu, v5e)" if args.aot else "on the chip"
    print(f"{s.kernels} kernels {mode}, {len(s.findings)} findings, {s.kernels / elapsed:.2f}/s")
    rows = {"kernels": s.kernels, **{f"class {k}": n for k, n in sorted(s.classes.items())}}
    print_summary(f"fuzz-tpu, seed {args.seed}, {mode}, {elapsed:.1f} s", rows)
    return 1 if s.findings else 0


if __name__ == "__main__":
    sys.exit(main())
