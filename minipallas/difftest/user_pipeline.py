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

Whether the pipeline did anything is said too: ``texts`` is the IR it ran on before it and
after each of its passes, which ``minipallas-difftest`` counts per pass over its cases
(``user_passes.PassCoverage``), so a pass that never fired reads as such, not as agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import minipallas
from minipallas.compiled import compile as compile_fn
from minipallas.difftest.checks.program import kernel_eqns
from minipallas.difftest.outputs import RefArg, initial, interpret_outputs
from minipallas.difftest.report import Report, closeness, compare
from minipallas.interop.importer.kernel_call import kernel_from_eqn
from minipallas.ir.core import Function
from minipallas.passes.pipeline import pass_names
from minipallas.passes.pipeline import run as run_pipeline
from minipallas.passes.registry import PASSES
from minipallas.user_passes import Blame, first_bad_pass, pipeline_texts

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
        base = _cleaned(report)

        def program(prefix: str) -> Function:
            return run_pipeline(base, prefix, verify=True)

        def text(prefix: str) -> str:
            return str(program(prefix))

        inputs = [a.value if isinstance(a, RefArg) else a for a in args]  # its refs are arrays

    def interpreted(prefix: str) -> list[np.ndarray]:
        return interpret_outputs(program(prefix), inputs, collectives=mode)

    found = first_bad_pass(report.case.passes, interpreted, text, _bits)
    d = report.difference
    if found is not None or d is None or d.way != "compile":
        return found

    def compiled(prefix: str) -> list[np.ndarray]:
        return [np.asarray(x) for x in compile_fn(program(prefix))(*initial(inputs))]

    def enveloped(want: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> str | None:
        for k, (w, g) in enumerate(zip(want, got, strict=True)):
            message = closeness(report, "compile", k, w, g, report.case.ulps)[0]
            if message is not None:
                return f"compiled, {report.labels[k]}: {message}"
        return None

    want = report.outcomes["interpret"].outputs
    return first_bad_pass(report.case.passes, compiled, text, enveloped, want)


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
