"""The reference interpreter: runs minipallas IR with numpy, the ground truth for every pass.

``interpret(fn, *args)`` (public as ``minipallas.interpret``) evaluates a function: ``Ref``
arguments are numpy arrays mutated in place, and the results come back as a tuple of arrays.
Discharge, the XLA path and upstream JAX are all tested against it bit for bit, so its
semantics are written down, one file per op family:

- ``engine``: the environment, the rule table, blocks, ``Ref`` buffers and fill values;
- ``windows``: where an indexer lands, with upstream's clamp/drop rules or ``checks``;
- ``xla``: how XLA on CPU computes numbers (integer division, conversions, low-precision
  floats, subnormal flushing, its own transcendentals and summing orders), emulated with numpy,
  which the array rules follow;
- ``state``, ``views``, ``scoped``, ``control``, ``kernel``, ``arrays``, ``indexed``: the rules.
"""

from minipallas.ir.interpret import (  # noqa: F401  (each registers its rules)  # noqa: F401, E402  (structural ops)
    arrays,
    atomic,
    collective,
    control,
    debug,
    dma,
    exchange,
    indexed,
    kernel,
    lanes,
    layout,
    mesh,
    platform,
    scans,
    scoped,
    semaphore,
    sorting,
    state,
    views,
)
from minipallas.ir.interpret.api import interpret
from minipallas.ir.interpret.engine import RULES, Interpreter, Ref

__all__ = ["RULES", "Interpreter", "Ref", "interpret"]
