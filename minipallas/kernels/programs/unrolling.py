"""Unrolling: a sequential grid loop traced several steps per trip, so XLA sees them together.

XLA:CPU runs a while loop's body one trip after another, and each trip's ops one after
another; its runtime runs independent ops of one program side by side on its thread pool. A
blocked matmul's eight k-steps are eight dots that no state feeds and a chain of adds: as a
loop, each dot waits for the last add; unrolled, the dots run together and the adds follow
(flash attention's key steps likewise: each step's ``q @ k.T`` and most of its ``exp`` wait
only for the running max). The ops are the same ops on the same blocks, so the bits are the
loop's (measured on both AMD EPYCs, AVX2 and AVX-512; ``tests/kernels/test_unrolling.py``
checks them against upstream on the machine the suite runs on), once each step's index reaches
the body through an ``optimization_barrier`` (``vectorized_grid``): traced inline it is a
constant, and XLA folded ``(x + 1.0) - 1.0`` to ``x`` with it at step 1, where upstream's loop
variable keeps both roundings (found by ``make fuzz-kernels``, seed 7).

Measured on the 13-core AMD EPYC, ms per call, loop against unrolled, same bits: the 1024³
matmul in 128-blocks 10.8 against 6.0 (``jax.jit``'s one dot 2.6-3.5), the 256x384x512 one
1.70 against 1.24; flash attention (S=2048, 16 key steps) 17.8 rolled, 6.4 unrolled whole and
6.2 eight steps a trip (``jax.jit`` 5.8-6.2), which XLA compiles in 275 ms against 682 ms
whole (rolled: 240-550). On a 2-core machine unrolled and rolled take the same time. A step
of little work gains nothing and loses: the 8-step sum of 1024 floats took 37 µs rolled and
62 µs unrolled, its eight small reductions handed to other threads (its sums are hoisted now,
written out in XLA's order: ``passes/xla_cpu/exactness.py``). A step with no reduction
or dot (what is left of a blocked matmul's step once its dot is hoisted: ``hoisting``)
unrolls whatever its size: its elementwise ops fuse across the steps into one kernel, and the
loop's own cost goes (the 256x384x512 matmul, its dots hoisted: 1.40 against 1.23 ms).
"""

from __future__ import annotations

import math

from minipallas.ir.core import Function
from minipallas.passes.kernel.hoisting import WORTH_HOISTING

# Steps traced per trip: as fast as unrolling every step, for well under half the compile time.
UNROLL = 8

# A step must do at least this much work (multiply-adds of its dots, elements of its other
# results) for running steps side by side to pay for handing them to other threads.
MIN_STEP_WORK = 1 << 20


def unroll(body: Function) -> int:
    """How many steps of a sequential grid loop whose step is ``body`` (batched over the
    batched axes) one trip of the loop traces: ``UNROLL``, or 1 (rolled) for steps too small
    to gain (module doc)."""
    kernels = any(op.name in WORTH_HOISTING for f in (body, *body.callees()) for op in f.walk())
    return UNROLL if not kernels or step_work(body) >= MIN_STEP_WORK else 1


def step_work(fn: Function) -> int:
    """A rough count of the work of one call of ``fn``: a dot's multiply-adds, and one per
    element of every other op's results."""
    work = 0
    for op in (op for f in (fn, *fn.callees()) for op in f.walk()):
        for result in op.results:
            elements = math.prod(getattr(result.type, "shape", ()))
            work += elements * (op.operands[0].type.shape[-1] if op.name == "dot" else 1)
    return work
