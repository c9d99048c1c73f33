"""Loops carry the refs they write, conds return them, calls discharge their callee."""

import numpy as np
import pytest
from discharge_harness import check, op_names

import minipallas


def _only(fn, name):
    (op,) = [op for op in fn.walk() if op.name == name]
    return op


FOR = """
func @f(%w: Ref{f32[4]}, %r: Ref{f32[4]}, %n: i32[]) -> (f32[]) {
  %lo = constant 0 : i32[]
  %z = constant 0.0 : f32[]
  %s = for %lo to %n (%w, %r) iter (%z) {
  ^(%i: i32[], %wi: Ref{f32[4]}, %ri: Ref{f32[4]}, %acc: f32[]):
    %x = get %ri[%i] : f32[]
    addupdate %wi[%i], %x
    %y = get %wi[0] : f32[]
    %acc2 = add %acc, %y : f32[]
    yield %acc2
  } : f32[]
  return %s
}
"""


def test_for_carries_written_refs_and_passes_read_ones_as_consts():
    out = check(FOR)
    loop = _only(out, "for")
    assert loop.attrs["num_consts"] == 1  # the read-only ref, as an array
    assert [str(t.type) for t in loop.results] == ["f32[]", "f32[4]"]  # carry, then the ref
    for n in (0, 1, 3, 7):
        check(FOR, np.arange(4, dtype=np.float32), np.ones(4, np.float32), np.int32(n))


def test_for_over_a_view_carries_only_the_window():
    out = check("""
    func @f(%r: Ref{f32[4,8]}, %j: i32[]) -> () {
      %row = ref.at %r[ds(%j, 1), 2:6] : Ref{f32[1,4]}
      %lo = constant 0 : i32[]
      %hi = constant 3 : i32[]
      for %lo to %hi (%row) {
      ^(%i: i32[], %w: Ref{f32[1,4]}):
        %v = get %w[0, %i] : f32[]
        addupdate %w[0, 3], %v
        yield
      }
      return
    }""")
    assert [str(t.type) for t in _only(out, "for").results] == ["f32[1,4]"]


def test_for_with_aliasing_views_of_one_buffer():
    """The ref and a view of it enter the loop together: they travel as one carry."""
    out = check("""
    func @f(%r: Ref{f32[4,4]}, %j: i32[]) -> () {
      %row = ref.at %r[ds(%j, 1), :] : Ref{f32[1,4]}
      %lo = constant 0 : i32[]
      %hi = constant 4 : i32[]
      for %lo to %hi (%r, %row) {
      ^(%i: i32[], %all: Ref{f32[4,4]}, %w: Ref{f32[1,4]}):
        %v = get %all[%i, %i] : f32[]
        addupdate %w[0, %i], %v
        %u = get %w[0, :] : f32[4]
        addupdate %all[3, :], %u
        yield
      }
      return
    }""")
    loop = _only(out, "for")
    assert [str(t.type) for t in loop.results] == ["f32[4,4]"]
    assert loop.attrs["num_consts"] == 1  # the view's dynamic index


def test_nested_loops_and_partial_discharge():
    text = """
    func @f(%a: Ref{i32[3,3]}, %b: Ref{i32[3]}, %c: Ref{i32[3]}) -> () {
      %lo = constant 0 : i32[]
      %hi = constant 3 : i32[]
      for %lo to %hi (%a, %b, %c) {
      ^(%i: i32[], %ai: Ref{i32[3,3]}, %bi: Ref{i32[3]}, %ci: Ref{i32[3]}):
        for %lo2 to %hi2 (%i, %ai, %bi, %ci) {
        ^(%j: i32[], %ii: i32[], %aj: Ref{i32[3,3]}, %bj: Ref{i32[3]}, %cj: Ref{i32[3]}):
          %x = get %bj[%j] : i32[]
          %y = get %cj[%ii] : i32[]
          %z = add %x, %y : i32[]
          addupdate %aj[%ii, %j], %z
          %o = swap %cj[%j], %x : i32[]
          yield
        }
        yield
      }
      return
    }""".replace("for %lo2 to %hi2", "for %i0 to %i3")
    text = text.replace(
        "      ^(%i: i32[], %ai: Ref{i32[3,3]}, %bi: Ref{i32[3]}, %ci: Ref{i32[3]}):\n",
        "      ^(%i: i32[], %ai: Ref{i32[3,3]}, %bi: Ref{i32[3]}, %ci: Ref{i32[3]}):\n"
        "        %i0 = constant 0 : i32[]\n        %i3 = constant 3 : i32[]\n",
    )
    for mask in ([True] * 3, [True, False, True], [False, True, False], [False] * 3):
        check(text, should_discharge=mask)


