"""Chapter 15: a rewrite pattern: chapter 13's pass as one ``@pattern`` that cleanup applies.

Chapter 13 wrote ``x * 2 -> x + x`` as a whole pass: a walk over every block, a map from old
values to new ones, a rebuilt op wherever an operand changed. Most local rewrites need none of
that. A *pattern* sees one op (its operands already rewritten) and ``defs``, the op that
defined each value, and returns what to use instead:

- an existing ``Value``: the op disappears, its uses take that value;
- a new ``Op`` with the same results (``op.replace(...)``): cleanup tries the patterns on it
  again;
- ``None``: no match.

``cleanup`` walks the program, regions included, and tries the patterns of each op's name in
the order they were registered (``passes/cleanup_patterns.py`` holds its own: forwarding a
stored window to a read of it, dropping a write of what was read). A pattern must hold for
every input: this one does (IEEE ``x * 2`` and ``x + x`` round the same real number once).
"""

import numpy as np

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir import dtypes
from minipallas.passes.cleanup_patterns import pattern


def _is_two(value, defs) -> bool:
    """Whether ``value`` is the constant 2 (cleanup has already folded its broadcast)."""
    op = defs.get(value)
    return op is not None and op.name == "constant" and np.all(op.attrs["value"].array() == 2)


@pattern("mul")
def double_is_add(op, defs):
    """``x * 2`` -> ``x + x`` for floats."""
    if not dtypes.is_float(op.results[0].type.dtype):
        return None
    x, y = op.operands
    other = x if _is_two(y, defs) else y if _is_two(x, defs) else None
    if other is None:
        return None
    return op.replace(name="add", operands=(other, other))


def kernel(x_ref, o_ref):
    def step(i, acc):
        return acc * 2.0 + x_ref[i]

    o_ref[...] = mp.fori_loop(0, 4, step, x_ref[...] * 2.0)


def main() -> None:
    ref = mp.RefType((4,), jnp.float32)
    fn = mp.trace(kernel, ref, ref)
    pure = mp.discharge(fn)
    print("--- discharged ---")
    print(pure)
    clean = mp.cleanup(pure)  # the pattern runs here, inside the loop body too
    print("--- cleaned, with the pattern registered ---")
    print(clean)
    assert " mul " not in str(clean) and str(clean).count(" add ") == 3

    x = np.array([np.inf, -0.0, np.nan, 1.5], np.float32)
    _, want = mp.interpret(pure, x, np.zeros(4, np.float32))
    _, got = mp.interpret(clean, x, np.zeros(4, np.float32))
    same = want.view(np.uint32).tolist() == got.view(np.uint32).tolist()
    assert same
    print(f"same bits before and after the pattern, inf/-0.0/NaN included: {same}")


if __name__ == "__main__":
    main()
