"""Differential testing of minipallas against upstream JAX (``minipallas.tools.difftest``).

- ``Case(name, fn, args)``: a JAX function over refs and arrays with its inputs (``ref(x)``
  marks a ref input); ``run(case)`` runs it upstream (``discharge_state`` + evaluation) and
  through minipallas (``from_jaxpr``, interpret, discharge, compile), compares every output bit
  for bit and returns a ``Report`` whose ``finding`` classifies any disagreement (``classify``,
  ``KNOWN``: the known upstream defects); ``check(case)`` raises ``Disagreement`` unless all
  agree. Float outputs XLA computed (``compile``, ``upstream``) that differ in bits are judged
  by the numerics envelope (``envelope``: the interpreter re-run under the freedoms a correct
  compiler has): inside it the finding is ``within-envelope``, with its distance in ulps and as
  a fraction of the envelope; outside, a ``compile`` bug names the first op out of its
  envelope (``bisect``). ``Case.plant`` plants a bug in what ``compile`` compiles.
  ``Case.passes`` runs a researcher's pipeline on the case's kernels, or on its program after
  discharge and cleanup (``user_pipeline``); a finding it causes is ``pass-bug``, naming the
  pass, with its IR before and after.
- ``emit(fn)`` / ``trace(fn)``: a minipallas program (e.g. a generated one) as an upstream JAX
  function over refs, and its jaxpr: how the fuzzer (``python -m
  minipallas.tools.fuzz.upstream``) runs one random program both ways.
- ``minipallas-difftest`` (``cli``): runs the cases a Python file defines, or the fuzzer.
"""

from minipallas.interop.exporter.stateful import EmitError, emit, trace
from minipallas.tools.difftest.classify import KINDS, KNOWN, Finding, Known
from minipallas.tools.difftest.harness import Disagreement, check, run
from minipallas.tools.difftest.outputs import RefArg, ref
from minipallas.tools.difftest.report import Case, Outcome, Report, compare

__all__ = [
    "KINDS",
    "KNOWN",
    "Case",
    "Disagreement",
    "EmitError",
    "Finding",
    "Known",
    "Outcome",
    "RefArg",
    "Report",
    "check",
    "compare",
    "emit",
    "ref",
    "run",
    "trace",
]
