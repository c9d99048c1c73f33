"""Chapter 5: cleanup: what discharge leaves behind, and the pass that removes it.

Discharge is local: each op becomes its pure form without looking around. So its output holds
work nobody needs. On a whole ref there is little: a read of all of it is its current array
and a write of all of it the new one, so discharge writes no ``slice`` for them. A window,
part of a ref, leaves more, and this kernel uses windows to show it: the old contents a
``swap`` returns, sliced even when unused (upstream's swap reads them too); reads of a window
just written (a ``slice`` of the ``dynamic_update_slice`` before it); a write of what was just
read; scratch overwritten before it is read; scalar constants broadcast to a shape.
``cleanup`` (``passes/cleanup.py``) removes it:

1. forward a stored window to a later read of the same window (``cleanup_patterns``);
2. fold constants and algebraic identities (``x * 1``, ``x + 0``), and CSE equal ops;
3. drop ops whose results are unused, and region results and carries nobody reads.

Each step holds for every input, so the bits do not change; this chapter checks them. That is
why the integer ``n * 1 + 0`` folds and a float ``x + 0.0`` would not: ``-0.0 + 0.0`` is
``+0.0``.
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu

F8 = mp.RefType((8,), jnp.float32)


def kernel(x_ref, o_ref, n_ref):
    def body(s_ref):
        s_ref[...] = jnp.zeros((8,), jnp.float32)  # overwritten before anyone reads it
        s_ref[:4] = x_ref[:4] * 2.0  # a swap: its old contents are sliced, and unused
        o_ref[:4] = s_ref[:4]  # the read of a window just written

    mp.run_scoped(body, tpu.VMEM((8,), jnp.float32))
    o_ref[4:] = o_ref[4:]  # a write of what was just read
    n_ref[...] = n_ref[...] * 1 + 0  # integer identities: exact, so folded


def main() -> None:
    fn = mp.trace(kernel, F8, F8, mp.RefType((), jnp.int32))
    pure = mp.discharge(fn)
    print(f"--- discharged: {mp.count_ops(pure)} ops ---")
    print(pure)
    clean = mp.cleanup(pure)
    print(f"--- cleaned: {mp.count_ops(clean)} ops ---")
    print(clean)
    print("--- cleanup{fold=false}: forwarding and dead code only, no folding ---")
    print(mp.passes.pipeline.run(pure, "cleanup{fold=false}"))

    x = np.array([1.5, -0.0, np.inf, np.nan, 3, -2, 0.25, 7], np.float32)
    args = (x, np.zeros(8, np.float32), np.int32(5))
    before, after = mp.interpret(pure, *args), mp.interpret(clean, *args)
    same = all(a.tobytes() == b.tobytes() for a, b in zip(before, after, strict=True))
    assert same and mp.count_ops(clean) < mp.count_ops(pure)
    print(f"same bits before and after cleanup: {same}")


if __name__ == "__main__":
    main()
