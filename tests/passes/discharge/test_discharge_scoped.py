"""``run_scoped``: allocations start ``uninitialized``, scopes are inlined, nesting and closed-over
refs work, and allocations can be kept as refs (partial discharge of scratch)."""

import numpy as np
import pytest
from discharge_harness import check, op_names

import minipallas
from minipallas.ir.types import TPU_SMEM, RefType

SCRATCH = """
func @f(%out: Ref{f32[4]}, %x: f32[4]) -> (f32[]) {
  %s = run_scoped(%out, %x) {
  ^(%buf: Ref{f32[4], tpu.vmem}, %o: Ref{f32[4]}, %xin: f32[4]):
    %first = get %buf[0] : f32[]
    %old = swap %buf[:], %xin : f32[4]
    addupdate %buf[1:3], %xin2
    %v = get %buf[:] : f32[4]
    %w = swap %o[:], %v : f32[4]
    yield %first
  } : f32[]
  return %s
}
"""


def test_allocations_start_uninitialized_and_the_scope_is_inlined():
    text = SCRATCH.replace("addupdate %buf[1:3], %xin2\n", "")
    out = check(text)
    names = op_names(out)
    assert names["uninitialized"] == 1 and "run_scoped" not in names
    (first, final) = minipallas.interpret(out, np.zeros(4, np.float32), np.ones(4, np.float32))
    assert np.isnan(first)  # read before any write: the fill value
    np.testing.assert_array_equal(final, np.ones(4, np.float32))


def test_nested_scopes_closing_over_outer_refs():
    check("""
    func @f(%p: Ref{i32[6]}, %v: i32[2]) -> (i32[2]) {
      %r = run_scoped(%p, %v) {
      ^(%a: Ref{i32[6]}, %p1: Ref{i32[6]}, %v1: i32[2]):
        %pa = get %p1[:] : i32[6]
        %o1 = swap %a[:], %pa : i32[6]
        %r2 = run_scoped(%a, %p1, %v1) {
        ^(%b: Ref{i32[2]}, %a2: Ref{i32[6]}, %p2: Ref{i32[6]}, %v2: i32[2]):
          %o2 = swap %b[:], %v2 : i32[2]
          %r3 = run_scoped(%a2, %b, %p2) {
          ^(%c: Ref{i32[]}, %a3: Ref{i32[6]}, %b3: Ref{i32[2]}, %p3: Ref{i32[6]}):
            %bv = get %b3[:] : i32[2]
            addupdate %a3[1:3], %bv
            %x = get %a3[2] : i32[]
            %o3 = swap %c[], %x : i32[]
            addupdate %b3[0], %x
            %y = get %c[] : i32[]
            %o4 = swap %p3[5], %y : i32[]
            yield %bv
          } : i32[2]
          %bb = get %b[:] : i32[2]
          %o5 = swap %p2[0:2], %bb : i32[2]
          yield %r3
        } : i32[2]
        %av = get %a[1:3] : i32[2]
        addupdate %p1[3:5], %av
        yield %r2
      } : i32[2]
      return %r
    }""")


def test_reads_before_writes_read_the_fill_value_for_every_dtype():
    for short in ("f32", "bf16", "i32", "i8", "u32", "bool"):
        out = check(f"""
        func @f() -> ({short}[3]) {{
          %r = run_scoped() {{
          ^(%b: Ref{{{short}[3]}}):
            %x = get %b[:] : {short}[3]
            yield %x
          }} : {short}[3]
          return %r
        }}""")
        assert op_names(out)["uninitialized"] == 1


