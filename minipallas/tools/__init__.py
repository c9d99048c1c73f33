"""The tools: what tests and measures the compiler from outside (``minipallas.tools``).

The compiler (``ir``, ``passes``, ``lowering`` and the rest of ``minipallas``) never imports
this package; the tools import the compiler (``tests/test_layering.py``: ``TOOLS``). Rooms:

- ``difftest/``: the differential tester (cases, harness, verdicts, reports, its command line,
  the checks a finding runs, the devices it runs on);
- ``generate/``: random and directed programs and kernels;
- ``fuzz/``: one fuzzing loop (``loop``) with four front ends: ``programs`` (the interpreter
  against discharge and compile), ``upstream`` (against upstream JAX), ``kernels`` and ``tpu``;
- ``envelope/``: the numerics envelope a float output is judged by (perturbed and reordered
  runs, what each chip is allowed);
- ``corpora/``: the cases tests and bench both run, imported by name;
- ``progress`` (campaign bars and summaries), ``user_passes`` (a researcher's ``--load``).

Where a new check goes: a check that a kernel runs right on a chip is a case in
``corpora/`` run by ``difftest/`` (its verdict logic in ``difftest/``, its allowed numerics in
``envelope/chips``); a script that measures the chip (speed, numerics) goes in ``bench/chip/``.
"""
