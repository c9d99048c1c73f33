"""``python -m minipallas.tools.fuzz.kernels``: random kernels, minipallas against upstream.

Each kernel is drawn by ``minipallas.tools.generate.kernels.random_kernel`` and run three ways on
the same inputs: minipallas's CPU program (independent grid points batched where the plan
allows), minipallas's loop program (``kernels.programs.grid``), and upstream
``pallas_call(..., interpret=True)``. All three must agree bit for bit (the kernels use no
transcendental functions, and upstream's interpret mode is the reference). A disagreement is
printed with the kernel's description and the first differing element.

Some kernels also draw the parameters upstream's ops and block specs take
(``generate.kernel_params``: a dot's precision and product dtype, ``pl.reciprocal``'s
``approx``, a transcendental's ``accuracy``, ``pipeline_mode=pl.Buffered(n)``,
``pl.multiple_of`` in the body and in an index map, ``lax.mul``'s ``out_dtype``), so a
parameter one side drops is a disagreement the next time it is drawn. A kernel both sides
refuse agrees (``both-refuse``); one side refusing alone is a disagreement, but for
minipallas refusing ``accuracy=`` as upstream's Mosaic lowering does (``REFUSED``), where
upstream's interpret mode runs it. The approximate reciprocal off the chip is upstream's
stand-in: ``1 / x`` of ``x`` rounded to bfloat16, whose bfloat16 quotient minipallas keeps in
float32 as XLA:CPU does under ``jax.jit``; where only that differs from upstream rounded per
op, the kernel is checked against upstream's program with that quotient unrounded, and
counted as known. The summary gives, per parameter value, the kernels that drew it and their
verdicts (``difftest.coverage``).

Upstream's program is compiled as minipallas compiles its own: every bf16 op rounded to bf16
(``xla_allow_excess_precision=false``, ``lowering.xla_cpu.cpu_compile``). Under
``jax.jit``'s defaults XLA keeps chains of bf16 ops in f32, so upstream's jitted result may
differ from the same program rounded per op. And even with excess precision off, XLA:CPU
skips some bf16 roundings in upstream's program (for bf16 ``v = 0.69140625``,
``(v * 3).astype(f32) - v`` gives 1.3828125 there and 1.390625 rounded per op, as minipallas and
its reference interpreter compute it; minipallas's own loop programs can meet it too). Both are
counted in the summary as known differences (``KNOWN``), not disagreements; the second only
for kernels that round to bf16 (their dtype, or a dot's ``preferred_element_type``) whose
results (minipallas's and upstream's) all lie within 2 bf16 ulps of the reference
interpreter's: such kernels are checked to 2 ulps rather than to the bit.

The campaign runs until ``--count`` kernels or ``--seconds`` have passed and ends with a
summary: kernels checked, how many ran batched, disagreements, kernels/second. The exit code
is 1 if any kernel disagreed. A disagreement names its kernel and how to check it alone
again (``--seed S --skip N --count 1``, with the same ``--load`` and ``--pass-pipeline``).

``--load FILE.py`` and ``--pass-pipeline PIPE`` (``minipallas.tools.user_passes``) run a user's
pipeline on every kernel minipallas traces (``pallas_call(..., passes=PIPE)``: kernel passes
on the kernel, function passes on its body), so both of minipallas's ways run it. A
disagreement then names the pass after which those two ways' outputs first change
(``first_bad_pass``) and prints the kernel before and after it. The summary says how many
kernels each pass changed, and that a pass was never exercised when it changed none; kernels
are drawn so the user's passes rewrite them (``generate.directed_kernels``; ``--target-pass
NAME`` directs at one pass, ``none`` draws plain kernels).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import types
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.ir.errors import MiniPallasError
from minipallas.ir.interpret import interpret
from minipallas.kernels.programs.grid import grid_program
from minipallas.kernels.programs.vectorized_grid import vectorized_grid_plan
from minipallas.lowering.runtime import xla_cpu
from minipallas.lowering.runtime.compiled import compile as compile_fn
from minipallas.lowering.runtime.libtpu import quiet_libtpu
from minipallas.passes.pipeline import run as run_pipeline
from minipallas.tools.difftest.coverage import Coverage
from minipallas.tools.fuzz import loop
from minipallas.tools.generate import kernel_params
from minipallas.tools.generate.check import same_bits
from minipallas.tools.generate.directed_kernels import Director
from minipallas.tools.generate.kernels import (
    KernelSpec,
    Operand,
    kernel_inputs,
    minipallas_call,
    random_kernel,
)
from minipallas.tools.progress import Progress, campaign_parser, print_summary
from minipallas.tools.user_passes import (
    Blame,
    PassCoverage,
    first_bad_pass,
    pipeline_texts,
)

KNOWN = {
    "excess precision": "jax.jit's default keeps bf16 chains in f32",
    "dropped bf16 rounding": "XLA skips a bf16 rounding even with per-op rounding asked "
    "(every result within 2 bf16 ulps of minipallas's reference interpreter)",
    "xla rounds the reshaped program": "after --pass-pipeline XLA:CPU rounds the kernel's "
    "program otherwise (it folds a (x + 1) - 1 in one shape of the program and not in "
    "another), while the reference interpreter's values are the ones before the pipeline "
    "and the kernel without the pipeline agrees with upstream",
    "approx reciprocal in float32": "pl.reciprocal(approx=True) off the chip is upstream's "
    "bfloat16 quotient, which minipallas keeps in float32 as jax.jit's XLA:CPU does (upstream "
    "with that one quotient unrounded agrees bit for bit)",
    "accuracy refused": "minipallas refuses a transcendental's accuracy= as upstream's Mosaic "
    "lowering does (Not implemented: accuracy); upstream's interpret mode runs it on XLA:CPU",
}
# what minipallas refuses on every target, as upstream's Mosaic lowering: the spec drawing it
# and the refusal's words
REFUSED = {
    "accuracy": (lambda spec: spec.accuracy is not None, "Not implemented: accuracy"),
}


@dataclass
class Summary:
    kernels: int = 0
    batched: int = 0
    known: Counter = field(default_factory=Counter)  # KNOWN reason -> kernels
    disagreements: list[str] = field(default_factory=list)
    coverage: Coverage = field(default_factory=Coverage)  # parameters drawn, by verdict
    passes: PassCoverage | None = None  # with a pipeline: the kernels each pass changed


@dataclass
class Outcome:
    batched: bool  # whether minipallas ran the grid batched
    known: list[str]  # the KNOWN differences this kernel shows
    problem: str | None  # the disagreement, if any
    refusal: str | None = None  # "both-refuse", or how one side's refusal was judged

    @property
    def verdict(self) -> str:
        """The kernel's verdict, as the coverage table counts it: ``disagree``, the refusal,
        ``known`` (a KNOWN difference of minipallas's, not just upstream's jit default) or
        ``agree``."""
        if self.problem is not None:
            return "disagree"
        if self.refusal is not None:
            return self.refusal
        return "known" if set(self.known) - {"excess precision"} else "agree"


def upstream_call(spec: KernelSpec, stand_in: bool = False) -> Any:  # noqa: ANN401 - jitted
    """The kernel as upstream ``pl.pallas_call(..., interpret=True)``, jitted. ``stand_in``:
    ``pl.reciprocal(x, approx=True)`` written out as XLA:CPU computes upstream's rule for it
    under ``jax.jit`` (``_stand_in``)."""
    ns = types.SimpleNamespace(
        program_id=pl.program_id,
        when=pl.when,
        fori_loop=jax.lax.fori_loop,
        run_scoped=pl.run_scoped,
        VMEM=pltpu.VMEM,
        zeros=jnp.zeros,
        float32=jnp.float32,
        bfloat16=jnp.bfloat16,
        dot=jnp.dot,
        precision=lambda name: jax.lax.Precision[name],
        reciprocal=_stand_in if stand_in else pl.reciprocal,
        multiple_of=pl.multiple_of,
        mul=lambda x, y, out: jax.lax.mul(x, y, out_dtype=out),
        accurate=lambda name, x: getattr(jax.lax, name)(x, accuracy=jax.lax.AccuracyMode.HIGHEST),
        Buffered=pl.Buffered,
    )

    def block_spec(o: Operand, k: int) -> pl.BlockSpec:
        mode = kernel_params.pipeline_mode(spec, ns, k)
        return pl.BlockSpec(spec.block, o.index_map.over(ns), **mode)

    call = pl.pallas_call(
        spec.body(ns),
        out_shape=jax.ShapeDtypeStruct(spec.output.shape, jnp.dtype(spec.dtype)),
        grid=spec.grid,
        in_specs=[block_spec(o, k) for k, o in enumerate(spec.inputs)],
        out_specs=block_spec(spec.output, -1),
        scratch_shapes=[pltpu.VMEM(spec.ref_shape, jnp.dtype(spec.dtype))] if spec.scratch else [],
        interpret=True,
    )
    return jax.jit(call)


def _stand_in(x: Any, approx: bool = False) -> Any:  # noqa: ANN401
    """Upstream's off-chip rule for ``pl.reciprocal`` writes ``1 / x`` in bfloat16, widened;
    under ``jax.jit`` XLA:CPU keeps that quotient in float32, and minipallas (its interpreter,
    its CPU program) computes it so: ``1 / x`` of ``x`` rounded to bfloat16, in float32."""
    return 1.0 / x.astype(jnp.bfloat16).astype(x.dtype) if approx else pl.reciprocal(x)


def _per_op(jitted: Any, args: Sequence[np.ndarray]) -> np.ndarray:  # noqa: ANN401
    """Upstream's program compiled as minipallas compiles its own: every bf16 op rounded."""
    return xla_cpu.cpu_execute(xla_cpu.cpu_compile(jitted.lower(*args).as_text()), args)[0]


