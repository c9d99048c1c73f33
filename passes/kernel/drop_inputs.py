"""Dropping a discharged kernel body's input results: the CPU program never writes inputs back.

``discharge`` turns every ref parameter into an array and returns each ref's final value, the
input blocks' too. A body that only reads its inputs returns those parameters themselves; the
batched CPU program (``vectorized_grid``) takes the body as a function of its blocks giving
the output blocks and scratch, so ``drop-inputs{count=N}`` removes the first N results, after
checking that each is the parameter it stands for. A body that writes an input block is
refused: a later grid point could read the write, so that kernel runs as loops (``grid``).
"""

from __future__ import annotations

from minipallas.ir.core import Block, Function
from minipallas.ir.errors import PassError
from minipallas.passes.registry import INT, Option, register


@register(
    "drop-inputs",
    Option("count", INT, "how many input blocks (the first ref results) to drop"),
    doc="a discharged kernel body without the results of the input blocks it only reads",
)
def drop_inputs(fn: Function, *, count: int) -> Function:
    """``fn`` returning all but its first ``count`` results, each of which must be its own
    parameter unchanged: discharge's results follow the refs, the last parameters."""
    results = fn.body.results
    first = len(fn.params) - len(results)
    if count < 0:
        raise PassError(f"drop-inputs: count={count} is negative", fix="e.g. drop-inputs{count=1}")
    for k in range(count):
        if k >= len(results) or first < 0 or results[k] is not fn.params[first + k]:
            raise PassError(
                f"drop-inputs: result {k} of @{fn.name} is not its input block unchanged "
                "(the body writes that input)",
                fix="such a kernel runs as loops over its grid (kernels/programs/grid.py)",
            )
    return Function(fn.name, Block(fn.params, fn.body.ops, results[count:]))
