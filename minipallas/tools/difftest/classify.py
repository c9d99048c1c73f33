"""What a disagreement means: an upstream crash or divergence, a semantic difference, or a bug.

Upstream is not always right, so every disagreement is classified (never hidden):

- ``agree``: every way computed the same outputs, or (``same-rejection``) every way rejected
  the program with upstream's exception class and message, as for a ``run_scoped`` with
  collective axes, which no path of either implements;
- ``within-envelope``: every way agrees, but some float outputs XLA computed (``compile``,
  ``upstream``) differ in bits from the interpreter's, by no more than the numerics envelope
  allows (``envelope``); the finding carries the largest distance (``ulps``) and the largest
  fraction of the allowed distance (``fraction``, at most 1);
- ``upstream-crash``: upstream failed to trace, discharge or evaluate a valid program. Known
  crashes are recognized by where they happen (the exception's class, message and the jax
  function that raised it) and named after their defect in ``KNOWN``; an unrecognized crash
  of a jaxpr with a known divergence's pattern is named after that divergence.
- ``upstream-divergence``: upstream ran but computed something other than sequential
  execution (minipallas's meaning), in a way recognized from the jaxpr (``KNOWN``).
- ``semantic-difference``: a documented difference of meaning, checked, not assumed: the
  program reads scratch it never wrote (found with ``interpret(..., uninitialized="error")``);
  or, between a minipallas reference and upstream, a masked load without ``other`` decides the
  result (the reference agrees once those loads are made unmasked), or an index out of range
  that the two sides treat differently (found with ``interpret(..., checks=True)``; not for
  programs ``emit`` emitted (``interop/exporter/stateful.py``), which state minipallas's index
  meaning explicitly); or
  integers that differ only as NaN bit patterns (a bitcast exposing a computed NaN's sign,
  which IEEE leaves unspecified and XLA's constant folding chooses differently).
- ``kernel-bug``: the kernel checks (``checks``) found a bug in a TPU kernel of the program:
  the finding's name is its kind (``checks.BUG_KINDS``); what the ways found is in its detail.
  A race or a deadlock that the simulation of a mesh kernel's cores or a case's devices
  raised (``collectives="simulate"``) is one too, named ``race`` or ``deadlock``, and so are
  results that differ between the simulator's schedules (``schedule-dependent``);
- ``upstream-hangs``, ``upstream-wrong``: for a case whose ``shard_map`` spans devices
  (``devices``), upstream's TPU interpret mode gave no result within its time box (and no way
  of minipallas names a deadlock), or its results vary between two runs, or differ from those
  of every minipallas way while those agree (and nobody names a race). A race or deadlock
  that minipallas's simulator names, or a race upstream's own detector names, comes first,
  as the ``kernel-bug`` it is: the chip would hang or vary too;
- ``case-error``: the case itself is wrong, so that no way of either side can run it (a kernel
  of the wrong arity, a ``pallas_call`` without ``interpret=True``): the finding's name is the
  mistake (``CASE_ERRORS``), its detail holds the fix;
- ``pass-bug``: a crash or difference in a way the case's own pipeline ran in
  (``Case.passes``, ``user_pipeline``) that a pass of it causes: the finding's name is the pass,
  the report's ``blame`` holds its IR before and after;
- ``minipallas-bug``: anything else: a minipallas way crashed, two minipallas ways disagree
  (for ``compile``, beyond the envelope: the finding's ``op`` is the first op whose compiled
  value leaves its envelope, found by ``bisect``), or upstream disagrees with no explanation.

``classify(report)`` returns the ``Finding``; ``agree`` when every way agrees bit for bit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from minipallas.interop.exporter.stateful import gathers
from minipallas.ir.core import Block, Function, Op
from minipallas.ir.errors import InterpretError
from minipallas.tools.difftest import user_pipeline
from minipallas.tools.difftest.bisect import first_op_out
from minipallas.tools.difftest.divergences import DIVERGENCES
from minipallas.tools.difftest.known import (
    CASE_ERRORS,
    KINDS,
    KNOWN,
    KNOWN_ON_DEVICES,
    SCHEDULE_DEPENDENT,
    SIMULATED_BUGS,
    SIMULATED_MESSAGES,
    Known,
)
from minipallas.tools.difftest.outputs import interpret_outputs
from minipallas.tools.difftest.report import SCHEDULE_WAYS, Difference, Report, agree, compare

__all__ = ["KINDS", "KNOWN", "Finding", "Known", "classify"]


@dataclass(frozen=True)
class Finding:
    """A classified outcome: one of ``KINDS``; ``name``: a ``KNOWN`` key, ``agree``, or a
    short description; ``detail``: the evidence (an error, a difference). ``ulps`` and
    ``fraction``: the largest ulp distance of an XLA way's floats from the interpreter's, and
    the largest fraction of its allowed distance (<= 1 within the envelope), when the envelope
    was consulted; ``op``: for a ``compile`` bug, the first op whose value leaves its envelope
    (IR text and location)."""

    kind: str
    name: str
    detail: str = ""
    ulps: int | None = None
    fraction: float | None = None
    op: str | None = None

    @property
    def reason(self) -> str:
        known = KNOWN.get(self.name) or KNOWN_ON_DEVICES.get(self.name)
        return known.reason if known else self.detail

    def __str__(self) -> str:
        text = self.kind if self.name == self.kind else f"{self.kind} ({self.name})"
        if self.ulps is not None and self.fraction is not None:
            text += f" [{self.ulps} ulps, {self.fraction:.2g}x envelope]"
        return text


# -- recognizing upstream crashes ----------------------------------------------------------


def _function_names(error: BaseException) -> set[str]:
    """Names of the functions on ``error``'s traceback, jax's filtered frames included (jax
    keeps them on an ``UnfilteredStackTrace`` in the ``__cause__`` chain)."""
    names: set[str] = set()
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            names.add(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    names.update(getattr(error, "functions", ()))  # an upstream error rebuilt from a worker's
    return names


def recognize_crash(stage: str, error: BaseException) -> str | None:
    """The ``KNOWN`` (or ``KNOWN_ON_DEVICES``) upstream crash that ``error`` (raised at
    ``stage``) is, or None."""
    names = None
    for name, k in {**KNOWN, **KNOWN_ON_DEVICES}.items():
        if k.kind != "upstream-crash" or stage not in k.stages:
            continue
        if k.error and type(error).__name__ != k.error:
            continue
        if k.message and not re.search(k.message, str(error)):
            continue
        if k.where:
            names = names if names is not None else _function_names(error)
            if k.where not in names:
                continue
        return name
    return None


# -- recognizing semantic differences (divergences: divergences.py) -------------------------


def reads_uninitialized(fn: Function, args: list) -> bool:
    """Whether interpreting ``fn`` reads a scratch element before writing it."""
    try:
        interpret_outputs(fn, args, uninitialized="error")
    except InterpretError as e:
        return "never written" in str(e)
    except Exception:  # another failure is not an uninitialized read
        return False
    return False


def unmask_loads(fn: Function) -> Function:
    """``fn`` with every masked load without ``other`` made unmasked (upstream's meaning)."""
    done: dict[int, Function] = {}

    def block(b: Block) -> Block:
        return Block(b.params, [op_(op) for op in b.ops], b.results)

    def op_(op: Op) -> Op:
        attrs = dict(op.attrs)
        operands = op.operands
        if op.name == "load" and attrs.get("masked") and not attrs.get("has_other"):
            attrs["masked"], operands = False, operands[:-1]
        if op.name == "call":
            attrs["callee"] = function(attrs["callee"])
        return op.replace(operands=operands, attrs=attrs, regions=tuple(map(block, op.regions)))

    def function(f: Function) -> Function:
        if id(f) not in done:
            done[id(f)] = Function(f.name, block(f.body))
        return done[id(f)]

    return function(fn)


def _has_unmasked_fill(fn: Function) -> bool:
    return any(
        op.name == "load" and op.attrs.get("masked") and not op.attrs.get("has_other")
        for f in (fn, *fn.callees())
        for op in f.walk()
    )


def _agrees_unmasked(report: Report, against: str) -> bool:
    """Whether the reference, its masked loads made unmasked, gives ``against`` 's outputs."""
    try:
        outputs = interpret_outputs(unmask_loads(report.case.reference), report.case.args)
    except Exception:  # the emulation does not run: no explanation
        return False
    theirs = report.outcomes[against].outputs
    return len(outputs) == len(theirs) and all(
        compare(w, g) is None for w, g in zip(theirs, outputs, strict=True)
    )


# -- classifying ---------------------------------------------------------------------------

_MINIPALLAS_WAYS = ("interpret", "discharge", "compile", *SCHEDULE_WAYS, "on-devices")


def classify(report: Report) -> Finding:
    """The ``Finding`` for a finished ``Report`` (see the module docstring): ``case-error``
    when the case itself is wrong (``CASE_ERRORS``); ``kernel-bug`` when the kernel checks
    found one, or a simulation of a mesh kernel's cores raised a race or a deadlock, whatever
    the ways did (they follow interpret mode, which defines what the chip leaves undefined),
    with the ways' own finding in its detail."""
    mistake = _case_error(report)
    if mistake is not None:
        return mistake
    ways = _ways(report)
    simulated = _simulated_bug(report)
    if simulated is not None:
        return simulated
    if not report.kernel_bugs:
        return ways
    bugs = "; ".join(str(b) for b in report.kernel_bugs)
    return Finding("kernel-bug", report.kernel_bugs[0].kind, f"{bugs} (the ways: {ways})")


def _case_error(report: Report) -> Finding | None:
    """``case-error`` when upstream's error is one of the user's mistakes in the case (a
    kernel of the wrong arity, a pallas_call without ``interpret=True``), with the fix. A case
    that simulates a mesh kernel's cores is not told to ask for interpret mode: upstream's
    has no rule for a ``run_scoped`` with collective axes, so it cannot run either way."""
    up = report.outcomes.get("upstream")
    if up is None or up.error is None:
        return None
    simulated = report.case.collectives == "simulate"
    for name, e in CASE_ERRORS.items():
        if name == "no-interpret" and simulated:
            continue
        if up.stage == e.stage and type(up.error).__name__ == e.error:
            if re.search(e.message, str(up.error)):
                detail = f"{up.stage}: {type(up.error).__name__}: {up.error}; fix: {e.fix}"
                return Finding("case-error", name, detail)
    return None


def _simulated_bug(report: Report) -> Finding | None:
    """``kernel-bug`` (``race`` or ``deadlock``) when a way that simulates a mesh kernel's
    cores or a case's devices (``collectives="simulate"``) raised ``RaceError`` or
    ``DeadlockError``, or, for a case that spans devices, when upstream's race detector names
    a race. This comes before ``upstream-hangs`` and ``upstream-wrong``: on a kernel that
    deadlocks the chip hangs too, and a race lets the chip's results vary too, so upstream's
    hang or varying results are the kernel's bug showing, not upstream's; what upstream did
    is in the detail."""
    runs = report.upstream_runs
    if report.case.collectives != "simulate" and runs is None:
        return None
    upstream = "" if runs is None else f"\n{runs.text()}"
    for way in ("interpret", "discharge", *SCHEDULE_WAYS):
        o = report.outcomes.get(way)
        kind = _simulated_kind(o.error) if o is not None else None
        if kind is not None:
            detail = f"{way}: {type(o.error).__name__}: {o.error}{upstream}"
            return Finding("kernel-bug", kind, detail)
    if runs is not None and runs.races:
        ours = report.outcomes["interpret"]
        status = "names none" if ours.ok else f"{type(ours.error).__name__}: {ours.error}"
        detail = (f"upstream's race detector ({runs.runs[-1].way}) names a race: "
                  f"{runs.first_race()}\nminipallas's simulator: {status}{upstream}")  # fmt: skip
        return Finding("kernel-bug", "race", detail)
    return None


def _simulated_kind(error: BaseException | None) -> str | None:
    """The kernel-bug kind of what a simulated way raised (``SIMULATED_BUGS`` by class,
    ``SIMULATED_MESSAGES`` by message), or None."""
    kind = SIMULATED_BUGS.get(type(error).__name__)
    if kind is None and isinstance(error, InterpretError):
        found = (k for pattern, k in SIMULATED_MESSAGES if re.search(pattern, str(error)))
        kind = next(found, None)
    return kind


def _upstream_on_devices(report: Report) -> Finding | None:
    """For a case that spans devices: ``upstream-hangs`` when an upstream run outlived its time
    box, ``upstream-wrong`` when two upstream runs differ (``devices.UpstreamRuns``)."""
    runs = report.upstream_runs
    if runs is None:
        return None
    ours = report.outcomes["interpret"]
    mine = "ran" if ours.ok else f"{ours.stage}: {type(ours.error).__name__}: {ours.error}"
    if runs.hung:
        return Finding("upstream-hangs", "upstream-hangs", f"{runs.text()}; minipallas: {mine}")
    varies = runs.varies()
    if varies is not None:
        return Finding("upstream-wrong", "varies between runs", runs.text())
    return None


def _ways(report: Report) -> Finding:
    upstream = _upstream_on_devices(report)
    if upstream is not None:
        return upstream
    up = report.outcomes.get("upstream")
    if up is not None and up.error is not None and _same_rejection(report, up.error):
        detail = f"every way raised {type(up.error).__name__}: {up.error}"
        return Finding("agree", "same-rejection", detail)
    if up is not None and up.error is not None and _beyond_upstream(report):
        detail = f"upstream: {type(up.error).__name__}: {up.error}; minipallas's ways agree"
        return Finding("beyond-upstream", "collectives simulated", detail)
    if up is not None and up.error is not None:
        name = recognize_crash(up.stage, up.error)
        detail = f"{up.stage}: {type(up.error).__name__}: {up.error}"
        if name is None and report.jaxpr is not None:  # a known divergence can crash later on
            name = next((n for n, found in DIVERGENCES.items() if found(report.jaxpr)), None)
            detail = f"(the jaxpr has the {name} pattern) {detail}" if name else detail
        return Finding("upstream-crash", name or f"unrecognized {up.stage} crash", detail)
    blamed = _pass_bug(report)
    if blamed is not None:
        return blamed
    for way in (*_MINIPALLAS_WAYS, "reference"):
        o = report.outcomes.get(way)
        if o is not None and o.error is not None:
            detail = f"{way} failed at {o.stage}: {type(o.error).__name__}: {o.error}"
            return Finding("minipallas-bug", f"{way} crash at {o.stage}", detail)
    d = report.difference
    if d is None:
        return _agreement(report)
    detail = f"{d.way} vs {d.base}, {d.label}: {d.message}"
    if _only_nan_bits(report, d):
        return Finding("semantic-difference", "nan-bit-pattern", detail)
    if d.way == "compile":
        return _compile_bug(report, detail)
    if d.way in SCHEDULE_WAYS:  # two legal interleavings of the devices, two results
        return Finding("kernel-bug", SCHEDULE_DEPENDENT, f"{detail} (no race named)")
    if d.way in _MINIPALLAS_WAYS:
        return Finding("minipallas-bug", f"{d.way} disagrees with interpret", detail)
    if d.way == "upstream" and report.upstream_runs is not None:  # minipallas's ways agree
        return Finding("upstream-wrong", "disagrees with every minipallas way", detail)
    if d.way == "upstream":
        for name, present in DIVERGENCES.items():
            if present(report.jaxpr):
                return Finding("upstream-divergence", name, detail)
    program = report.program if d.way == "upstream" else report.case.reference
    if program is not None and reads_uninitialized(program, list(report.case.args)):
        return Finding("semantic-difference", "uninitialized-read", detail)
    if d.way == "reference":
        reference = report.case.reference
        if _has_unmasked_fill(reference) and _agrees_unmasked(report, "interpret"):
            return Finding("semantic-difference", "masked-load-fill", detail)
        out_of_range = None if report.case.emitted else _out_of_range(reference, report)
        if out_of_range is not None:
            return Finding("semantic-difference", out_of_range, detail)
    return _unexplained(report, detail)


def _pass_bug(report: Report) -> Finding | None:
    """``pass-bug`` when a way the case's pipeline ran in crashed or differs and a pass of it
    is to blame (``user_pipeline.blame``, kept in ``report.blame``); else None."""
    ways = report.pipeline_ways
    crashed = any(report.outcomes[w].error is not None for w in ways if w in report.outcomes)
    d = report.difference
    if not crashed and (d is None or d.way not in ways):
        return None
    try:
        report.blame = user_pipeline.blame(report)
    except Exception:  # the blame is evidence, not the verdict
        return None
    if report.blame is None:
        return None
    return Finding("pass-bug", f"pass {report.blame.name}", str(report.blame))


def _beyond_upstream(report: Report) -> bool:
    """A collective program (``Case.collectives="simulate"``) that upstream refuses and that
    minipallas's ways all run, agreeing with the simulation bit for bit."""
    if report.case.collectives != "simulate" or report.difference is not None:
        return False
    outcomes = [report.outcomes.get(w) for w in (*_MINIPALLAS_WAYS, "reference")]
    return all(o is None or o.ok for o in outcomes) and report.outcomes["interpret"].ok


def _agreement(report: Report) -> Finding:
    """``agree``, or ``within-envelope`` when an XLA way's floats needed the envelope."""
    if not report.distances:
        return Finding("agree", "agree")
    far = max(report.distances.values(), key=lambda d: (d.fraction, d.ulps))
    detail = ", ".join(
        f"{way}: {d.ulps} ulps, {d.fraction:.3g}x the envelope"
        for way, d in report.distances.items()
    )
    return Finding("within-envelope", "within-envelope", detail, far.ulps, far.fraction)


def _compile_bug(report: Report, detail: str) -> Finding:
    """A ``compile`` disagreement, with the first op out of its envelope (``bisect``)."""
    try:
        op, found = first_op_out(report)
    except Exception as e:  # the bisect is evidence, not the verdict
        op, found = None, f"bisect failed: {type(e).__name__}: {e}"
    d = report.difference.distance
    ulps, fraction = (d.ulps, d.fraction) if d is not None else (None, None)
    name = "compile disagrees with interpret"
    return Finding("minipallas-bug", name, f"{detail}; {found}", ulps, fraction, op)


def _same_rejection(report: Report, error: BaseException) -> bool:
    """Whether every minipallas way ran and raised upstream's ``error`` again: an instance of
    its class with its message (e.g. a ``run_scoped`` with collective axes, which both reject)."""
    ours = [o.error for way, o in report.outcomes.items() if way != "upstream"]
    return bool(ours) and all(isinstance(e, type(error)) and str(e) == str(error) for e in ours)


def _only_nan_bits(report: Report, d: Difference) -> bool:
    """Whether the differing output is integers whose differing elements are, seen as floats
    of their width, NaNs on both sides (bits a bitcast exposed)."""
    k = report.labels.index(d.label) if d.label in report.labels else None
    if k is None:
        return False
    a, b = (np.asarray(report.outcomes[w].outputs[k]) for w in (d.base, d.way))
    floats = {4: np.float32, 2: np.float16}.get(a.dtype.itemsize)
    if a.dtype.kind not in "iu" or a.shape != b.shape or b.dtype != a.dtype or floats is None:
        return False
    differ = a != b
    fa, fb = (np.array(x).view(floats) for x in (a, b))  # np.array keeps 0-d arrays 0-d
    return bool(np.all(np.isnan(fa[differ]) & np.isnan(fb[differ])))


def _out_of_range(fn: Function, report: Report) -> str | None:
    """``negative-dynamic-index`` or ``gather-window-clamp`` when ``fn`` uses such an index
    (found with ``interpret(..., checks=True)``, which stops at the first out-of-range one)."""
    try:
        interpret_outputs(fn, list(report.case.args), checks=True)
    except InterpretError as e:
        if re.search(r"(index|start) -\d+ ", str(e)):
            return "negative-dynamic-index"
        uses_gathers = any(
            gathers(op.attrs["indexer"])
            for f in (fn, *fn.callees())
            for op in f.walk()
            if "indexer" in op.attrs
        )
        return "gather-window-clamp" if uses_gathers else None
    except Exception:  # another failure explains nothing
        return None
    return None


def _unexplained(report: Report, detail: str) -> Finding:
    """Who is wrong, judged by which ways agree: the import reads the jaxpr upstream runs,
    the reference is the program the jaxpr was emitted from."""
    if "reference" not in report.outcomes:
        return Finding("minipallas-bug", "upstream disagrees with the import", detail)
    if agree(report, "reference", "interpret"):  # two minipallas routes against upstream
        return Finding("upstream-divergence", "unrecognized divergence", detail)
    if agree(report, "reference", "upstream"):
        return Finding("minipallas-bug", "import disagrees with upstream", detail)
    if agree(report, "upstream", "interpret"):
        return Finding("minipallas-bug", "reference disagrees with upstream and import", detail)
    return Finding("minipallas-bug", "upstream, import and reference all differ", detail)
