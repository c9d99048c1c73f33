"""The emitter on programs with the structural ops: each emitted to upstream JAX agrees bit for
bit with the interpreter (``difftest.run`` of the emission, with the program as reference)."""

import pytest

import minipallas as mp
from minipallas.interop.exporter.engine import RULES as TO_JAX
from minipallas.interop.exporter.rules.emit import AS_TO_JAX, STRUCTURAL
from minipallas.tools.difftest import run
from minipallas.tools.fuzz.upstream import case_for

# Each op between a read of %r (f32[4,6]) and a write of its result %y to %o: (type of %y, ops).
BODIES = {
    "reverse": ("f32[4,6]", "%y = reverse %x, dims (0, 1) : f32[4,6]"),
    "pad": (
        "f32[4,10]",
        """%v = constant 0.5 : f32[]
        %y = pad %x, %v, low (1, -1), high (-1, 0), interior (0, 1) : f32[4,10]""",
    ),
    "cumsum": ("f32[4,6]", "%y = cumsum %x, axis 1, reverse : f32[4,6]"),
    "cumprod": ("f32[4,6]", "%y = cumprod %x, axis 0 : f32[4,6]"),
    "cummax": ("f32[4,6]", "%y = cummax %x, axis 1 : f32[4,6]"),
    "cummin": ("f32[4,6]", "%y = cummin %x, axis 0, reverse : f32[4,6]"),
    "cumlogsumexp": ("f32[4,6]", "%y = cumlogsumexp %x, axis 1 : f32[4,6]"),
    "reduce_prod": ("f32[4]", "%y = reduce_prod %x, axes (1) : f32[4]"),
    "sort": (
        "f32[4,6]",
        """%i = iota dimension 1 : i32[4,6]
        %s, %t = sort %x, %i, dimension 1, num_keys 1 : f32[4,6], i32[4,6]
        %c = convert %t : f32[4,6]
        %y = add %s, %c : f32[4,6]""",
    ),
    "top_k": (
        "f32[4,3]",
        """%v, %i = top_k %x, k 3 : f32[4,3], i32[4,3]
        %c = convert %i : f32[4,3]
        %y = add %v, %c : f32[4,3]""",
    ),
    "argmax": ("i32[4]", "%y = argmax %x, axis 1 : i32[4]"),
    "argmin": ("i32[6]", "%y = argmin %x, axis 0 : i32[6]"),
}


def _program(name: str) -> mp.Function:
    out_type, body = BODIES[name]
    whole = ", ".join(":" * (out_type.count(",") + 1))
    return mp.parse(
        f"""
        func @{name}(%r: Ref{{f32[4,6]}}, %o: Ref{{{out_type}}}) -> () {{
          %x = get %r[:, :] : f32[4,6]
          {body}
          %old = swap %o[{whole}], %y : {out_type}
          return
        }}
        """
    )


def test_every_structural_op_has_a_program():
    assert set(BODIES) == set(STRUCTURAL)


def test_every_shared_rule_is_one_to_jax_has():
    """``emit`` hands these to ``to_jax``'s rules: a name missing there fails at emit time."""
    assert [n for n in AS_TO_JAX if TO_JAX.get(n) is None] == []


@pytest.mark.parametrize("name", BODIES)
def test_emitted_structural_op_agrees_with_the_interpreter(name):
    report = run(case_for(_program(name), seed=3, name=name))
    assert report.ok, report.text()
    assert name in str(report.jaxpr).replace("rev[", "reverse[")


def test_emitted_debug_print_prints_on_every_path(capfd):
    import jax

    fn = mp.parse(
        """
        func @p(%r: Ref{f32[2,3]}) -> () {
          %x = get %r[:, :] : f32[2,3]
          %s = reduce_max %x, axes (0, 1) : f32[]
          debug_print %s, %x, fmt "m={} x={x}", names ("", "x")
          return
        }
        """
    )
    report = run(case_for(fn, seed=1, name="debug_print"))
    assert report.ok, report.text()
    assert "debug_print" in str(report.jaxpr)
    jax.effects_barrier()
    printed = capfd.readouterr().out.split("m=")[1:]  # a line per print, x wraps
    assert len(printed) == len(report.outcomes) >= 4 and len(set(printed)) == 1