WHILE = """
func @f(%r: Ref{i32[]}, %log: Ref{i32[8]}, %limit: i32[]) -> (i32[]) {
  %zero = constant 0 : i32[]
  %n = while (%r, %limit) (%r, %log) iter (%zero) cond {
  ^(%rc: Ref{i32[]}, %lim: i32[], %k: i32[]):
    %v = get %rc[] : i32[]
    %p = lt %v, %lim : bool[]
    yield %p
  } body {
  ^(%rb: Ref{i32[]}, %lb: Ref{i32[8]}, %k2: i32[]):
    %v2 = get %rb[] : i32[]
    %one = constant 1 : i32[]
    %v3 = add %v2, %one : i32[]
    %o = swap %rb[], %v3 : i32[]
    %o2 = swap %lb[%k2], %v2 : i32[]
    %k3 = add %k2, %one : i32[]
    yield %k3
  } : i32[]
  return %n
}
"""


def test_while_body_writes_a_ref_the_condition_reads():
    out = check(WHILE)
    loop = _only(out, "while")
    assert loop.attrs["cond_nconsts"] == 1 and loop.attrs["body_nconsts"] == 0
    assert len(loop.results) == 3  # the counter, then both written refs as carries
    for start, limit in ((0, 5), (3, 3), (7, 2)):
        check(WHILE, np.int32(start), np.zeros(8, np.int32), np.int32(limit))


def test_while_condition_that_writes_a_ref():
    """The condition's writes are replayed in the body and once after the loop."""
    text = """
    func @f(%calls: Ref{i32[]}, %limit: i32[]) -> (i32[]) {
      %zero = constant 0 : i32[]
      %n = while (%calls, %limit) () iter (%zero) cond {
      ^(%c: Ref{i32[]}, %lim: i32[], %k: i32[]):
        %one = constant 1 : i32[]
        addupdate %c[], %one
        %p = lt %k, %lim : bool[]
        yield %p
      } body {
      ^(%k2: i32[]):
        %two = constant 2 : i32[]
        %k3 = add %k2, %two : i32[]
        yield %k3
      } : i32[]
      return %n
    }"""
    for limit in (-1, 0, 1, 6):
        check(text, np.int32(10), np.int32(limit))


def test_while_with_a_kept_ref_in_the_body():
    check(WHILE, should_discharge=[True, False, False])
    check(WHILE, should_discharge=[False, True, False])


COND = """
func @f(%idx: i32[], %a: Ref{f32[4]}, %b: Ref{f32[4]}, %c: Ref{f32[4]}, %x: f32[4]) -> (f32[]) {
  %r = cond %idx (%a, %b, %c, %x) [{
  ^(%a0: Ref{f32[4]}, %b0: Ref{f32[4]}, %c0: Ref{f32[4]}, %x0: f32[4]):
    %o = swap %a0[:], %x0 : f32[4]
    %v = get %c0[1] : f32[]
    yield %v
  }, {
  ^(%a1: Ref{f32[4]}, %b1: Ref{f32[4]}, %c1: Ref{f32[4]}, %x1: f32[4]):
    addupdate %b1[:], %x1
    %v1 = get %c1[2] : f32[]
    yield %v1
  }, {
  ^(%a2: Ref{f32[4]}, %b2: Ref{f32[4]}, %c2: Ref{f32[4]}, %x2: f32[4]):
    %v2 = get %a2[0] : f32[]
    yield %v2
  }] : f32[]
  return %r
}
"""


