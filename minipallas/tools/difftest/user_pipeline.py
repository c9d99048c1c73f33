"""Where a case's pipeline (``Case.passes``: a researcher's passes) runs, and which pass a
finding comes from.

The pipeline runs where minipallas would run the researcher's pass:

- a case whose program has ``pallas_call`` kernels (``kernel_eqns``): on each traced kernel, as
  ``pallas_call(..., passes=PIPE)`` runs it (kernel passes on the kernel, function passes on
  its body). The ``discharge`` and ``compile`` ways run the import made so
  (``from_jaxpr(..., kernel_passes=PIPE)``); so do the TPU ways (``tpu``: the Mosaic module of
  each kernel after the pipeline; ``xla-tpu``) and, without a chip, libtpu's compile of
  minipallas's side;
- any other case: on its program after discharge and cleanup, before lowering. The
  ``discharge`` way interprets the import discharged, cleaned up and run through the pipeline,
  the ``compile`` way compiles it, and so does ``xla-tpu``. A pipeline with a kernel pass
  (``fuse-grid-steps``) has nothing to run on in such a case, which runs without it (its report
  says so).

The ``interpret`` way, the import as it is, stays the reference. A crash or a difference in a
way the pipeline ran in is blamed (``blame``) on the first pass after which the reference
interpreter's outputs of the program change, or that raises (``user_passes.first_bad_pass``);
for a ``compile`` difference the interpreter does not show, on the first pass after which the
compiled outputs leave the numerics envelope. The finding is then ``pass-bug``, named after the
pass, and the report shows the IR before and after it (for kernels, its text, ``str(kernel)``).
A ``@pattern`` of the ``--load`` files is applied by the cleanup before the pipeline too, where
no pass is to blame: when none is, the first such pattern without which the pipeline's outputs
are the ``interpret`` way's is (``pass-bug (pass pattern NAME)``, the IR without and with it).

Whether the pipeline did anything is said too: ``texts`` is the IR it ran on before it and
after each of its passes, which ``minipallas-difftest`` counts per pass over its cases
(``user_passes.PassCoverage``), so a pass that never fired reads as such, not as agreement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import minipallas
from minipallas.interop.importer.rules.kernel_call import kernel_from_eqn
from minipallas.ir.core import Function
from minipallas.lowering.runtime.compiled import compile as compile_fn
from minipallas.passes.cleanup_patterns import PATTERNS
from minipallas.passes.kernel.reassociate import reassociates
from minipallas.passes.pipeline import pass_names
from minipallas.passes.pipeline import run as run_pipeline
from minipallas.passes.registry import PASSES
from minipallas.tools.difftest.checks.program import kernel_eqns
from minipallas.tools.difftest.outputs import RefArg, initial, interpret_outputs
from minipallas.tools.difftest.report import Report, closeness, compare
from minipallas.tools.user_passes import LOADED, Blame, first_bad_pass, pipeline_texts

KERNEL_WAYS = ("discharge", "compile", "tpu", "xla-tpu")  # a kernel case's pipeline's ways
PROGRAM_WAYS = ("discharge", "compile", "xla-tpu")  # a program's


def ways(report: Report) -> tuple[str, ...]:
    """The ways the case's pipeline runs in (module doc); none without a pipeline, or for a
    kernel pass in a case without kernels."""
    passes = report.case.passes
    if not passes or report.jaxpr is None:
        return ()
    if any(kernel_eqns(report.jaxpr.jaxpr)):
        return KERNEL_WAYS
    kernel_pass = any(PASSES[name].subject == "kernel" for name in pass_names(passes))
    return () if kernel_pass else PROGRAM_WAYS


def on_kernels(report: Report) -> bool:
    return ways(report) == KERNEL_WAYS


def import_with_pipeline(report: Report) -> Function:
    """The import with the case's pipeline run on each kernel."""
    return minipallas.from_jaxpr(report.jaxpr, kernel_passes=report.case.passes)


def after_cleanup(report: Report, pure: Function) -> Function:
    """The discharged program ``pure`` cleaned up, then through the case's pipeline."""
    return run_pipeline(pure, f"cleanup,{report.case.passes}")


def pipeline_ir(report: Report) -> str:
    """The IR after the case's pipeline: each kernel (its text, ``str(kernel)``), or the program."""
    if not ways(report):
        return "(not run: the case has no kernel, and the pipeline has a kernel pass)"
    if on_kernels(report):
        kernels = [kernel_from_eqn(e, passes=report.case.passes) for e in _eqns(report)]
        return "\n".join(str(k) for k in kernels)
    return str(report.pipeline_program) if report.pipeline_program is not None else "(none)"


def texts(report: Report) -> list[str]:
    """The IR the case's pipeline runs on before it and after each of its passes, as far as
    they run (each kernel's text, joined; or the program after discharge and cleanup), for
    ``PassCoverage``; empty when the pipeline did not run on the case (``ways``, or the import
    failed)."""
    if not ways(report) or report.program is None:
        return []
    passes = report.case.passes
    try:
        if not on_kernels(report):
            return pipeline_texts(_cleaned(report), passes)
        each = [pipeline_texts(kernel_from_eqn(e), passes) for e in _eqns(report)]
    except Exception:  # the ways report the failure; nothing here to count
        return []
    return ["\n".join(t[k] for t in each) for k in range(min(map(len, each)))]


