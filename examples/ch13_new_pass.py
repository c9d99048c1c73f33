"""Chapter 13: write a new pass from scratch, and run it from minipallas-opt.

The pass turns ``x * 2`` into ``x + x`` for floats. It is exact in IEEE arithmetic (both
round the same real number once; inf, -0.0 and NaN come out alike), so the program's bits
do not change — which this chapter checks on the reference interpreter and on XLA.

A pass in minipallas is a function from a ``Function`` to a new ``Function``:
1. it never changes its input (other passes, caches and the user may hold it), so it builds
   new blocks, reusing the values and ops it leaves alone;
2. it walks each block forward, keeping a map from old values to their replacements, and
   recurses into regions (loop bodies, ``cond`` branches, ``run_scoped`` bodies): a region
   is closed (it uses only its own parameters and values defined inside it), so each block
   can be rewritten on its own;
3. ``@register`` adds it to the pass registry: ``minipallas.passes.pipeline.run(fn,
   "mul-by-two,discharge")`` runs it, verified after each pass, and so does the command line
   once it has loaded this file: ``minipallas-opt k.mir --load examples/ch13_new_pass.py
   --pass-pipeline=mul-by-two`` (the demo below stays quiet then: it runs only as a script).

Run: ``.venv/bin/python examples/ch13_new_pass.py``. Chapter 15 writes the same rewrite as a
cleanup pattern, in a third of the code.
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir import dtypes
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.passes import pipeline
from minipallas.passes.registry import register


def _is_two(value: Value, defs: dict[Value, Op]) -> bool:
    """Whether ``value`` is the constant 2, possibly broadcast (how ``x * 2.0`` traces)."""
    op = defs.get(value)
    if op is not None and op.name == "broadcast_in_dim":
        op = defs.get(op.operands[0])
    if op is None or op.name != "constant":
        return False
    return np.all(op.attrs["value"].array() == 2)


def _rewrite(block: Block, replaced: dict[Value, Value]) -> Block:
    defs: dict[Value, Op] = {}
    ops: list[Op] = []
    for op in block.ops:
        operands = tuple(replaced.get(v, v) for v in op.operands)
        if op.name == "mul" and dtypes.is_float(op.result.type.dtype):
            x, y = operands
            other = x if _is_two(y, defs) else y if _is_two(x, defs) else None
            if other is not None:
                new = Op("add", (other, other), (Value(op.result.type),), {}, (), op.loc)
                replaced[op.result] = new.result
                ops.append(new)
                continue
        regions = tuple(_rewrite(r, replaced) for r in op.regions)
        if operands != op.operands or regions != op.regions:
            op = Op(op.name, operands, op.results, op.attrs, regions, op.loc)
        defs.update((r, op) for r in op.results)
        ops.append(op)
    results = tuple(replaced.get(v, v) for v in block.results)
    return Block(block.params, tuple(ops), results)


@register("mul-by-two", doc="x * 2 -> x + x for floats (exact in IEEE)")
def mul_by_two(fn: Function) -> Function:
    """A new function with every float ``x * 2`` as ``x + x``; ``fn`` is left as it was."""
    return Function(fn.name, _rewrite(fn.body, {}))


def kernel(x_ref, o_ref):
    def step(i, acc):
        return acc * 2.0 + x_ref[i]

    o_ref[...] = mp.fori_loop(0, 4, step, x_ref[...] * 2.0)


def main() -> None:
    fn = mp.trace(kernel, mp.RefType((4,), jnp.float32), mp.RefType((4,), jnp.float32))
    before = str(fn)
    print("--- before ---")
    print(fn)
    new = pipeline.run(fn, "mul-by-two,discharge,cleanup", verify=True)
    print("--- after mul-by-two,discharge,cleanup ---")
    print(new)
    assert str(fn) == before, "a pass must not change its input"
    assert " mul " not in str(new) and str(new).count(" add ") == 3

    rng = np.random.default_rng(0)
    x = rng.standard_normal(4).astype(np.float32)
    x[:3] = [np.inf, -0.0, np.nan]
    want = np.zeros(4, np.float32)
    mp.interpret(fn, x.copy(), want)  # refs are numpy arrays written in place
    _, got = mp.interpret(new, x, np.zeros(4, np.float32))  # pure: the refs' final values
    _, compiled = mp.compile(new)(x, np.zeros(4, np.float32))
    same = want.view(np.uint32).tolist() == got.view(np.uint32).tolist()
    same_xla = want.view(np.uint32).tolist() == compiled.view(np.uint32).tolist()
    assert same and same_xla
    print(f"same bits as before the pass (interpreter, XLA), inf/-0.0/NaN included: {same}")


if __name__ == "__main__":
    main()
