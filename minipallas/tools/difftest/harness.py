"""The harness: run one program upstream and through minipallas, compare, report, classify.

A ``Case`` is a JAX function over refs and arrays plus its inputs (refs wrapped in ``ref``).
``run(case)`` computes the case's outputs (its results, then the final value of each ref
input, in order) every way there is:

1. ``upstream``: ``jax.make_jaxpr`` with ``AbstractRef`` inputs, upstream's
   ``discharge_state``, then ``jax.core.eval_jaxpr`` of the discharged program (under
   ``jax.jit``: eager evaluation has no rule for Pallas's ``run_scoped``);
2. ``interpret``: the jaxpr imported with ``from_jaxpr``, run by minipallas's reference
   interpreter on copies of the inputs (refs mutated in place);
3. ``discharge``: minipallas's ``discharge`` of the import, interpreted;
4. ``compile``: the import through ``minipallas.compile`` (lowered to StableHLO, run by XLA);
5. ``reference``: when the case carries a minipallas ``Function`` meant to be the same program
   (the fuzzer's generated program), that function interpreted;
6. a case whose ``shard_map`` spans several devices runs its own ways instead
   (``devices``): ``upstream`` is upstream's TPU interpret mode in a worker process,
   time-boxed, run twice and then with its race detector; minipallas's ways are the simulator
   under several schedules and the kernel compiled to XLA collectives (``on-devices``);
7. with ``device="tpu"``: ``upstream-tpu``, ``tpu`` and ``xla-tpu`` on the chip, judged apart
   (``tpu``: bit for bit between the two Pallas lowerings, within the chip's envelope of the
   interpreter). On a machine without a TPU, libtpu compiles both sides ahead of time for a
   v5e instead (``checks.aot``), and the verdict says the chip ways did not run.

A case's pipeline (``Case.passes``) runs in some of these ways, on the case's kernels or on its
program after discharge and cleanup, and a finding it causes names the pass
(``user_pipeline``).

Every TPU ``pallas_call`` of the program is also checked for what the chip would do with it
(``checks``: blocks outside their arrays, undefined memory read, async copies misused, hangs,
races among cores, int32 wrap; with ``device="tpu"``, the compiler's refusal): a bug found
makes the finding ``kernel-bug``, and keeps the kernel off the chip.

The report names the machine (``machine``: the CPU that ran the XLA ways, and what the
envelope assumed of it). It then compares every way with ``interpret``
(``report.first_difference``: bit for bit, or within the numerics envelope for XLA's floats)
and classifies the result (``classify``) into the ``Report``. The harness is the top of the
difftest: it imports the classifier, which imports the report and the bisect, which import the
envelope and ``outputs``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

import minipallas
from minipallas.ir.core import Function
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.interpret import interpret
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_discharge, state_types
from minipallas.lowering.runtime.compiled import compile as compile_fn
from minipallas.passes.pipeline import run as run_pipeline
from minipallas.tools.difftest import user_pipeline
from minipallas.tools.difftest.checks.aot import compile_ahead, compile_bug
from minipallas.tools.difftest.checks.program import program_bugs
from minipallas.tools.difftest.classify import classify
from minipallas.tools.difftest.devices import UPSTREAM_SECONDS, run_ways, spanned
from minipallas.tools.difftest.outputs import RefArg, initial, interpret_outputs
from minipallas.tools.difftest.report import Case, Outcome, Report, first_difference, timed
from minipallas.tools.difftest.tpu import TpuVerdict, chip_present, run_tpu_ways
from minipallas.tools.envelope.machine import here

DEVICES = ("cpu", "tpu")
HALTS = ("out-of-bounds", "semaphore", "overflow")  # bugs that may halt or hang the chip


class Disagreement(AssertionError):
    """``check`` found a difference (or a crash); ``report`` holds the details."""

    def __init__(self, report: Report) -> None:
        super().__init__(report.text())
        self.report = report


# -- running each way ----------------------------------------------------------------------


def abstract(args: Sequence[Any]) -> list[Any]:
    """The abstract inputs upstream traces with: ``AbstractRef`` s and shape structs."""
    out = []
    for a in args:
        if isinstance(a, RefArg):
            out.append(state_types.AbstractRef(jax_core.ShapedArray(a.value.shape, a.value.dtype)))
        else:
            out.append(jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype))
    return out


def run_upstream(jaxpr: Any, args: Sequence[Any], outcome: Outcome) -> None:  # noqa: ANN401
    """Upstream's discharge and evaluation of ``jaxpr`` on ``args`` into ``outcome``."""
    closed = timed("discharge", lambda: state_discharge.discharge_state(jaxpr), outcome)
    if closed is None:
        return

    def evaluate(*xs: Any) -> Any:  # noqa: ANN401
        return jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *xs)

    cpu = jax.devices("cpu")[0]

    def go() -> list[np.ndarray]:
        with jax.default_device(cpu):
            return [np.asarray(x) for x in jax.jit(evaluate)(*initial(args))]

    outcome.outputs = timed("eval", go, outcome)