def test_cond_returns_only_refs_some_branch_writes():
    out = check(COND)
    branch = _only(out, "cond")
    assert len(branch.results) == 3  # the result, then a and b; c is only read
    args = [np.zeros(4, np.float32) + k for k in range(3)] + [np.arange(4, dtype=np.float32)]
    for idx in (-2, 0, 1, 2, 5):  # the index is clamped into range
        check(COND, np.int32(idx), *args)


@pytest.mark.parametrize(
    "mask", [[True, True, False, True, True], [True, False, True, False, True]]
)
def test_cond_partial_discharge(mask):
    check(COND, should_discharge=mask)


CALLS = """
func @inc(%r: Ref{f32[4]}, %src: Ref{f32[4]}, %k: f32[]) -> (f32[]) {
  %v = get %src[:] : f32[4]
  addupdate %r[:], %v
  %x = get %r[0] : f32[]
  %y = add %x, %k : f32[]
  return %y
}

func @main(%a: Ref{f32[4]}, %b: Ref{f32[4]}, %k: f32[]) -> (f32[]) {
  %s = call @inc(%a, %b, %k) : f32[]
  %t = call @inc(%b, %a, %s) : f32[]
  %row = ref.at %a[1:3] : Ref{f32[2]}
  return %t
}
"""


def test_call_discharges_the_callee_once_per_pattern():
    module = minipallas.parse_module(CALLS)
    out = check(module["main"])
    callees = out.callees()
    assert len(callees) == 1 and callees[0].name == "inc_discharged"
    assert [str(t) for t in callees[0].result_types] == ["f32[]", "f32[4]", "f32[4]"]
    out = check(module["main"], should_discharge=[True, False, True])
    assert [f.name for f in out.callees()] == ["inc_discharged_10", "inc_discharged_01"]


def test_call_with_a_view_argument_and_aliasing_arguments():
    text = """
    func @g(%p: Ref{f32[2]}, %q: Ref{f32[4]}) -> () {
      %v = get %q[1:3] : f32[2]
      addupdate %p[:], %v
      %w = get %p[:] : f32[2]
      %o = swap %q[0:2], %w : f32[2]
      return
    }

    func @main(%a: Ref{f32[4]}, %b: Ref{f32[4]}) -> () {
      %row = ref.at %a[2:4] : Ref{f32[2]}
      call @g(%row, %b)
      call @g(%row, %a)
      return
    }"""
    out = check(minipallas.parse_module(text)["main"])
    assert op_names(out)["call"] == 1  # the aliasing call is inlined


def test_loop_in_cond_in_scope():
    check("""
    func @f(%p: Ref{f32[4]}, %i: i32[]) -> () {
      run_scoped(%p, %i) {
      ^(%s: Ref{f32[4]}, %pp: Ref{f32[4]}, %ii: i32[]):
        %v = get %pp[:] : f32[4]
        %o = swap %s[:], %v : f32[4]
        cond %ii (%s, %pp) [{
        ^(%s0: Ref{f32[4]}, %p0: Ref{f32[4]}):
          yield
        }, {
        ^(%s1: Ref{f32[4]}, %p1: Ref{f32[4]}):
          %lo = constant 0 : i32[]
          %hi = constant 4 : i32[]
          for %lo to %hi (%s1) {
          ^(%k: i32[], %sk: Ref{f32[4]}):
            %x = get %sk[%k] : f32[]
            addupdate %sk[3], %x
            yield
          }
          %t = get %s1[:] : f32[4]
          %o2 = swap %p1[:], %t : f32[4]
          yield
        }]
        yield
      }
      return
    }""")