def check(spec: KernelSpec, seed: int, passes: str = "") -> Outcome:
    """One kernel three ways (module doc), ``passes`` run on minipallas's kernel."""
    args = kernel_inputs(spec, seed)
    call = minipallas_call(spec, passes=passes)
    jitted = upstream_call(spec)
    try:
        kernel = call.trace(*args)
        ours = None
    except MiniPallasError as e:
        ours = e
    try:
        expected = _per_op(jitted, args)
        theirs = None
    except Exception as e:  # upstream's refusal, whatever its class
        theirs = e
    if ours is not None or theirs is not None:
        return _refusal(spec, ours, theirs)
    batched = vectorized_grid_plan(kernel) is not None
    known = [] if same_bits(np.asarray(jitted(*args)), expected) else ["excess precision"]
    loops = grid_program(kernel)
    ways = {"cpu program": call(*args), "loop program": compile_fn(loops)(*args)[0]}
    wrong = [way for way, got in ways.items() if not same_bits(got, expected)]
    if not wrong:
        return Outcome(batched, known, None)
    if _computes_in_bf16(spec) and _rounding_apart(ways, expected, loops, args):
        return Outcome(batched, [*known, "dropped bf16 rounding"], None)
    if spec.reciprocal == "approx":
        stand_in = _per_op(upstream_call(spec, stand_in=True), args)
        if all(same_bits(got, stand_in) for got in ways.values()):
            return Outcome(batched, [*known, "approx reciprocal in float32"], None)
    got = ways[wrong[0]]
    flat_got, flat_expected = np.ravel(got), np.ravel(expected)
    first = next(k for k in range(flat_got.size) if not same_bits(flat_got[k], flat_expected[k]))
    problem = (
        f"{wrong[0]} differs from upstream at flat index {first}: "
        f"{flat_got[first]} vs {flat_expected[first]}\n  {spec.describe()}"
    )
    if not passes:
        return Outcome(batched, known, problem)
    blame = pipeline_blame(spec, args, passes)
    if blame is None and check(spec, seed).problem is None:
        return Outcome(batched, [*known, "xla rounds the reshaped program"], None)
    return Outcome(batched, known, problem if blame is None else f"{problem}\n{blame.text()}")