def run_minipallas(report: Report, args: Sequence[Any], compile: bool = True) -> None:  # noqa: A002
    """The ``interpret``, ``discharge`` and (with ``compile``) ``compile`` ways, on the
    imported program."""
    interp = report.outcomes["interpret"] = Outcome("interpret")
    fn = timed("import", lambda: minipallas.from_jaxpr(report.jaxpr), interp)
    if fn is None:
        for way in ("discharge", "compile") if compile else ("discharge",):
            report.outcomes[way] = Outcome(way, error=interp.error, stage="import")
        return
    report.program = fn
    mode = report.case.collectives
    interp.outputs = timed(
        "interpret", lambda: interpret_outputs(fn, args, collectives=mode), interp
    )

    report.pipeline_ways = user_pipeline.ways(report)
    on_kernels = report.pipeline_ways == user_pipeline.KERNEL_WAYS
    dis = report.outcomes["discharge"] = Outcome("discharge")
    source = fn
    if on_kernels:  # the import with the case's pipeline on each kernel
        source = timed("passes", lambda: user_pipeline.import_with_pipeline(report), dis)
        report.pipeline_program = source
    pure = None
    if source is not None:
        discharge = f"discharge{{collectives={mode}}}"
        pure = timed("discharge", lambda: run_pipeline(source, discharge), dis)
    on_program = bool(report.pipeline_ways) and not on_kernels
    if on_program and pure is not None:  # the program after discharge and cleanup
        pure = timed("passes", lambda: user_pipeline.after_cleanup(report, pure), dis)
        report.pipeline_program = pure
    if pure is not None:
        arrays = [a.value if isinstance(a, RefArg) else a for a in args]
        dis.outputs = timed("interpret", lambda: _pure(pure, arrays), dis)
    comp = Outcome("compile")
    if source is None or (on_program and pure is None):  # the pipeline failed
        comp.error, comp.stage = dis.error, dis.stage
    # compile discharges with upstream's rules; with a pipeline on the program, it compiles it
    program = source if mode == "reject" and not on_program else pure
    if report.case.passes:
        report.pipeline_ir = _pipeline_ir(report)
    if not compile:
        return

    report.outcomes["compile"] = comp
    plant = report.case.plant
    report.compiled = program if plant is None else timed("plant", lambda: plant(program), comp)
    compiled = None
    if report.compiled is not None:
        compiled = timed("compile", lambda: compile_fn(report.compiled), comp)
    if compiled is not None:
        comp.outputs = timed("run", lambda: list(compiled(*initial(args))), comp)


def _pipeline_ir(report: Report) -> str:
    try:
        return user_pipeline.pipeline_ir(report)
    except Exception as e:  # the pipeline's failure is the ways' to report
        return f"(the pipeline failed: {type(e).__name__}: {e})"


def _pure(fn: Function, arrays: Sequence[Any]) -> list[np.ndarray]:
    return list(interpret(fn, *initial(arrays)))


def _labels(case: Case, n_outputs: int) -> list[str]:
    refs = [i for i, a in enumerate(case.args) if isinstance(a, RefArg)]
    n_results = n_outputs - len(refs)
    return [f"result {i}" for i in range(n_results)] + [f"final value of ref {i}" for i in refs]


# -- the harness ---------------------------------------------------------------------------


