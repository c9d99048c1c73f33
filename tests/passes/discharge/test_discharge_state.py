"""Every state op with every indexer kind discharges to the pure indexed ops, keeping meaning."""

import numpy as np
import pytest
from discharge_harness import check, op_names

import minipallas

# name -> (indexer text on a Ref{f32[6,8]}, window shape, pure read op, pure write op)
INDEXERS = {
    "static_int_and_slice": ("2, 1:5", (4,), "slice", "dynamic_update_slice"),
    "strided_slice": ("1:6:2, :", (3, 8), "slice", "dynamic_update_slice"),
    "dynamic_int_and_slice": ("%i, ds(%j, 4)", (4,), "dynamic_slice", "dynamic_update_slice"),
    "dynamic_strided": ("ds(%i, 3, 2), 7", (3,), "dynamic_slice", "dynamic_update_slice"),
    "array_then_slice": ("%idx, 2:6", (3, 4), "gather", "scatter"),
    "slice_then_array": ("1:4, %idx", (3, 3), "gather", "scatter"),
    "array_and_dynamic_int": ("%idx, %i", (3,), "gather", "scatter"),
}
HEADER = (
    "func @f(%r: Ref{f32[6,8]}, %i: i32[], %j: i32[], %idx: i32[3], %v: W, %m: M) -> (RESULTS) {"
)


def _program(indexer: str, window: tuple, body: str, results: str) -> str:
    w = f"f32[{','.join(map(str, window))}]"
    m = f"bool[{','.join(map(str, window))}]"
    head = HEADER.replace("W", w).replace("M", m).replace("RESULTS", results.replace("W", w))
    return "\n".join([head, body.replace("IX", indexer).replace("W", w), "}"])


OPS = {
    "get": ("  %x = get %r[IX] : W\n  return %x", "W", True, False),
    "swap": ("  %x = swap %r[IX], %v : W\n  return %x", "W", True, True),
    "store": ("  store %r[IX], %v\n  return", "", False, True),
    "addupdate": ("  addupdate %r[IX], %v\n  return", "", None, True),
    "masked_store": ("  store %r[IX], %v, mask %m\n  return", "", True, True),
    "masked_load_other": (
        "  %o = constant 7.5 : f32[]\n  %x = load %r[IX], mask %m, other %o : W\n  return %x",
        "W",
        True,
        False,
    ),
    "masked_load_no_other": ("  %x = load %r[IX], mask %m : W\n  return %x", "W", True, False),
    "load": ("  %x = load %r[IX] : W\n  return %x", "W", True, False),
}


@pytest.mark.parametrize("indexer", INDEXERS)
@pytest.mark.parametrize("op", OPS)
def test_state_op_with_indexer(op, indexer):
    text, window, read_op, write_op = INDEXERS[indexer]
    body, results, reads, writes = OPS[op]
    fn = minipallas.parse(_program(text, window, body, results))
    for seed in range(4):
        out = check(fn, seed=seed)
    names = op_names(out)
    if op == "masked_store" and write_op == "scatter":
        reads = False  # one scatter over every lane's position; masked-off lanes dropped
    if reads:
        assert names[read_op] >= 1
    if writes:
        expected = write_op
        if op == "addupdate":
            expected = "scatter_add" if write_op == "scatter" else "dynamic_update_slice"
            assert names["add"] == (0 if write_op == "scatter" else 1)
        assert names[expected] >= 1
    if op.startswith("masked"):
        assert names["select"] == 1


def test_masked_load_without_other_reads_the_fill_value():
    """Masked-off lanes read the uninitialized fill value (NaN), as the interpreter gives."""
    out = check("""
    func @f(%r: Ref{f32[4]}, %m: bool[4]) -> (f32[4]) {
      %x = load %r[:], mask %m : f32[4]
      return %x
    }""")
    names = op_names(out)
    assert names["constant"] == 1 and names["broadcast_in_dim"] == 1
    (x, _) = minipallas.interpret(out, np.ones(4, np.float32), np.array([1, 0, 1, 0], bool))
    assert np.isnan(x[1]) and x[0] == 1


def test_a_full_window_emits_no_slice():
    out = check("""
    func @f(%r: Ref{f32[4,3]}, %v: f32[4,3]) -> (f32[4,3]) {
      %x = get %r[:, :] : f32[4,3]
      %y = swap %r[:, :], %v : f32[4,3]
      return %x
    }""")
    assert set(op_names(out)) == set()
    assert out.body.results == (out.params[0], out.params[1])


def test_a_read_repeated_between_writes_is_emitted_once():
    out = check("""
    func @f(%r: Ref{f32[8]}, %i: i32[]) -> (f32[4], f32[4]) {
      %a = get %r[ds(%i, 4)] : f32[4]
      %b = get %r[ds(%i, 4)] : f32[4]
      return %a, %b
    }""")
    assert op_names(out)["dynamic_slice"] == 1


