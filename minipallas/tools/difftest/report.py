"""What ``run`` finds out about a case (``Report``), and how it compares the ways' outputs.

Every way is compared with ``BASE`` (``interpret``) bit for bit (any NaN equals any NaN;
``ulps`` loosens the comparisons of the interpreter with XLA for programs with
transcendentals), except that a float output of an XLA way (``compile``, ``upstream``) that
differs in bits is judged by the numerics envelope (``envelope``), computed only then.
``discharge`` and ``reference``, interpreted like ``interpret``, stay bit for bit, but for the
ways a case at ``optimize="fast"`` ran its kernels' reassociating passes in (``Case.optimize``,
``reassociated``): ``discharge`` is judged by the envelope with sum orders free across grid
steps, and ``compile`` against ``discharge``, the same program interpreted (``against``). The
``Report`` holds every outcome, the first difference (``first_difference``), and the
``Finding`` of ``classify``; ``Report.text()`` prints it with the upstream jaxpr and the
minipallas IR.

The classifier and the bisect read reports and compare ways (``agree``, ``compare``); the
harness fills them in. Both import this module, which imports neither.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minipallas.ir.core import Function
from minipallas.lowering import TARGETS, optimize_level
from minipallas.passes.kernel.reassociate import reassociates
from minipallas.tools.difftest.known import check_expect
from minipallas.tools.envelope.machine import Machine
from minipallas.tools.envelope.measure import Distance, Envelope, envelope, is_float, ulp_distance

WAYS = ("upstream", "interpret", "discharge", "compile", "reference")
# the simulator's seeded schedules, each a way of a case that spans devices (``devices``)
SCHEDULES = (0, 1)
SCHEDULE_WAYS = tuple(f"schedule-{s}" for s in SCHEDULES)
# against BASE, in this order: minipallas's ways first (``on-devices``: a case that spans
# devices compiled to XLA collectives, ``devices.compiled_way``)
COMPARED = ("discharge", "compile", *SCHEDULE_WAYS, "on-devices", "upstream", "reference")
BASE = "interpret"
XLA_WAYS = ("upstream", "compile")  # computed by XLA: compared with BASE within the envelope


@dataclass
class Case:
    """One program to test: a JAX function over refs and arrays, and its inputs.

    ``expect`` names the finding the case is known to produce: a kind (``kernel-bug``) or a
    finding's name (a ``KNOWN`` upstream defect or semantic difference, a bug kind), checked
    against ``known.verdicts()`` when the case is made; None: agreement (or, for a case with
    ``collectives="simulate"``, which upstream cannot run, ``beyond-upstream``).
    ``reference`` is a minipallas ``Function`` meant to compute the same thing, checked as a fifth
    way; ``emitted`` says ``fn`` is
    ``stateful.emit(reference)``. ``plant`` is a deliberate bug, for testing the harness's
    power: the ``compile`` way compiles ``plant(program)`` instead of the imported program.
    ``passes`` is a researcher's pipeline (passes registered with ``minipallas.register`` or
    loaded with ``passes.registry.load``), run on the case's kernels, or on its program after
    discharge and cleanup (``user_pipeline``); a finding it causes is ``pass-bug``, naming the
    pass. ``optimize="fast"`` appends the TPU target's fast passes (``lowering.Target.fast``,
    which may reorder float sums) to ``passes``: the ways they run in are then judged by the
    numerics envelope, sum orders free across grid steps (``envelope``'s ``reassociated``).
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    ulps: int = 0
    expect: str | None = None
    reference: Function | None = None
    emitted: bool = False  # fn was emitted from reference by emit (see classify)
    plant: Callable[[Function], Function] | None = None
    # "simulate": minipallas's ways run collective programs (a mesh kernel's cores) together
    # (``interpret(..., collectives="simulate")``, ``discharge{collectives=simulate}``)
    collectives: str = "reject"
    passes: str = ""
    # the file that made the case: a case that spans devices runs upstream in a worker process
    # that loads it from there by name (``devices``)
    origin: str = ""
    optimize: bool | str = True

    def __post_init__(self) -> None:
        check_expect(self.expect, self.name)
        self.origin = self.origin or _maker()
        if optimize_level(self.optimize) == "fast":
            self.passes = ",".join(p for p in (self.passes, TARGETS["tpu"].fast) if p)


def _maker() -> str:
    """The file of the code that made a ``Case`` (past the dataclass's generated ``__init__``)."""
    frame = sys._getframe(2)
    while frame is not None and not os.path.isfile(frame.f_code.co_filename):
        frame = frame.f_back
    return os.path.abspath(frame.f_code.co_filename) if frame is not None else ""


@dataclass
class Outcome:
    """What one way produced: the outputs, or the error it raised and at which stage."""

    way: str
    outputs: list[np.ndarray] | None = None
    error: BaseException | None = None
    stage: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.outputs is not None


def timed(stage: str, thunk: Callable[[], Any], outcome: Outcome) -> Any:  # noqa: ANN401
    """``thunk()``, its time added to ``outcome``; None (error recorded at ``stage``) if it
    raised."""
    start = time.perf_counter()
    try:
        return thunk()
    except Exception as e:  # every crash is a finding, whatever its class
        outcome.error, outcome.stage = e, stage
        return None
    finally:
        outcome.seconds += time.perf_counter() - start


@dataclass
class Difference:
    """The first output where ``way`` differs from ``base``: its label and first element."""

    base: str
    way: str
    label: str
    message: str
    distance: Distance | None = None  # when the envelope judged it (an XLA way, floats)


@dataclass
class Report:
    """Everything ``run`` found out about one case."""

    case: Case
    jaxpr: Any = None  # upstream ClosedJaxpr
    program: Function | None = None  # the import
    compiled: Function | None = None  # what the compile way compiled: the import, or plant(it)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    difference: Difference | None = None
    finding: Any = None  # classify.Finding
    envelope: Envelope | None = None  # computed only when an XLA way's floats differ
    # for the ways that ran a pipeline that reassociates (``reassociated``), computed only when
    # one of them differs: the import's with sum orders free across grid steps (``discharge``
    # against ``BASE``), and the pipeline's program's around ``discharge`` (``compile``)
    fast_envelope: Envelope | None = None
    pipeline_envelope: Envelope | None = None
    distances: dict[str, Distance] = field(default_factory=dict)  # per XLA way, when consulted
    machine: Machine | None = None  # the CPU that ran the XLA ways
    tpu: Any = None  # tpu.TpuVerdict, when the case ran with device="tpu"
    # the kernel checks (``checks``): the bugs of the program's TPU kernels, why a kernel went
    # unchecked, and their time
    kernel_bugs: list[Any] = field(default_factory=list)
    check_notes: list[str] = field(default_factory=list)
    check_seconds: float = 0.0
    # with ``case.passes`` (``user_pipeline``): the ways it ran in, the program it made (the
    # import with it on each kernel, or the cleaned-up discharged import after it), the IR
    # after it as text, and the pass a finding comes from (a ``user_passes.Blame``)
    pipeline_ways: tuple[str, ...] = ()
    pipeline_program: Function | None = None
    pipeline_ir: str | None = None
    blame: Any = None
    # for a case that spans devices: upstream's runs in its worker (a ``devices.UpstreamRuns``)
    upstream_runs: Any = None

    @property
    def ok(self) -> bool:
        """Every way agrees: bit for bit, or XLA's floats within the envelope (and, on a TPU,
        the TPU ways' verdict is good)."""
        cpu = self.finding is not None and self.finding.kind in ("agree", "within-envelope")
        return cpu and (self.tpu is None or self.tpu.ok)

    @property
    def expected(self) -> bool:
        """The finding is the one the case expects (agreement, exact or within the envelope,
        when it expects none)."""
        if self.finding is None:
            return False
        if self.case.expect is None:
            beyond = self.case.collectives == "simulate" and self.finding.kind == "beyond-upstream"
            return beyond or self.finding.name in ("agree", "within-envelope")
        return self.case.expect in (self.finding.name, self.finding.kind)

    def text(self) -> str:
        lines = [f"case {self.case.name}: {self.finding}"]
        if self.machine is not None:
            lines.append(f"machine: {self.machine}")
        for way, o in self.outcomes.items():
            status = "ok" if o.ok else f"{o.stage}: {type(o.error).__name__}: {o.error}"
            if o.error is None and o.outputs is None:
                status = "not run (an earlier stage failed)"
            lines.append(f"  {way:<10} {o.seconds * 1e3:7.1f} ms  {status.splitlines()[0]}")
        for way, d in self.distances.items():
            lines.append(
                f"  {way} vs {BASE}: at most {d.ulps} ulps, {d.fraction:.3g}x the numerics envelope"
            )
        if self.upstream_runs is not None:
            lines.append(self.upstream_runs.text())
        if self.difference is not None:
            d = self.difference
            lines.append(f"first difference: {d.way} vs {d.base}, {d.label}: {d.message}")
        if self.finding is not None and self.finding.op is not None:
            lines.append(f"first op out of its envelope: {self.finding.op}")
        for bug in self.kernel_bugs:
            lines.append(f"kernel bug: {bug}")
        lines.extend(f"  checks: {note}" for note in self.check_notes)
        if self.tpu is not None:
            lines.append(f"on the TPU: {self.tpu}")
            lines.extend(f"  module: {d}" for d in self.tpu.module_differences)
        lines.append("--- upstream jaxpr ---")
        lines.append(str(self.jaxpr) if self.jaxpr is not None else "(not traced)")
        lines.append("--- minipallas IR (imported) ---")
        lines.append(str(self.program) if self.program is not None else "(not imported)")
        if self.case.reference is not None:
            lines.append("--- minipallas IR (reference) ---")
            lines.append(str(self.case.reference))
        if self.pipeline_ir is not None:
            ways = self.pipeline_ways
            where = "each kernel" if "tpu" in ways else "the program" if ways else "not run"
            lines.append(f"--- minipallas IR after the pipeline '{self.case.passes}' ({where}) ---")
            lines.append(self.pipeline_ir)
        if self.blame is not None:
            lines.append(self.blame.text())
        return "\n".join(lines)


# -- comparing -----------------------------------------------------------------------------


def compare(want: np.ndarray, got: np.ndarray, ulps: int = 0) -> str | None:
    """None if ``got`` matches ``want`` (bits, NaN equals NaN, or within ``ulps``); else why."""
    want, got = np.asarray(want), np.asarray(got)
    if want.dtype != got.dtype or want.shape != got.shape:
        return f"type {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if is_float(want):
        nan_w, nan_g = np.isnan(want.astype(np.float32)), np.isnan(got.astype(np.float32))
        same = (nan_w & nan_g) | (ulp_distance(want, got) <= ulps) & ~nan_w & ~nan_g
    else:
        same = want == got
    if bool(np.all(same)):
        return None
    at = tuple(int(i) for i in np.argwhere(~np.asarray(same))[0])
    return (
        f"at {list(at)}: {want[at]!r} != {got[at]!r} "
        f"({int(np.size(same) - np.count_nonzero(same))} of {np.size(same)} elements differ)"
    )


ENVELOPES = {"import": "envelope", "fast": "fast_envelope", "pipeline": "pipeline_envelope"}


def numerics_envelope(report: Report, kind: str = "import") -> Envelope | None:
    """The envelope of the import around ``BASE`` 's outputs (``kind="fast"``: with sum orders
    free across grid steps; ``"pipeline"``: of the pipeline's program around ``discharge`` 's
    outputs), computed on first use (most programs agree bit for bit and never need it);
    None if it cannot be computed."""
    made = getattr(report, ENVELOPES[kind])
    program = report.pipeline_program if kind == "pipeline" else report.program
    if made is None and program is not None:
        base = report.outcomes["discharge" if kind == "pipeline" else BASE].outputs
        try:
            made = envelope(program, report.case.args, base, reassociated=kind == "fast")
        except Exception:  # a perturbed run failed: no envelope, so bits decide
            return None
        setattr(report, ENVELOPES[kind], made)
    return made


def reassociated(report: Report, way: str) -> bool:
    """Whether ``way`` ran the case's pipeline and it may reorder float sums."""
    return way in report.pipeline_ways and reassociates(report.case.passes)


def against(report: Report, way: str) -> str:
    """The way ``way`` is compared with: ``BASE``, but for the ``compile`` way of a pipeline
    that reassociates, which compiles the program ``discharge`` interprets: that way, when it
    ran (so a compiler's error is not lost in the sums' freedom)."""
    dis = report.outcomes.get("discharge")
    if way == "compile" and reassociated(report, way) and dis is not None and dis.ok:
        return "discharge"
    return BASE


def _envelope_kind(report: Report, way: str) -> str:
    if not reassociated(report, way):
        return "import"
    return "pipeline" if against(report, way) == "discharge" else "fast"


def closeness(
    report: Report, way: str, k: int, want: np.ndarray, got: np.ndarray, ulps: int
) -> tuple[str | None, Distance | None]:
    """Output ``k`` of ``way`` against ``want`` (``against`` 's): None if it matches (to the
    bit with ``ulps``, or, for an XLA way's float output, within the envelope), else why; and
    the distance when the envelope was consulted."""
    message = compare(want, got, ulps)
    judged = way in XLA_WAYS or reassociated(report, way)
    if message is None or not judged or message.startswith("type"):
        return message, None
    if report.upstream_runs is not None:  # op by op in interpret mode, no envelope: bits decide
        return message, None
    if not is_float(np.asarray(want)):
        return message, None
    env = numerics_envelope(report, _envelope_kind(report, way))
    d = None if env is None else env.judge(k, want, got, ulps)
    if d is None:
        return message, None
    if d.within:
        return None, d
    at = d.at
    w, g = np.asarray(want)[at], np.asarray(got)[at]
    allowed = int(env.allowed(k, ulps)[at])
    return (
        f"at {list(at)}: {w!r} != {g!r}, {d.ulps} ulps, {d.fraction:.3g}x the envelope "
        f"({allowed} ulps allowed there, {env.samples} samples)"
    ), d


def first_difference(report: Report, ulps: int) -> Difference | None:
    """The first output where a way that ran differs from ``BASE`` (``against``), trying
    minipallas's own ways first (``COMPARED`` order). XLA ways' float outputs are judged by the
    envelope; the distance of each that needed it is kept in ``report.distances``."""
    base = report.outcomes.get(BASE)
    if base is None or not base.ok:
        return None
    for way in COMPARED:
        o = report.outcomes.get(way)
        if o is None or not o.ok:
            continue
        if len(o.outputs) != len(base.outputs):
            return Difference(
                BASE, way, "outputs", f"{len(o.outputs)} outputs, expected {len(base.outputs)}"
            )
        tolerance = 0 if way in ("discharge", "reference") else ulps
        than = against(report, way)
        wants = report.outcomes[than].outputs
        for k, (label, w, g) in enumerate(zip(report.labels, wants, o.outputs, strict=True)):
            message, d = closeness(report, way, k, w, g, tolerance)
            if d is not None and (
                way not in report.distances or _farther(d, report.distances[way])
            ):
                report.distances[way] = d
            if message is not None:
                return Difference(than, way, label, message, d)
    return None


def _farther(a: Distance, b: Distance) -> bool:
    return (a.fraction, a.ulps) > (b.fraction, b.ulps)


def agree(report: Report, a: str, b: str) -> bool:
    """Whether ways ``a`` and ``b`` both ran and produced matching outputs (an XLA way against
    an interpreted one: within the envelope)."""
    oa, ob = report.outcomes.get(a), report.outcomes.get(b)
    if oa is None or ob is None or not (oa.ok and ob.ok) or len(oa.outputs) != len(ob.outputs):
        return False
    xla = set(XLA_WAYS)
    if {a, b} <= xla or not ({a, b} & xla):
        return all(compare(x, y) is None for x, y in zip(oa.outputs, ob.outputs, strict=True))
    (way, mine), (_, theirs) = sorted(((a, oa), (b, ob)), key=lambda p: p[0] not in xla)
    return all(
        closeness(report, way, k, w, g, report.case.ulps)[0] is None
        for k, (w, g) in enumerate(zip(theirs.outputs, mine.outputs, strict=True))
    )
