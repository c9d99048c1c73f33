"""``Callees``: each function a pass reaches is rebuilt once, and every call names that copy."""

import textwrap

import minipallas as mp
from minipallas.ir.core import Block
from minipallas.ir.rewrite import Callees

TEXT = textwrap.dedent("""
    func @twice(%x: f32[4]) -> (f32[4]) {
      %y = add %x, %x : f32[4]
      return %y
    }

    func @main(%x: f32[4]) -> (f32[4]) {
      %a = call @twice(%x) : f32[4]
      %b = call @twice(%a) : f32[4]
      return %b
    }
""")


def test_a_callee_called_twice_is_rebuilt_once_and_both_calls_name_the_copy():
    main = mp.parse(TEXT)
    rebuilt = []

    def rebuild(fn):
        rebuilt.append(fn.name)
        ops = tuple(callees.call(op) if op.name == "call" else op for op in fn.body.ops)
        return mp.Function(f"{fn.name}_copy", Block(fn.body.params, ops, fn.body.results))

    callees = Callees(rebuild)
    new = callees(main)
    assert rebuilt == ["main", "twice"]
    first, second = (op.attrs["callee"] for op in new.body.ops)
    assert first is second and first.name == "twice_copy"
    assert callees(main) is new  # asked again: the same copy, nothing rebuilt
    assert rebuilt == ["main", "twice"]
    assert str(main).count("@twice_copy") == 0  # the input is untouched
