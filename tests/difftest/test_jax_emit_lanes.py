"""The emitter on programs with upstream's TPU vector ops (``roll``, ``packed_bitcast``), bitcast
views across widths and ``platform_index``: each emitted to upstream JAX agrees bit for bit with
the interpreter (``difftest.run`` of the emission, with the program as reference)."""

import pytest

import minipallas as mp
from minipallas.tools.difftest import run
from minipallas.tools.fuzz.upstream import case_for

# Each body reads %r (i32[8,6]) as %x and writes %y (i32[8,6]) to %o.
BODIES = {
    "roll": """%s = constant -7 : i32[]
        %y = roll %x, %s, axis 0, stride (2, 1) : i32[8,6]""",
    "pltpu.bitcast": """%h = packed_bitcast %x : i16[16,6]
        %n = neg %h : i16[16,6]
        %y = packed_bitcast %n : i32[8,6]""",
    "bitcast view": """%v = ref.bitcast %r : Ref{u8[32,6]}
        %b = get %v[4:12, :] : u8[8,6]
        %y = convert %b : i32[8,6]""",
    "platform_index": """%i = platform_index ("mosaic"), default : i32[]
        %y = cond %i (%x) [{
        ^(%a: i32[8,6]):
          yield %a
        }, {
        ^(%b: i32[8,6]):
          %c = neg %b : i32[8,6]
          yield %c
        }] : i32[8,6]""",
}


@pytest.mark.parametrize("name", BODIES)
def test_emitted_op_agrees_with_the_interpreter(name):
    fn = mp.parse(
        f"""
        func @f(%r: Ref{{i32[8,6]}}, %o: Ref{{i32[8,6]}}) -> () {{
          %x = get %r[:, :] : i32[8,6]
          {BODIES[name]}
          %old = swap %o[:, :], %y : i32[8,6]
          return
        }}
        """
    )
    report = run(case_for(fn, seed=5, name=name.replace(".", "_").replace(" ", "_")))
    assert report.ok, report.text()