def blame(report: Report) -> Blame | None:
    """The pass of the case's pipeline a finding in its ways comes from (module doc)."""
    mode, args = report.case.collectives, report.case.args
    if on_kernels(report):
        eqns = _eqns(report)

        def program(prefix: str) -> Function:
            return minipallas.from_jaxpr(report.jaxpr, kernel_passes=prefix)

        def text(prefix: str) -> str:
            return "\n".join(str(kernel_from_eqn(e, passes=prefix)) for e in eqns)

        inputs: Sequence[Any] = args
    else:

        def program(prefix: str) -> Function:  # anew each time: a pattern may be set aside
            return run_pipeline(_cleaned(report), prefix, verify=True)

        def text(prefix: str) -> str:
            return str(program(prefix))

        inputs = [a.value if isinstance(a, RefArg) else a for a in args]  # its refs are arrays

    def interpreted(prefix: str) -> list[np.ndarray]:
        return interpret_outputs(program(prefix), inputs, collectives=mode)

    def compiled(prefix: str) -> list[np.ndarray]:
        return [np.asarray(x) for x in compile_fn(program(prefix))(*initial(inputs))]

    # a pipeline that may reorder sums moves the outputs within the envelope with sum orders
    # free (``discharge`` 's), which then judges the interpreted outputs and the compiled ones
    fast = reassociates(report.case.passes)

    def enveloped(want: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> str | None:
        for k, (w, g) in enumerate(zip(want, got, strict=True)):
            way, ulps = ("discharge", 0) if fast else ("compile", report.case.ulps)
            message = closeness(report, way, k, w, g, ulps)[0]
            if message is not None:
                return f"{'reordered' if fast else 'compiled'}, {report.labels[k]}: {message}"
        return None

    passes, base = report.case.passes, report.outcomes.get("interpret")
    want = None if base is None else base.outputs
    d = report.difference
    tries = [(interpreted, enveloped if fast else _bits)]
    if d is not None and d.way == "compile":  # a difference the interpreter may not show
        tries.append((compiled, enveloped))
    for outputs, differs in tries:
        found = first_bad_pass(passes, outputs, text, differs, None if differs is _bits else want)
        if found is None and want is not None:
            found = _loaded_pattern(passes, outputs, text, differs, want)
        if found is not None:
            return found
    return None


class PatternBlame(Blame):
    """A ``@pattern`` of the ``--load`` files that a finding comes from: ``step`` is
    ``pattern NAME``; ``before`` is the IR after the pipeline without it, ``after`` with it."""

    def __str__(self) -> str:
        return (
            f"{self.step} (a @pattern of the --load files, which every cleanup applies, before "
            f"the pipeline '{self.pipeline}' too): {self.why}"
        )

    def text(self) -> str:
        after = self.after if self.after is not None else "(its result fails: no IR)"
        return "\n".join(
            [f"the pattern: {self}", f"--- IR after the pipeline without {self.step} ---"]
            + [self.before, f"--- IR after the pipeline with {self.step} ---", after]
        )


def _loaded_pattern(
    passes: str,
    outputs: Callable[[str], Sequence[np.ndarray]],
    text: Callable[[str], str],
    differs: Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], str | None],
    want: Sequence[np.ndarray],
) -> Blame | None:
    """The first ``@pattern`` of the ``--load`` files without which the pipeline's outputs are
    ``want`` (the ``interpret`` way's), while with it they differ; ``first_bad_pass`` cannot
    see it, since the cleanup before the pipeline applies it too."""
    loaded = [
        (fns, f) for fns in PATTERNS.values() for f in fns if getattr(f, "__module__", "") == LOADED
    ]
    if not loaded:
        return None
    try:
        why, after = differs(want, outputs(passes)), text(passes)
    except Exception as e:  # with them the pipeline's result fails
        why, after = f"its result fails: {type(e).__name__}: {e}", None
    if why is None:
        return None
    for fns, f in loaded:
        k = fns.index(f)
        del fns[k]  # set aside for one run, put back whatever happens
        try:
            cured = differs(want, outputs(passes)) is None
            before = text(passes)
        except Exception:  # without it the result fails too: not this pattern's doing
            cured = False
        finally:
            fns.insert(k, f)
        if cured:
            step = f"pattern {f.__name__}"
            return PatternBlame(passes, step, 0, f"the outputs change: {why}", before, after)
    return None


def _bits(want: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for k, (w, g) in enumerate(zip(want, got, strict=True)):
        message = compare(w, g)
        if message is not None:
            return f"output {k} (interpreted): {message}"
    return None


def _cleaned(report: Report) -> Function:
    """The import discharged and cleaned up: what a case without kernels runs its pipeline on."""
    discharge = f"discharge{{collectives={report.case.collectives}}}"
    return run_pipeline(report.program, f"{discharge},cleanup")


def _eqns(report: Report) -> list[Any]:
    return list(kernel_eqns(report.jaxpr.jaxpr))