def run(
    case: Case,
    *,
    compile: bool = True,  # noqa: A002
    device: str = "cpu",
    upstream_seconds: float = UPSTREAM_SECONDS,
) -> Report:
    """Runs ``case`` every way, compares, and classifies (see the module docstring).

    ``compile=False`` skips the ``compile`` way (the fuzzer's fast mode). ``device="tpu"`` adds
    the TPU ways and their verdict, ``report.tpu`` (``minipallas.tools.difftest.tpu``); on a machine
    without a TPU, everything that needs no chip (module docstring). ``upstream_seconds``: the
    time box of each upstream run of a case that spans devices (``devices``).
    """
    if device not in DEVICES:
        raise MiniPallasError(
            f"device={device!r} is not a device the difftest runs on",
            fix=f"use one of {', '.join(map(repr, DEVICES))}",
        )
    report = Report(case, machine=here())
    up = report.outcomes["upstream"] = Outcome("upstream")
    report.jaxpr = timed("trace", lambda: jax.make_jaxpr(case.fn)(*abstract(case.args)), up)
    devices = spanned(report.jaxpr) if report.jaxpr is not None else 0
    if devices:  # upstream in a worker, time-boxed; minipallas's simulator (``devices``)
        run_ways(report, devices, upstream_seconds)
    elif report.jaxpr is not None:
        run_upstream(report.jaxpr, case.args, up)
        run_minipallas(report, case.args, compile)
    if case.reference is not None:
        ref_way = report.outcomes["reference"] = Outcome("reference")
        ref_way.outputs = timed(
            "interpret", lambda: interpret_outputs(case.reference, case.args), ref_way
        )
    counts = [len(o.outputs) for o in report.outcomes.values() if o.ok]
    report.labels = _labels(case, counts[0]) if counts else []
    report.difference = first_difference(report, case.ulps)
    chip = device == "tpu" and chip_present()
    refusals = None
    if devices:  # remote copies and semaphores are the simulator's to check, not one chip's
        report.check_notes.append("kernels that span devices: checked by the simulator")
        if device == "tpu":  # a one-chip v5e compile would refuse the mesh: no kernel bug
            report.check_notes.append("device='tpu': the TPU ways run one chip's kernels, not "
                                      "a case that spans devices")  # fmt: skip
    elif report.jaxpr is not None:
        run_checks(report)
        if device == "tpu" and not chip:
            refusals = compile_ahead(report)
            bug = compile_bug(refusals)
            report.kernel_bugs += [bug] if bug is not None else []
    report.finding = classify(report)
    if device == "tpu" and not devices:
        report.tpu = _tpu_verdict(report, chip, refusals)
    return report


def run_checks(report: Report) -> None:
    """The kernel checks of the case's program into ``report`` (``checks.program``)."""
    start = time.perf_counter()
    checked = program_bugs(report.jaxpr, report.case.args)
    report.kernel_bugs = checked.bugs
    report.check_notes += checked.notes  # after what the ways noted (``devices.compiled_way``)
    report.check_seconds = time.perf_counter() - start


def _tpu_verdict(report: Report, chip: bool, refusals: dict[str, str | None] | None) -> Any:  # noqa: ANN401
    """The chip ways' verdict, or why they did not run: a bug that may halt or hang the chip
    keeps the case off it (others garble values, which the verdict skips as undefined)."""
    blocking = [b for b in report.kernel_bugs if b.kind in HALTS and not b.latent]
    if blocking:
        return TpuVerdict("kernel-bug", f"not run on the chip: {blocking[0]}")
    if chip:
        run_tpu_ways(report)
        return report.tpu
    if refusals is None:
        return TpuVerdict("no-chip", "no TPU here, and libtpu is not installed: nothing ran")
    if refusals["minipallas"] is not None and refusals["upstream"] is None:
        message = f"minipallas's program for a v5e: {refusals['minipallas']}"
        return TpuVerdict("minipallas-refuses", message)
    return TpuVerdict("no-chip", "no TPU here: libtpu compiled both sides for a v5e; the chip "
                      "ways did not run")  # fmt: skip


def check(case: Case) -> Report:
    """``run(case)``; raises ``Disagreement`` unless every way agrees."""
    report = run(case)
    if not report.ok:
        raise Disagreement(report)
    return report
