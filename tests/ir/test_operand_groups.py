"""``op.group(name)`` and ``op.slices()``: operands by the names their op declares, wherever the
attributes that size the groups put them; an unknown name is an error naming the groups."""

import textwrap

import pytest

import minipallas as mp

TEXT = textwrap.dedent("""
    func @f(%r: Ref{f32[8]}, %n: i32[], %x: f32[], %m: bool[4]) -> (f32[], i32[], f32[4]) {
      %zero = constant 0 : i32[]
      %sum = for %zero to %n (%r) iter (%x) {
      ^(%i: i32[], %rr: Ref{f32[8]}, %acc: f32[]):
        %v = get %rr[%i] : f32[]
        %acc2 = add %acc, %v : f32[]
        yield %acc2
      } : f32[]
      %count = while (%n) (%r) iter (%zero) cond {
      ^(%limit: i32[], %c: i32[]):
        %p = lt %c, %limit : bool[]
        yield %p
      } body {
      ^(%br: Ref{f32[8]}, %c: i32[]):
        %one = constant 1 : i32[]
        %c2 = add %c, %one : i32[]
        yield %c2
      } : i32[]
      %w = load %r[2:6], mask %m : f32[4]
      return %sum, %count, %w
    }
""")


def ops():
    fn = mp.parse(TEXT)
    params = fn.body.params
    return {op.name: op for op in fn.body.ops}, params


def test_groups_of_region_ops():
    found, (r, n, x, _) = ops()
    loop = found["for"]
    assert loop.group("consts") == (r,) and loop.group("inits") == (x,)
    assert loop.group("upper") == (n,)
    assert loop.slices() == {"lower": slice(0, 1), "upper": slice(1, 2),
                             "consts": slice(2, 3), "inits": slice(3, 4)}  # fmt: skip
    w = found["while"]
    assert w.group("cond_consts") == (n,) and w.group("body_consts") == (r,)
    assert len(w.group("inits")) == 1


def test_flagged_operands_are_present_only_when_set():
    found, (r, _, _, m) = ops()
    load = found["load"]
    assert load.group("ref") == (r,) and load.group("mask") == (m,)
    assert load.group("other") == ()


def test_an_unknown_group_names_the_known_ones():
    found, _ = ops()
    with pytest.raises(mp.MiniPallasError, match="has no operand group 'carries'") as e:
        found["for"].group("carries")
    assert "its groups: lower, upper, consts, inits" in str(e.value)
