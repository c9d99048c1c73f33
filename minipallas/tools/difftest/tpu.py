"""The difftest on a TPU: upstream's kernels and minipallas's, run by one compiler on one chip.

``run(case, device="tpu")`` adds three ways to the CPU ones, each a ``jax.jit`` on the chip:

1. ``upstream-tpu``: upstream's own program: its ``discharge_state`` of the case, every
   ``pallas_call`` through upstream's Mosaic lowering (``interpret=False``, whatever the case
   said);
2. ``tpu``: the same program with every ``pallas_call`` replaced by minipallas's Mosaic module
   for its kernel (``kernel_from_eqn``, the ``tpu`` target), in the same ``tpu_custom_call``
   with upstream's compiler params. Nothing else differs from ``upstream-tpu``, so a bit that
   differs is a difference in what the two lowerings mean;
3. ``xla-tpu``: minipallas's import, discharged, as jax ops (``to_jax``) on XLA:TPU.

A case's pipeline (``Case.passes``, ``user_pipeline``) runs on each kernel of the ``tpu`` way
before its Mosaic module is made, and ``xla-tpu`` runs the program it made.

The verdict (``TpuVerdict``, ``judge``):
- ``tpu`` against ``upstream-tpu``: bit for bit (NaN equals NaN) on the elements the kernel
  defines. When the case's program is one ``pallas_call``, its outputs' undefined elements
  (masked-out lanes, unwritten rows, what garbage feeds: ``undefined``) are skipped, and
  counted; a difference is ``lowering-difference``, with the two modules' structural
  differences (``mosaic.compare``) as the first place to look;
- every TPU way against the reference interpreter: within the chip's numerics envelope
  (``minipallas/tools/envelope/chips.py``: its transcendentals, its one-pass bfloat16 f32 dots, its
  sum orders), on defined elements; outside, the verdict names the way. A case at
  ``optimize="fast"`` (a pipeline that reassociates) skips the bit comparison: its ``tpu`` and
  ``xla-tpu`` ways are judged by the envelope with sum orders free across grid steps;
- upstream refusing what minipallas runs (within the envelope) is ``beyond-upstream``;
- a case whose kernels the checks (``checks``) find a bug in (a block past its array halts
  the chip; a semaphore waited twice hangs it; undefined memory garbles it) is not run on the
  chip: ``kernel-bug``, with the bug.
On a machine without a TPU the harness runs what needs no chip instead (``checks.aot``:
libtpu compiles both sides' programs for a v5e): ``no-chip``, or ``minipallas-refuses``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from minipallas.interop.exporter.engine import to_jax
from minipallas.interop.importer.rules.kernel_call import kernel_from_eqn
from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_discharge
from minipallas.lowering.runtime.libtpu import tpu_chips
from minipallas.lowering.tpu import lower_to_mosaic
from minipallas.passes.kernel.reassociate import reassociates
from minipallas.passes.pipeline import run as run_pipeline
from minipallas.platforms.mesh_tpu import (
    evaluate_kernels,
    run_mesh_eqn,
    run_pallas_call_eqn,
)
from minipallas.tools.difftest.checks.program import only_kernel
from minipallas.tools.difftest.mosaic import compare as compare_modules
from minipallas.tools.difftest.mosaic import upstream_mosaic
from minipallas.tools.difftest.outputs import initial
from minipallas.tools.difftest.report import Outcome, Report, compare, timed
from minipallas.tools.difftest.undefined import undefined
from minipallas.tools.envelope.chips import TPU_V5E, Chip
from minipallas.tools.envelope.measure import Envelope, envelope, is_float
from minipallas.tpu import VMEM

TPU_WAYS = ("upstream-tpu", "tpu", "xla-tpu")
KERNELS = ("pallas_call", "mpmd_map")  # the equations ``evaluate`` hands its kernel rule
KernelRule = Callable[[jax_core.JaxprEqn, Sequence[Any]], Sequence[Any]]


class NoTpuError(MiniPallasError):
    """``device="tpu"`` on a machine where jax sees no TPU."""


@dataclass
class TpuVerdict:
    """How the TPU ways compare: ``kind`` (``agree``, ``lowering-difference``,
    ``outside-chip-envelope``, ``beyond-upstream``, ``both-refuse``, ``error``; ``kernel-bug``:
    the checks found a bug that may halt, hang or garble the chip, so nothing ran there;
    ``no-chip``: no TPU here, so only libtpu's ahead-of-time compile of both sides ran, and
    ``minipallas-refuses`` when it refused minipallas's program where upstream's compiled), a
    line saying why, the undefined elements skipped, and module differences for a lowering
    difference."""

    kind: str
    message: str = ""
    undefined: int = 0
    module_differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.kind in ("agree", "beyond-upstream", "both-refuse", "kernel-bug", "no-chip")

    def __str__(self) -> str:
        skipped = f" ({self.undefined} undefined elements skipped)" if self.undefined else ""
        return f"{self.kind}{skipped}" + (f": {self.message}" if self.message else "")


def chip_present() -> bool:
    """Whether this machine has a TPU chip (read from its PCI devices: no runtime opened)."""
    return tpu_chips() > 0


def tpu_device() -> Any:
    try:
        return jax.devices("tpu")[0]
    except RuntimeError:
        raise NoTpuError(
            "device='tpu' runs the case on a TPU, and jax sees none on this machine",
            fix="run on a TPU machine (see the README's hardware check), or leave device='cpu'",
        ) from None


# -- the programs each way runs -------------------------------------------------------------


def evaluate(
    jaxpr: jax_core.Jaxpr, consts: Sequence[Any], args: Sequence[Any], kernel: KernelRule
) -> list[Any]:
    """``jaxpr`` on ``args`` (under a trace), every ``pallas_call`` and mesh kernel
    (``mpmd_map``: upstream's ``pl.kernel``) equation run by ``kernel``, ``jit`` calls inlined
    so the kernels inside them are found too."""
    return evaluate_kernels(jaxpr, consts, args, dict.fromkeys(KERNELS, kernel))


def upstream_kernel(eqn: jax_core.JaxprEqn, ins: Sequence[Any]) -> Sequence[Any]:
    """Upstream's ``pallas_call`` as it is, but through its Mosaic lowering."""
    return eqn.primitive.bind(*ins, **{**eqn.params, "interpret": False})


def minipallas_kernel(
    eqn: jax_core.JaxprEqn, ins: Sequence[Any], passes: str = ""
) -> Sequence[Any]:
    """minipallas's Mosaic module for the equation's kernel after the pipeline ``passes``, in
    upstream's custom call (``platforms.mesh_tpu``: a mesh kernel's on one core)."""
    if eqn.primitive.name == "mpmd_map":
        return run_mesh_eqn(eqn, ins)
    return run_pallas_call_eqn(eqn, ins, passes)


def tpu_functions(report: Report) -> dict[str, Callable[..., list[Any]]]:
    """Each TPU way's function of the case's initial values (results, then final ref values),
    to ``jax.jit`` on a device: ``upstream-tpu`` and ``tpu`` from upstream's discharged jaxpr,
    ``xla-tpu`` from minipallas's import (when it imported)."""
    # results, then each ref input's final value
    closed = state_discharge.discharge_state(report.jaxpr)

    def from_upstream(kernel: KernelRule) -> Callable[..., list[Any]]:
        return lambda *xs: evaluate(closed.jaxpr, closed.consts, xs, kernel)

    ours = functools.partial(minipallas_kernel, passes=report.case.passes)
    ways = {"upstream-tpu": from_upstream(upstream_kernel), "tpu": from_upstream(ours)}
    program = report.pipeline_program if report.pipeline_ways else report.program
    if program is not None:
        pure = to_jax(run_pipeline(program, "discharge"))  # the same order
        ways["xla-tpu"] = lambda *xs: list(pure(*xs))
    return ways


# -- running and judging --------------------------------------------------------------------


def run_tpu_ways(report: Report, chip: Chip = TPU_V5E) -> None:
    """Runs the TPU ways into ``report.outcomes`` and sets ``report.tpu`` (``judge``); the
    harness calls it only for a case whose kernels the checks found no bug in that could halt
    the chip."""
    device = tpu_device()
    if report.jaxpr is None:
        return
    functions = timed("trace", lambda: tpu_functions(report), Outcome("tpu"))
    for way in TPU_WAYS:
        outcome = report.outcomes[way] = Outcome(way)
        fn = None if functions is None else functions.get(way)
        if fn is None:
            outcome.error, outcome.stage = MiniPallasError(f"{way}: nothing to run"), "import"
            continue

        def go(fn: Callable[..., list[Any]] = fn) -> list[np.ndarray]:
            xs = jax.device_put(initial(report.case.args), device)
            return [np.asarray(o) for o in jax.jit(fn)(*xs)]

        outcome.outputs = timed("run", go, outcome)
    report.tpu = judge(report, chip)


def defined_masks(report: Report) -> list[np.ndarray] | None:
    """Per output, the elements a TPU defines, when the case is one ``pallas_call`` whose
    results are the program's (``jit`` wrappers allowed); None (compare everything)
    otherwise."""
    eqn = only_kernel(report.jaxpr.jaxpr)
    if eqn is None:
        return None
    kernel = kernel_from_eqn(eqn, memory_space=VMEM)
    return [~m for m in undefined(kernel, initial(report.case.args))]


def judge(report: Report, chip: Chip = TPU_V5E) -> TpuVerdict:
    """The verdict of the TPU ways (module docstring)."""
    ours, theirs = report.outcomes.get("tpu"), report.outcomes.get("upstream-tpu")
    base = report.outcomes.get("interpret")
    if not ours.ok and not theirs.ok:
        return TpuVerdict("both-refuse", f"minipallas: {_why(ours)}; upstream: {_why(theirs)}")
    if not ours.ok:
        return TpuVerdict("error", f"minipallas's kernel failed where upstream's ran: {_why(ours)}")
    masks = defined_masks(report)
    skipped = 0 if masks is None else int(sum(np.size(m) - np.count_nonzero(m) for m in masks))
    fast = reassociates(report.case.passes)
    ready = base is not None and base.ok
    envs = {f: _chip_envelope(report, chip, f) if ready else None for f in {False, fast}}
    if theirs.ok and not fast:
        message = _first(ours.outputs, theirs.outputs, masks)
        if message is not None:
            verdict = TpuVerdict("lowering-difference", message, skipped)
            verdict.module_differences = _module_differences(report)
            return verdict
    for way in ("tpu", "upstream-tpu", "xla-tpu"):
        o = report.outcomes.get(way)
        env = envs[fast and way != "upstream-tpu"]
        if env is not None and o is not None and o.ok:
            message = _outside(env, base.outputs, o.outputs, masks)
            if message is not None:
                return TpuVerdict("outside-chip-envelope", f"{way}: {message}", skipped)
    if not theirs.ok:
        return TpuVerdict("beyond-upstream", f"upstream: {_why(theirs)}", skipped)
    return TpuVerdict("agree", "", skipped)


def _why(o: Outcome) -> str:
    return f"{o.stage}: {type(o.error).__name__}: {str(o.error).splitlines()[0][:200]}"


def _first(
    ours: Sequence[np.ndarray], theirs: Sequence[np.ndarray], masks: list[np.ndarray] | None
) -> str | None:
    """Where ``ours`` and ``theirs`` first differ on defined elements, bit for bit."""
    for k, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if masks is not None:  # undefined elements: theirs on both sides
            a = np.where(masks[k], a, b).astype(b.dtype)
        message = compare(b, a)
        if message is not None:
            return f"output {k}: {message}"
    return None


def _chip_envelope(report: Report, chip: Chip, fast: bool = False) -> Envelope | None:
    if report.program is None:
        return None
    base = report.outcomes["interpret"].outputs
    try:
        return envelope(report.program, report.case.args, base, chip=chip, reassociated=fast)
    except Exception:  # a perturbed run failed: no envelope, so bits decide
        return None


def _outside(
    env: Envelope,
    base: Sequence[np.ndarray],
    got: Sequence[np.ndarray],
    masks: list[np.ndarray] | None,
) -> str | None:
    """The first output of ``got`` outside the chip's envelope around ``base``, on defined
    elements; None if all are inside."""
    for k, (want, value) in enumerate(zip(base, got, strict=True)):
        keep = np.ones(np.shape(want), bool) if masks is None else masks[k]
        if not is_float(np.asarray(want)):
            message = compare(np.asarray(want)[keep], np.asarray(value)[keep])
            if message is not None:
                return f"output {k}: {message}"
            continue
        d = env.judge(
            k,
            np.where(keep, want, 0).astype(want.dtype),
            np.where(keep, value, 0).astype(want.dtype),
        )
        if d is not None and not d.within:
            return (
                f"output {k}: {d.ulps} ulps at {list(d.at)}, {d.fraction:.3g}x the chip's envelope"
            )
    return None


def _module_differences(report: Report) -> list[str]:
    """For a one-kernel case: how minipallas's module differs from upstream's (``mosaic``);
    nothing for other programs."""
    eqn = only_kernel(report.jaxpr.jaxpr)
    if eqn is None:
        return []
    try:
        kernel = kernel_from_eqn(eqn, memory_space=VMEM, passes=report.case.passes)
        ours = lower_to_mosaic(kernel).module
        theirs = upstream_mosaic(tpu_functions(report)["upstream-tpu"], *initial(report.case.args))
        diff = compare_modules(ours, theirs)
        text = "the texts are the same" if diff.same_text else "the texts differ"
        return [*str(diff).splitlines(), text]
    except Exception as e:  # the comparison is a hint; its failure is reported, not raised
        return [f"(modules not compared: {type(e).__name__}: {e})"]
