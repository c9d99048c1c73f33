"""The reference interpreter: runs minipallas IR with numpy, the ground truth for every pass.

``interpret(fn, *args)`` (public as ``minipallas.interpret``) evaluates a function: ``Ref``
arguments are numpy arrays mutated in place, and the results come back as a tuple of arrays.
Discharge, the XLA path and upstream JAX are all tested against it bit for bit, so its
semantics are written down, the rules apart from their machinery:

- ``rules/``: one file per op family, each registering its rules (``rules/__init__.py``);
- ``engine``: the environment, the rule table, blocks, ``Ref`` buffers and fill values;
- ``windows``: where an indexer lands, with upstream's clamp/drop rules or ``checks``;
- ``xla``: how XLA on CPU computes numbers (integer division, conversions, low-precision
  floats, subnormal flushing, its own transcendentals and summing orders), emulated with numpy,
  which the array rules follow;
- ``programs``, ``grid_steps``, ``schedules``, ``races``, ``inflight``: kernels that run as
  several programs, their steps, schedules, races and copies in flight.
"""

from minipallas.ir.interpret import rules  # noqa: F401  (registers every rule)
from minipallas.ir.interpret.api import interpret
from minipallas.ir.interpret.engine import RULES, Interpreter, Ref

__all__ = ["RULES", "Interpreter", "Ref", "interpret"]
