"""``mp.effects`` prints as the IR prints effects, and its repr reads back."""

import minipallas as mp
from minipallas.ir.effects import Accum, Effects, Read, Write

F8 = mp.RefType((8,), "float32")


def test_effects_print_as_in_the_ir_and_repr_reads_back():
    def k(x, acc, o):
        mp.addupdate(acc, ..., x[...])
        o[...] = x[...]

    fn = mp.trace(k, F8, F8, F8)
    found = mp.effects(fn)
    assert str(found) == "{read 0, accum 1, write 2}"
    assert f"effects {found}" in str(fn)  # the function header says the same
    assert repr(found) == "Effects({Read(0), Accum(1), Write(2)})"
    assert eval(repr(found)) == found == frozenset({Read(0), Accum(1), Write(2)})
    assert str(Effects()) == "{}"
