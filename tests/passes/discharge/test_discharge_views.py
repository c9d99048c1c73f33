"""Views discharge for reads and for writes: ``ref.at`` chains, reshape, bitcast, transpose."""

import pytest
from discharge_harness import check, op_names

import minipallas


def test_read_and_write_through_an_at_chain():
    out = check("""
    func @f(%r: Ref{f32[6,8]}, %i: i32[], %j: i32[], %v: f32[3]) -> (f32[3], f32[3]) {
      %a = ref.at %r[ds(%i, 4), :] : Ref{f32[4,8]}
      %b = ref.at %a[2, 1:7] : Ref{f32[6]}
      %c = ref.at %b[ds(%j, 3)] : Ref{f32[3]}
      %x = get %c[:] : f32[3]
      %y = swap %c[:], %v : f32[3]
      addupdate %b[0:6:2], %v
      return %x, %y
    }""")
    names = op_names(out)
    assert names["dynamic_update_slice"] >= 3  # pushed back through every ``at``


@pytest.mark.parametrize(
    "op",
    [
        "%x = swap %w[1, :], %v : f32[4]",
        "addupdate %w[1, :], %v",
        "store %w[1, :], %v, mask %m",
    ],
)
def test_write_through_reshape(op):
    out = check(f"""
    func @f(%r: Ref{{f32[2,8]}}, %v: f32[4], %m: bool[4]) -> () {{
      %w = ref.reshape %r : Ref{{f32[4,4]}}
      {op}
      return
    }}""")
    assert op_names(out)["reshape"] == 2  # in and back out


def test_write_through_bitcast():
    out = check("""
    func @f(%r: Ref{f32[8]}, %v: i32[4]) -> (i32[4]) {
      %w = ref.bitcast %r : Ref{i32[8]}
      %x = swap %w[2:6], %v : i32[4]
      return %x
    }""")
    assert op_names(out)["bitcast"] == 2


def test_write_through_transpose_uses_the_inverse_permutation():
    out = check("""
    func @f(%r: Ref{f32[2,3,4]}, %v: f32[2,3]) -> (f32[2,3]) {
      %t = ref.transpose %r, permutation (2, 0, 1) : Ref{f32[4,2,3]}
      %x = swap %t[1, :, :], %v : f32[2,3]
      addupdate %t[3, :, :], %v
      return %x
    }""")
    perms = [op.attrs["permutation"] for op in out.walk() if op.name == "transpose"]
    assert (2, 0, 1) in perms and (1, 2, 0) in perms


def test_a_chain_of_every_view_kind():
    check("""
    func @f(%r: Ref{f32[4,6,2]}, %i: i32[], %v: f32[3], %m: bool[3]) -> (f32[3]) {
      %a = ref.at %r[ds(%i, 2), :, :] : Ref{f32[2,6,2]}
      %b = ref.reshape %a : Ref{f32[4,6]}
      %c = ref.transpose %b, permutation (1, 0) : Ref{f32[6,4]}
      %d = ref.at %c[1:4, %i] : Ref{f32[3]}
      %e = ref.bitcast %d : Ref{i32[3]}
      %f = ref.bitcast %e : Ref{f32[3]}
      %x = load %f[:], mask %m : f32[3]
      store %f[:], %v, mask %m
      addupdate %d[0:3], %x
      return %x
    }""")


def test_views_of_the_same_buffer_see_each_others_writes():
    check("""
    func @f(%r: Ref{f32[4,4]}, %v: f32[4]) -> (f32[4], f32[4]) {
      %row = ref.at %r[1, :] : Ref{f32[4]}
      %t = ref.transpose %r, permutation (1, 0) : Ref{f32[4,4]}
      %col = ref.at %t[2, :] : Ref{f32[4]}
      %o = swap %row[:], %v : f32[4]
      %x = get %col[:] : f32[4]
      addupdate %col[:], %x
      %y = get %row[:] : f32[4]
      return %x, %y
    }""")


def test_array_index_through_a_view():
    check("""
    func @f(%r: Ref{f32[5,8]}, %idx: i32[3], %v: f32[3]) -> (f32[3]) {
      %a = ref.at %r[:, 2:6] : Ref{f32[5,4]}
      %x = get %a[%idx, 1] : f32[3]
      %y = swap %a[%idx, 2], %v : f32[3]
      addupdate %a[%idx, 3], %v
      return %x
    }""")


def test_a_view_made_but_never_used_emits_nothing():
    out = check("""
    func @f(%r: Ref{f32[8]}, %i: i32[]) -> () {
      %a = ref.at %r[ds(%i, 4)] : Ref{f32[4]}
      %b = ref.reshape %a : Ref{f32[2,2]}
      return
    }""")
    assert sum(op_names(out).values()) == 0


def test_views_of_a_kept_ref_are_copied():
    fn = minipallas.parse("""
    func @f(%r: Ref{f32[8]}, %s: Ref{f32[8]}) -> () {
      %a = ref.at %r[2:6] : Ref{f32[4]}
      %b = ref.at %s[2:6] : Ref{f32[4]}
      %x = get %a[:] : f32[4]
      %y = swap %b[:], %x : f32[4]
      return
    }""")
    out = check(fn, should_discharge=[True, False])
    assert op_names(out)["ref.at"] == 1 and op_names(out)["swap"] == 1