def test_loop_in_a_scope_carries_the_scratch():
    check("""
    func @f(%out: Ref{f32[4]}, %x: f32[4]) -> () {
      run_scoped(%out, %x) {
      ^(%acc: Ref{f32[4]}, %o: Ref{f32[4]}, %xin: f32[4]):
        %zero = constant 0.0 : f32[4]
        %z = swap %acc[:], %zero : f32[4]
        %lo = constant 0 : i32[]
        %hi = constant 5 : i32[]
        for %lo to %hi (%acc, %xin) {
        ^(%i: i32[], %a: Ref{f32[4]}, %xi: f32[4]):
          addupdate %a[:], %xi
          yield
        }
        %v = get %acc[:] : f32[4]
        %w = swap %o[:], %v : f32[4]
        yield
      }
      return
    }""")


def test_collective_axes_are_rejected_by_the_collectives_pass():
    fn = minipallas.parse("""
    func @f() -> (f32[]) {
      %r = run_scoped() collective_axes ("x") {
      ^(%b: Ref{f32[]}):
        %x = get %b[] : f32[]
        yield %x
      } : f32[]
      return %r
    }""")
    # no outer ref: upstream's discharge leaves such a scope to XLA lowering, which rejects it
    with pytest.raises(ValueError) as info:
        minipallas.discharge(fn)
    assert str(info.value) == (
        "run_scoped lowering outside of Pallas does not support collective_axes."
    )


def test_partial_discharge_keeps_operand_refs_and_discharges_scratch():
    """The GPU path: the kernel's operand refs stay refs, scratch becomes SSA values."""
    out = check(
        """
    func @kernel(%x: Ref{f32[8]}, %y: Ref{f32[8]}) -> () {
      run_scoped(%x, %y) {
      ^(%acc: Ref{f32[8]}, %xr: Ref{f32[8]}, %yr: Ref{f32[8]}):
        %v = get %xr[:] : f32[8]
        %o = swap %acc[:], %v : f32[8]
        addupdate %acc[:], %v
        %a = get %acc[:] : f32[8]
        %w = swap %yr[:], %a : f32[8]
        yield
      }
      return
    }""",
        should_discharge=False,
    )
    names = op_names(out)
    assert names["get"] == 1 and names["swap"] == 1 and "addupdate" not in names
    assert "run_scoped" not in names and names["uninitialized"] == 1


@pytest.mark.parametrize("outer", [True, False])
def test_kept_allocations_keep_the_scope(outer):
    """``discharge_scoped`` as a predicate: SMEM scratch stays a ref, the rest is discharged."""
    out = check(
        """
    func @f(%out: Ref{f32[4]}, %x: f32[4]) -> (f32[]) {
      %s = run_scoped(%out, %x) {
      ^(%keep: Ref{f32[4], tpu.smem}, %gone: Ref{f32[4]}, %o: Ref{f32[4]}, %xin: f32[4]):
        %a = swap %keep[:], %xin : f32[4]
        %b = swap %gone[:], %xin : f32[4]
        addupdate %gone[0:2], %xin2
        %k = get %keep[1:3] : f32[2]
        addupdate %gone[2:4], %k
        %g = get %gone[:] : f32[4]
        addupdate %o[:], %g
        %first = get %o[0] : f32[]
        yield %first
      } : f32[]
      return %s
    }""".replace("        addupdate %gone[0:2], %xin2\n", ""),
        should_discharge=outer,
        discharge_scoped=lambda t: not (isinstance(t, RefType) and t.memory_space == TPU_SMEM),
    )
    names = op_names(out)
    assert names["run_scoped"] == 1 and names["uninitialized"] == 1
    (scope,) = [op for op in out.walk() if op.name == "run_scoped"]
    assert [str(p.type) for p in scope.regions[0].params][0] == "Ref{f32[4], tpu.smem}"
    assert len(scope.results) == (2 if outer else 1)  # the outer ref it writes, when discharged


def test_discharge_scoped_false_keeps_every_allocation():
    out = check(SCRATCH.replace("addupdate %buf[1:3], %xin2\n", ""), discharge_scoped=False)
    names = op_names(out)
    assert names["run_scoped"] == 1 and names["swap"] == 1 and "uninitialized" not in names
