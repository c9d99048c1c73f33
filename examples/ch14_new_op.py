"""Chapter 14: add a stateful op and its discharge rule from scratch.

The op is ``fill %r[window], %c``: write the scalar ``%c`` to every element of a window of a
ref (a ``memset``). An op in minipallas is four small pieces, each in the table of its stage:

1. a declaration (``ir.opdef.declare``): operands, text syntax, effect and type rule. Its
   effect is a *write* of operand 0: the effects analysis, the verifier and the printer read it
   from here, nothing else needs to know;
2. an interpreter rule (``ir.interpret.engine.rule``): what it does to numpy storage. This is
   the op's meaning; every other rule is checked against it;
3. a discharge rule (``passes.discharge.engine.rule``): the same write as pure ops on the
   ref's current value (a broadcast, then the window written with ``dynamic_update_slice`` or
   ``slice`` updates: ``Access.write_window`` picks the op the indexer needs);
4. nothing for StableHLO, Mosaic or Triton on the CPU path: after discharge no ``fill`` is left.

The rules read the operands by the names the declaration gives them (``op.group("indices")``);
what the discharge rule uses (``scope.value``, ``scope.handles``, ``scope.emit``, ``Access``,
``facts``) is explained in docs/guides/extending.md, "Writing a discharge rule".

The program is written in text IR (the parser knows ``fill`` from its declaration), discharged,
and run three ways: the interpreter on the stateful program, the interpreter on the pure one,
and XLA. All three give the same bits.

Run: ``.venv/bin/python examples/ch14_new_op.py``.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np

import minipallas as mp
from minipallas.ir import indexing
from minipallas.ir.core import Op, Value
from minipallas.ir.interpret import windows
from minipallas.ir.interpret.engine import Interpreter
from minipallas.ir.interpret.engine import rule as interpreter_rule
from minipallas.ir.opdef import WRITE, Attrs, Regions, Types, Variadic, declare, require
from minipallas.ir.opset.common import count_dyn, ref_operand
from minipallas.ir.syntax import Windowed
from minipallas.ir.types import ArrayType
from minipallas.passes.discharge.engine import DischargeScope
from minipallas.passes.discharge.engine import rule as discharge_rule
from minipallas.passes.discharge.views import Access
from minipallas.passes.indexer_facts import facts


# 1. the declaration: ``fill %r[<indexer>], %c`` (one value operand after the indices)
@declare("fill", operands=("ref", Variadic("indices"), "value"), syntax=Windowed(1), effect=WRITE,
         pure=False)  # fmt: skip
def fill(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Write a scalar to every element of a window: ``fill %r[2:6], %c``."""
    ref = ref_operand(types)
    value = types[-1]
    require(len(types) == 2 + count_dyn(attrs), "expected the indices, then one value")
    require(
        isinstance(value, ArrayType) and value.shape == () and value.dtype == ref.dtype,
        f"the value must be a {ref.dtype} scalar, got {value}",
    )
    return ()


# 2. the interpreter rule: the op's meaning, on the ref's numpy storage
@interpreter_rule("fill")
def _fill_interpreted(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    ref, indexer = args[0], op.attrs["indexer"]
    indices = args[op.slices()["indices"]]  # the operands by their declared names
    access = windows.through(ref, windows.locate(interp, op, indexer, ref.shape, indices))
    windows.write(ref.data, access, args[-1])  # a scalar broadcasts over the window
    if ref.written is not None:  # initialization tracking: these elements are now written
        windows.write(ref.written, access, True)
    return ()


# 3. the discharge rule: the same write as pure ops on the ref's current value
@discharge_rule("fill")
def _fill_discharged(scope: DischargeScope, op: Op) -> Sequence[Value]:
    known = facts(op.attrs["indexer"])
    (ref,), indices, (value,) = op.group("ref"), op.group("indices"), op.group("value")
    access = Access(scope, scope.handles[ref], op.loc)
    dyn = [scope.value(v) for v in indices]
    shape = indexing.result_shape(op.attrs["indexer"], [v.type for v in indices])
    value = scope.emit("broadcast_in_dim", [scope.value(value)], op.loc, shape=shape, dims=())
    access.write_window(known, dyn, value)
    return []  # fill has no results


PROGRAM = """
func @clear_rows(%0: Ref{f32[4,8]}, %1: i32[]) -> () {
  %2 = constant 0.0 : f32[]
  fill %0[ds(%1, 2), :], %2
  %3 = constant -1.0 : f32[]
  fill %0[3, 0:4], %3
  return
}
"""


def main() -> None:
    fn = mp.parse(PROGRAM)
    mp.verify(fn)
    print("--- the stateful program (its effects come from fill's declaration) ---")
    print(fn)
    assert "effects {write 0}" in str(fn)

    pure = mp.cleanup(mp.discharge(fn))
    mp.verify(pure)
    print("--- discharged and cleaned: fill became broadcasts and window updates ---")
    print(pure)
    assert "fill" not in str(pure) and "dynamic_update_slice" in str(pure)

    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    start = np.int32(1)
    stateful = x.copy()
    mp.interpret(fn, stateful, start)  # the ref is written in place
    (discharged,) = mp.interpret(pure, x, start)  # the ref's final value is a result
    (compiled,) = mp.compile(pure)(x, start)
    expected = x.copy()
    expected[1:3, :] = 0.0
    expected[3, 0:4] = -1.0
    assert np.array_equal(stateful, expected)
    assert np.array_equal(discharged, expected) and np.array_equal(compiled, expected)
    print("interpreter (stateful) == interpreter (discharged) == XLA == numpy: True")


if __name__ == "__main__":
    main()
