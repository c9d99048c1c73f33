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
   (the fuzzer's generated program), that function interpreted.

Every way is compared with ``interpret`` bit for bit (any NaN equals any NaN; ``ulps``
loosens the comparisons of the interpreter with XLA for programs with transcendentals), except
that a float output of an XLA way (``compile``, ``upstream``) that differs in bits is judged by
the numerics envelope (``envelope``), computed only then. ``discharge`` and ``reference``,
interpreted like ``interpret``, stay bit for bit. The
``Report`` holds every outcome, the first difference, and the ``Finding`` of ``classify``:
agreement, an upstream crash or divergence, a documented semantic difference, or a minipallas
bug. ``Report.text()`` prints it with the upstream jaxpr and the minipallas IR.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import minipallas
from minipallas.difftest.envelope import Distance, Envelope, envelope, is_float, ulp_distance
from minipallas.ir.core import Function
from minipallas.ir.interpret import interpret
from minipallas.passes.pipeline import run as run_pipeline

WAYS = ("upstream", "interpret", "discharge", "compile", "reference")
COMPARED = ("discharge", "compile", "upstream", "reference")  # against BASE, in this order
BASE = "interpret"


@dataclass(frozen=True)
class RefArg:
    """An input passed as a ``Ref`` (its initial value); see ``ref``."""

    value: np.ndarray


def ref(value: Any) -> RefArg:  # noqa: ANN401
    """Marks a case input as a ref: the program gets a ``Ref`` holding a copy of ``value``."""
    return RefArg(np.asarray(value))


@dataclass
class Case:
    """One program to test: a JAX function over refs and arrays, and its inputs.

    ``expect`` names the finding the case is known to produce (a ``KNOWN`` upstream defect or
    semantic difference; None: agreement). ``reference`` is a minipallas ``Function`` meant
    to compute the same thing, checked as a fifth way; ``emitted`` says ``fn`` is
    ``jax_emit.emit(reference)``. ``plant`` is a deliberate bug, for testing the harness's
    power: the ``compile`` way compiles ``plant(program)`` instead of the imported program.
    """

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    ulps: int = 0
    expect: str | None = None
    reference: Function | None = None
    emitted: bool = False  # fn was emitted from reference by jax_emit (see classify)
    plant: Callable[[Function], Function] | None = None


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
    distances: dict[str, Distance] = field(default_factory=dict)  # per XLA way, when consulted

    @property
    def ok(self) -> bool:
        """Every way agrees: bit for bit, or XLA's floats within the envelope."""
        return self.finding is not None and self.finding.kind in ("agree", "within-envelope")

    @property
    def expected(self) -> bool:
        """The finding is the one the case expects (agreement, exact or within the envelope,
        when it expects none)."""
        if self.finding is None:
            return False
        if self.case.expect is None:
            return self.finding.name in ("agree", "within-envelope")
        return self.finding.name == self.case.expect

    def text(self) -> str:
        lines = [f"case {self.case.name}: {self.finding}"]
        for way, o in self.outcomes.items():
            status = "ok" if o.ok else f"{o.stage}: {type(o.error).__name__}: {o.error}"
            lines.append(f"  {way:<10} {o.seconds * 1e3:7.1f} ms  {status.splitlines()[0]}")
        for way, d in self.distances.items():
            lines.append(
                f"  {way} vs {BASE}: at most {d.ulps} ulps, {d.fraction:.3g}x the numerics envelope"
            )
        if self.difference is not None:
            d = self.difference
            lines.append(f"first difference: {d.way} vs {d.base}, {d.label}: {d.message}")
        if self.finding is not None and self.finding.op is not None:
            lines.append(f"first op out of its envelope: {self.finding.op}")
        lines.append("--- upstream jaxpr ---")
        lines.append(str(self.jaxpr) if self.jaxpr is not None else "(not traced)")
        lines.append("--- minipallas IR (imported) ---")
        lines.append(str(self.program) if self.program is not None else "(not imported)")
        if self.case.reference is not None:
            lines.append("--- minipallas IR (reference) ---")
            lines.append(str(self.case.reference))
        return "\n".join(lines)


class Disagreement(AssertionError):
    """``check`` found a difference (or a crash); ``report`` holds the details."""

    def __init__(self, report: Report) -> None:
        super().__init__(report.text())
        self.report = report


# -- running each way ----------------------------------------------------------------------


def _initial(args: Sequence[Any]) -> list[np.ndarray]:
    """Fresh copies of the inputs' values (refs unwrapped)."""
    return [np.array(a.value if isinstance(a, RefArg) else a, copy=True) for a in args]


def _timed(stage: str, thunk: Callable[[], Any], outcome: Outcome) -> Any:  # noqa: ANN401
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


def abstract(args: Sequence[Any]) -> list[Any]:
    """The abstract inputs upstream traces with: ``AbstractRef`` s and shape structs."""
    import jax
    from jax._src import core as jax_core
    from jax._src.state.types import AbstractRef

    out = []
    for a in args:
        if isinstance(a, RefArg):
            out.append(AbstractRef(jax_core.ShapedArray(a.value.shape, a.value.dtype)))
        else:
            out.append(jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype))
    return out


def run_upstream(jaxpr: Any, args: Sequence[Any], outcome: Outcome) -> None:  # noqa: ANN401
    """Upstream's discharge and evaluation of ``jaxpr`` on ``args`` into ``outcome``."""
    import jax
    from jax._src.state.discharge import discharge_state

    closed = _timed("discharge", lambda: discharge_state(jaxpr), outcome)
    if closed is None:
        return

    def evaluate(*xs: Any) -> Any:  # noqa: ANN401
        return jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *xs)

    cpu = jax.devices("cpu")[0]

    def go() -> list[np.ndarray]:
        with jax.default_device(cpu):
            return [np.asarray(x) for x in jax.jit(evaluate)(*_initial(args))]

    outcome.outputs = _timed("eval", go, outcome)


