"""The bench scripts, each run as a module from the repository root::

    python -m bench.benchmarks.kernels_bench --small

- ``benchmarks/``: speed tables (the IR, discharge, kernels on the CPU and on the chip, a
  call's overhead, the race detector), and op counts;
- ``chip/``: scripts run on a TPU (or GPU) machine: the hardware check, the bug corpus on the
  chip, the mesh and fidelity checks, the chip's numerics (most run on the CPU too);
- ``numerics/``: measurements of XLA:CPU's float numerics that the interpreter's rules and
  the difftest's envelope are built on;
- ``mutation/``: ``make mutate``, planted bugs against the corpora and the fuzzers;
- here, what several of them share: ``common`` (sizes, timing, tables, generated programs),
  ``realistic_kernels`` (kernels at the sizes people run them).

Importing this package sets up ``sys.path`` for them, here and nowhere else: the checkout's
root, which ``python -m`` puts first, goes last. Its ``minipallas/`` folder is not the package
(``setup.cfg`` maps ``ir/``, ``passes/`` and ``lowering/`` into it), so the installed
minipallas must be found before it: a wheel on ``PYTHONPATH`` on a TPU machine, the editable
install in a checkout (whose finder comes after every path). The corpora the scripts run (the
kernel suite, the bug corpus, the mesh corpus ...) are modules of that package,
``minipallas.tools.corpora``, imported by name as the tests import them.

Nothing here imports minipallas: some chip scripts run where only jax and numpy are.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _is_root(entry: str) -> bool:
    return Path(entry or ".").resolve() == ROOT


sys.path[:] = [e for e in sys.path if not _is_root(e)] + [str(ROOT)]
