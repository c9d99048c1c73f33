"""Hoisting: the work of a sequential grid loop that no state feeds, done once before it.

Along a sequential grid axis the body runs point after point because it carries state: an
output block it revisits (an accumulator) or scratch. Yet much of such a body often reads its
input blocks only: ``x_ref[...].sum()`` before ``o_ref[...] +=``, ``q @ k.T`` before an online
softmax, each step's ``dot`` in a blocked matmul. ``split`` cuts the body in two:

- ``pre``, the ops that depend on an input block and on no state, as a function of (grid
  indices, input blocks) returning the values the rest uses;
- ``post``, every other op, taking those values as extra parameters after the body's own.

``vectorized_grid`` batches ``pre`` over the whole grid and runs it once before the loops; each
step then takes its point's slice of pre's results and runs only ``post``. A 1-D sum becomes
one batched reduction and a loop of scalar adds, which XLA runs as one small loop.

The pass ``hoist-invariant{grid=8x4,inputs=2}`` (``hoist_invariant``) gives the cut as IR: the
body becomes ``call @<body>_pre`` then ``call @<body>_post``, the same function of its
parameters, which a pipeline prints and a later pass (or the text parser) takes as any other;
``parts`` reads the two functions back. ``vectorized_grid`` runs the pass through the pass
manager on the body the pipeline ``bind-grid,discharge,cleanup,drop-inputs,cleanup`` made.

Bits do not change: ``pre`` runs the body's own ops on the same blocks, batched (in exact mode)
only as ``passes.batching`` keeps their bits; where it cannot, nothing is hoisted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from minipallas.ir import dtypes
from minipallas.ir.builder import params as fresh
from minipallas.ir.core import Block, Function, Op
from minipallas.ir.errors import PassError
from minipallas.ir.opdef import OPS
from minipallas.ir.types import ArrayType
from minipallas.passes.cleanup import cleanup
from minipallas.passes.registry import INT, INTS, Option, register

# Only these are worth running apart from their step: the rest XLA fuses into its consumers.
WORTH_HOISTING = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "dot"})

# Pre's results are kept for every grid point at once. Hoisting pays where they are few (a sum
# per block: the loop then carries scalars); where they are as big as the blocks (flash
# attention's ``q @ k.T``, a matmul's per-step dots: 16 and 32 MiB) the extra memory traffic
# made those kernels twice as slow as their loops, so beyond this the loop stays as it is. Up to
# half of this CPU's 4 MiB L2 it pays: a 256x384x512 matmul's three k-steps of dots (1.5 MiB),
# batched into one dot before the loop, took 1.14 ms against 1.25 ms in the loop.
MAX_HOISTED_BYTES = 2 << 20


@dataclass(frozen=True)
class Split:
    pre: Function  # (grid indices, input blocks) -> the hoisted values
    post: Function  # (the body's parameters, the hoisted values) -> the body's results


def split(body: Function, n_grid: int, n_in: int, points: int) -> Split | None:
    """``body`` (parameters: grid indices, input blocks, then state) cut into pre and post, or
    None when no reduction or dot is free of state, or its results for ``points`` grid points
    would take more than ``MAX_HOISTED_BYTES``."""
    params = body.params
    state = set(params[n_grid + n_in :])
    fed = set(params[n_grid : n_grid + n_in])
    hoisted, kept, free = [], [], []
    for op in body.body.ops:
        if not OPS[op.name].pure or any(v in state for v in op.operands):
            state.update(op.results)
            kept.append(op)
            continue
        free.append(op)  # grid-index arithmetic and constants go to both sides
        if any(v in fed for v in op.operands):
            fed.update(op.results)
            hoisted.append(op)
        else:
            kept.append(op)
    if not any(op.name in WORTH_HOISTING for op in hoisted):
        return None
    used = {v for op in kept for v in op.operands} | set(body.body.results)
    values = tuple(r for op in hoisted for r in op.results if r in used)
    if points * sum(_bytes(v.type) for v in values) > MAX_HOISTED_BYTES:
        return None
    pre = Function(f"{body.name}_pre", Block(params[: n_grid + n_in], free, values))
    post = Function(f"{body.name}_post", Block((*params, *values), kept, body.body.results))
    return Split(cleanup(pre), cleanup(post))


@register(
    "hoist-invariant",
    Option("grid", INTS, "the kernel's grid: the body's first parameters are its indices"),
    Option("inputs", INT, "how many input blocks follow the grid indices (then the state)"),
    doc="a discharged kernel body's stateless reductions and dots split off: call pre, call post",
)
def hoist_invariant(fn: Function, *, grid: tuple[int, ...], inputs: int) -> Function:
    """``fn`` as ``call @<fn>_pre`` (grid indices, input blocks) then ``call @<fn>_post`` (the
    parameters and pre's results), or ``fn`` itself when ``split`` finds nothing to hoist."""
    if inputs < 0 or len(grid) + inputs > len(fn.params):
        raise PassError(
            f"hoist-invariant: @{fn.name} has {len(fn.params)} parameters, not {len(grid)} grid "
            f"indices and {inputs} input blocks",
            fix="grid= is the kernel's grid, inputs= its number of inputs",
        )
    cut = split(fn, len(grid), inputs, math.prod(grid))
    if cut is None:
        return fn
    args = fresh(fn.param_types)
    values = fresh(cut.pre.result_types)
    results = fresh(fn.result_types)
    pre = Op("call", args[: len(grid) + inputs], values, {"callee": cut.pre})
    post = Op("call", (*args, *values), results, {"callee": cut.post})
    return Function(fn.name, Block(args, (pre, post), results))


def parts(fn: Function) -> Split | None:
    """The pre and post of a body ``hoist_invariant`` split; None when it left it as it was."""
    ops = fn.body.ops
    if len(ops) != 2 or any(op.name != "call" for op in ops):
        return None
    pre, post = ops
    if post.operands != (*fn.params, *pre.results) or post.results != fn.body.results:
        return None
    return Split(pre.attrs["callee"], post.attrs["callee"])


def _bytes(t: ArrayType) -> int:
    return math.prod(t.shape) * dtypes.itemsize(t.dtype)