def interpret_outputs(fn: Function, args: Sequence[Any], **options: Any) -> list[np.ndarray]:  # noqa: ANN401
    """Results, then the final value of each ref input, of interpreting ``fn``."""

    values = _initial(args)
    results = interpret(fn, *values, **options)
    return [*results, *(v for a, v in zip(args, values, strict=True) if isinstance(a, RefArg))]


def run_minipallas(report: Report, args: Sequence[Any], compile: bool = True) -> None:  # noqa: A002
    """The ``interpret``, ``discharge`` and (with ``compile``) ``compile`` ways, on the
    imported program."""
    from minipallas.compiled import compile as compile_fn

    interp = report.outcomes["interpret"] = Outcome("interpret")
    fn = _timed("import", lambda: minipallas.from_jaxpr(report.jaxpr), interp)
    if fn is None:
        for way in ("discharge", "compile") if compile else ("discharge",):
            report.outcomes[way] = Outcome(way, error=interp.error, stage="import")
        return
    report.program = fn
    interp.outputs = _timed("interpret", lambda: interpret_outputs(fn, args), interp)

    dis = report.outcomes["discharge"] = Outcome("discharge")
    pure = _timed("discharge", lambda: run_pipeline(fn, "discharge"), dis)
    if pure is not None:
        arrays = [a.value if isinstance(a, RefArg) else a for a in args]
        dis.outputs = _timed("interpret", lambda: _pure(pure, arrays), dis)
    if not compile:
        return

    comp = report.outcomes["compile"] = Outcome("compile")
    plant = report.case.plant
    report.compiled = fn if plant is None else _timed("plant", lambda: plant(fn), comp)
    compiled = None
    if report.compiled is not None:
        compiled = _timed("compile", lambda: compile_fn(report.compiled), comp)
    if compiled is not None:
        comp.outputs = _timed("run", lambda: list(compiled(*_initial(args))), comp)


def _pure(fn: Function, arrays: Sequence[Any]) -> list[np.ndarray]:

    return list(interpret(fn, *_initial(arrays)))


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


XLA_WAYS = ("upstream", "compile")  # computed by XLA: compared with BASE within the envelope


def numerics_envelope(report: Report) -> Envelope | None:
    """The envelope of the import around ``BASE`` 's outputs, computed on first use (most
    programs agree bit for bit and never need it); None if it cannot be computed."""
    if report.envelope is None and report.program is not None:
        base = report.outcomes[BASE].outputs
        try:
            report.envelope = envelope(report.program, report.case.args, base)
        except Exception:  # a perturbed run failed: no envelope, so bits decide
            return None
    return report.envelope


def closeness(
    report: Report, way: str, k: int, want: np.ndarray, got: np.ndarray, ulps: int
) -> tuple[str | None, Distance | None]:
    """Output ``k`` of ``way`` against ``want`` (``BASE`` 's): None if it matches (to the bit
    with ``ulps``, or, for an XLA way's float output, within the envelope), else why; and the
    distance when the envelope was consulted."""
    message = compare(want, got, ulps)
    if message is None or way not in XLA_WAYS or message.startswith("type"):
        return message, None
    if not is_float(np.asarray(want)):
        return message, None
    env = numerics_envelope(report)
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
    """The first output where a way that ran differs from ``BASE``, trying minipallas's own
    ways first (``COMPARED`` order). XLA ways' float outputs are judged by the envelope; the
    distance of each that needed it is kept in ``report.distances``."""
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
        for k, (label, w, g) in enumerate(zip(report.labels, base.outputs, o.outputs, strict=True)):
            message, d = closeness(report, way, k, w, g, tolerance)
            if d is not None and (
                way not in report.distances or _farther(d, report.distances[way])
            ):
                report.distances[way] = d
            if message is not None:
                return Difference(BASE, way, label, message, d)
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


def _labels(case: Case, n_outputs: int) -> list[str]:
    refs = [i for i, a in enumerate(case.args) if isinstance(a, RefArg)]
    n_results = n_outputs - len(refs)
    return [f"result {i}" for i in range(n_results)] + [f"final value of ref {i}" for i in refs]


# -- the harness ---------------------------------------------------------------------------


def run(case: Case, *, compile: bool = True) -> Report:  # noqa: A002 - the way's name
    """Runs ``case`` every way, compares, and classifies (see the module docstring).

    ``compile=False`` skips the ``compile`` way (the fuzzer's fast mode).
    """
    import jax

    from minipallas.difftest.classify import classify

    report = Report(case)
    up = report.outcomes["upstream"] = Outcome("upstream")
    report.jaxpr = _timed("trace", lambda: jax.make_jaxpr(case.fn)(*abstract(case.args)), up)
    if report.jaxpr is not None:
        run_upstream(report.jaxpr, case.args, up)
        run_minipallas(report, case.args, compile)
    if case.reference is not None:
        ref_way = report.outcomes["reference"] = Outcome("reference")
        ref_way.outputs = _timed(
            "interpret", lambda: interpret_outputs(case.reference, case.args), ref_way
        )
    counts = [len(o.outputs) for o in report.outcomes.values() if o.ok]
    report.labels = _labels(case, counts[0]) if counts else []
    report.difference = first_difference(report, case.ulps)
    report.finding = classify(report)
    return report


def check(case: Case) -> Report:
    """``run(case)``; raises ``Disagreement`` unless every way agrees."""
    report = run(case)
    if not report.ok:
        raise Disagreement(report)
    return report