def test_out_of_range_dynamic_indices_clamp_and_array_writes_drop():
    fn = minipallas.parse("""
    func @f(%r: Ref{i32[5]}, %i: i32[], %idx: i32[4], %v: i32[4], %w: i32[2]) -> (i32[2]) {
      %a = get %r[ds(%i, 2)] : i32[2]
      %b = swap %r[%idx], %v : i32[4]
      %c = swap %r[ds(%i, 2)], %w : i32[2]
      addupdate %r[%idx], %v
      return %a
    }""")
    r = np.arange(5, dtype=np.int32)
    for i in (-3, 0, 4, 99):
        idx = np.array([7, -1, 2, 2], np.int32)  # out of range both ways, and a duplicate
        check(
            fn,
            r,
            np.int32(i),
            idx,
            np.array([10, 20, 30, 40], np.int32),
            np.array([5, 6], np.int32),
        )


def test_scatter_add_adds_every_duplicate():
    fn = minipallas.parse("""
    func @f(%r: Ref{f32[4]}, %idx: i32[5], %v: f32[5]) -> () {
      addupdate %r[%idx], %v
      return
    }""")
    out = check(
        fn, np.zeros(4, np.float32), np.array([1, 1, 1, 3, 9], np.int32), np.ones(5, np.float32)
    )
    (final,) = minipallas.interpret(
        out, np.zeros(4, np.float32), np.array([1, 1, 1, 3, 9], np.int32), np.ones(5, np.float32)
    )
    np.testing.assert_array_equal(final, [0, 3, 0, 1])


def test_masked_store_with_repeated_array_indices_keeps_masked_off_lanes_out():
    """A masked-off lane that repeats a position must not overwrite a masked-on lane's value."""
    fn = minipallas.parse("""
    func @f(%r: Ref{f32[4,2]}, %idx: i32[3], %v: f32[3,2], %m: bool[3,2]) -> () {
      store %r[%idx, :], %v, mask %m
      return
    }""")
    idx = np.array([1, 1, 7], np.int32)
    v = np.arange(6, dtype=np.float32).reshape(3, 2)
    m = np.array([[1, 0], [0, 1], [1, 1]], bool)
    check(fn, np.zeros((4, 2), np.float32), idx, v, m)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int8", "uint32", "bool", "int32"])
def test_dtypes(dtype):
    short = {
        "bfloat16": "bf16",
        "float16": "f16",
        "int8": "i8",
        "uint32": "u32",
        "bool": "bool",
        "int32": "i32",
    }[dtype]
    add = "" if dtype == "bool" else "  addupdate %r[0:2, 1], %v2\n"
    text = f"""
    func @f(%r: Ref{{{short}[3,4]}}, %i: i32[], %v: {short}[4], %v2: {short}[2], %m: bool[4])
        -> ({short}[4], {short}[4]) {{
      %a = swap %r[%i, :], %v : {short}[4]
    {add}  %b = load %r[1, :], mask %m : {short}[4]
      store %r[2, :], %v, mask %m
      return %a, %b
    }}"""
    for seed in range(3):
        check(text, seed=seed)


def test_zero_dimensional_refs():
    check("""
    func @f(%r: Ref{f32[]}, %s: Ref{i32[]}, %v: f32[]) -> (f32[]) {
      %a = get %r[] : f32[]
      %b = swap %r[], %v : f32[]
      %one = constant 1 : i32[]
      addupdate %s[], %one
      return %a
    }""")


def test_array_indices_apart_put_their_shape_first():
    """``r[idx, 1:3, jdx]``: the index block is not contiguous, so its shape leads the window."""
    text = """
    func @f(%r: Ref{f32[5,4,6]}, %idx: i32[2,1], %jdx: i32[3], %i: i32[], %v: f32[2,3,2],
            %m: bool[2,3,2]) -> (f32[2,3,2], f32[2,3,2]) {
      %a = get %r[%idx, ds(%i, 2), %jdx] : f32[2,3,2]
      %b = swap %r[%idx, 1:3, %jdx], %v : f32[2,3,2]
      addupdate %r[%idx, ds(%i, 2, 2), %jdx], %v
      store %r[%idx, ds(%i, 2), %jdx], %v, mask %m
      %c = load %r[%idx, 0:4:2, %jdx], mask %m : f32[2,3,2]
      return %a, %c
    }"""
    for seed in range(6):
        check(text, seed=seed)


def test_masked_store_with_arrays_and_a_narrow_dynamic_start():
    """An i8 slice start on a dimension longer than i8 can count is clamped within i8."""
    text = """
    func @f(%r: Ref{f32[3,300]}, %idx: i32[2], %i: i8[], %v: f32[2,4], %m: bool[2,4]) -> () {
      store %r[%idx, ds(%i, 4)], %v, mask %m
      return
    }"""
    for seed in range(3):
        check(text, seed=seed)