def _refusal(spec: KernelSpec, ours: Exception | None, theirs: Exception | None) -> Outcome:
    """A kernel one side or both refused: both is agreement; minipallas refusing a
    transcendental's ``accuracy=`` as upstream's Mosaic lowering does (``REFUSED``) is known;
    one side alone otherwise is a disagreement."""

    def why(e: Exception) -> str:
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200]}"

    if ours is not None and theirs is not None:
        return Outcome(False, [], None, "both-refuse")
    if ours is not None:
        if any(spec_has(spec) and text in str(ours) for spec_has, text in REFUSED.values()):
            return Outcome(False, ["accuracy refused"], None, "refused-as-on-the-tpu")
        problem = f"minipallas refuses where upstream runs: {why(ours)}"
    else:
        problem = f"upstream refuses where minipallas runs: {why(theirs)}"
    return Outcome(False, [], f"{problem}\n  {spec.describe()}", "disagree")


def pipeline_blame(spec: KernelSpec, args: Sequence[np.ndarray], passes: str) -> Blame | None:
    """The pass of ``passes`` after which the kernel's values first change
    (``user_passes.first_bad_pass``); None when none changes them. The values are the
    reference interpreter's run of the loop program: what the kernel means. XLA may round the
    same meaning differently once a pass reshapes the program (a fused grid step's ``(x + 1)
    - 1`` kept, where the loop as written had it simplified): that is XLA's, not the pass's.
    None too for a kernel minipallas refuses (a transcendental's ``accuracy=``): no pass runs."""
    try:
        plain = minipallas_call(spec).trace(*args)
    except MiniPallasError:
        return None

    def outputs(prefix: str) -> list[np.ndarray]:
        kernel = minipallas_call(spec, passes=prefix).trace(*args)
        return [np.asarray(interpret(grid_program(kernel), *args)[0])]

    def differs(want: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> str | None:
        if same_bits(want[0], got[0]):
            return None
        return "the reference interpreter's values differ from those before the pipeline"

    return first_bad_pass(
        passes, outputs, lambda p: str(run_pipeline(plain, p, verify=True)), differs
    )


def kernel_texts(spec: KernelSpec, seed: int, passes: str) -> list[str]:
    """The kernel minipallas traces for ``spec`` (inputs from ``seed``) before ``passes`` and
    after each of its passes (``user_passes.pipeline_texts``), for ``PassCoverage``; empty
    when minipallas refuses the kernel."""
    try:
        plain = minipallas_call(spec).trace(*kernel_inputs(spec, seed))
    except MiniPallasError:
        return []
    return pipeline_texts(plain, passes)


def _computes_in_bf16(spec: KernelSpec) -> bool:
    """Whether some op of the kernel rounds to bf16: its dtype, or its dot's product
    (``preferred_element_type=bfloat16`` on float32 operands, where XLA:CPU may skip the
    rounding of the product too: fuzz seed 50, kernels 171 and 177)."""
    return "bfloat16" in (spec.dtype, spec.dot and spec.dot.out)


def _rounding_apart(
    ways: dict[str, np.ndarray], expected: np.ndarray, program: Any, args: Sequence[np.ndarray]
) -> bool:
    """Whether the difference is bf16 roundings XLA skipped: minipallas's programs and
    upstream's all lie within 2 bf16 ulps of minipallas's reference interpreter (per-op
    rounding). XLA skips such roundings in minipallas's loop programs too, not always the
    same ones as in upstream's (``test_minipallas_findings`` keeps a reduced case); a wrong
    block or index shows as far more than 2 ulps."""

    reference = np.asarray(interpret(program, *args)[0], np.float32)
    return all(
        _within_2_ulps(reference, np.asarray(x, np.float32)) for x in (*ways.values(), expected)
    )


def _within_2_ulps(reference: np.ndarray, other: np.ndarray) -> bool:
    finite = np.isfinite(reference) & np.isfinite(other)
    if not np.array_equal(reference[~finite], other[~finite], equal_nan=True):
        return False
    ref = reference[finite]
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(ref), 2.0**-126))) - 7)
    return bool(np.all(np.abs(ref - other[finite]) <= 2 * ulp))


def campaign(
    count: int,
    seconds: float,
    seed: int,
    out: TextIO | None = None,
    progress: Progress | None = None,
    passes: str = "",
    targets: Sequence[str] = (),
    skip: int = 0,
) -> Summary:
    """Up to ``count`` kernels for ``seconds``, ``passes`` run on minipallas's side, the kernels
    drawn so the passes ``targets`` rewrite them (``generate.directed_kernels``), from kernel
    ``skip`` of the campaign on (those before it drawn, not checked)."""
    rng, params = random.Random(seed), kernel_params.generator(seed)
    director = Director(lambda c, d: random_kernel(c, params=d), passes, targets)
    for _ in range(skip):
        director.next(rng, params)
        rng.randrange(2**16)
    summary = Summary(passes=PassCoverage(passes, "kernels") if passes else None)
    deadline = time.monotonic() + seconds
    while summary.kernels < count and time.monotonic() < deadline:
        drawn = director.next(rng, params)
        spec, seed_of_inputs = drawn.spec, rng.randrange(2**16)
        index = skip + summary.kernels
        outcome = check(spec, seed_of_inputs, passes)
        if summary.passes is not None:
            texts = drawn.texts
            summary.passes.record(
                kernel_texts(spec, seed_of_inputs, passes) if texts is None else texts
            )
        summary.kernels += 1
        summary.batched += outcome.batched
        summary.known.update(outcome.known)
        summary.coverage.add(kernel_params.parameters(spec), outcome.verdict)
        if outcome.problem:
            summary.disagreements.append(outcome.problem)
            again = f"kernel {index}; again: --seed {seed} --skip {index} --count 1"
            print(f"DISAGREEMENT ({again}): {outcome.problem}", file=out or sys.stdout)
        if progress is not None:
            progress.update(disagreements=len(summary.disagreements))
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    quiet_libtpu()  # no chip: libtpu, loaded at jax's first device query, logs no errors
    parser = campaign_parser("minipallas.tools.fuzz.kernels", __doc__.splitlines()[0])
    parser.add_argument(
        "--skip", type=int, default=0, help="start at kernel N of the campaign (a disagreement's)"
    )
    return loop.main(parser, argv, _main, name="fuzz-kernels")


def _main(args: argparse.Namespace, passes: str, targets: list[str]) -> int:
    if targets:
        print(f"pass-directed: {', '.join(targets)}")
    start = time.monotonic()
    with Progress("fuzz-kernels", args.count, args.seconds, unit="kernel") as bar:
        s = campaign(args.count, args.seconds, args.seed, progress=bar, passes=passes,
                     targets=targets, skip=args.skip)  # fmt: skip
    elapsed = time.monotonic() - start
    print(
        f"{s.kernels} kernels ({s.batched} ran batched), {len(s.disagreements)} disagreements, "
        f"{s.kernels / elapsed:.1f} kernels/s"
    )
    for reason, n in sorted(s.known.items()):
        print(f"  known, not a disagreement: {n} kernels where {KNOWN[reason]}")
    for line in s.passes.lines() if s.passes else ():
        print(line)
    s.coverage.report()
    rows = {"kernels": s.kernels, "ran batched": s.batched, "disagreements": len(s.disagreements)}
    rows |= {f"known: {reason}": n for reason, n in sorted(s.known.items())}
    rows |= s.coverage.rows()
    print_summary(f"fuzz-kernels, seed {args.seed}, {elapsed:.1f} s", rows)
    return 1 if s.disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
