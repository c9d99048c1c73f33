"""The public contract of ``discharge``: convention, partial discharge, errors, speed."""

import numpy as np
import pytest
from discharge_harness import check, op_names

import minipallas
from minipallas.ir import (
    ArrayType,
    Block,
    Builder,
    Dyn,
    Function,
    Int,
    Op,
    RefType,
    Slice,
    Value,
    params,
)
from minipallas.ir.errors import PassError
from minipallas.passes.discharge import discharge

MIXED = """
func @f(%a: Ref{f32[4]}, %x: f32[], %b: Ref{i32[2]}, %c: Ref{bool[3]}) -> (f32[], f32[4]) {
  %v = get %a[:] : f32[4]
  %o = swap %a[0], %x : f32[]
  %one = constant 1 : i32[2]
  addupdate %b[:], %one
  return %o, %v
}
"""


def test_discharge_is_public_and_follows_upstreams_convention():
    fn = minipallas.parse(MIXED)
    out = minipallas.discharge(fn)
    assert [str(t) for t in out.param_types] == ["f32[4]", "f32[]", "i32[2]", "bool[3]"]
    # original results, then every discharged ref's final value in parameter order
    assert [str(t) for t in out.result_types] == ["f32[]", "f32[4]", "f32[4]", "i32[2]", "bool[3]"]
    assert out.body.results[-1] is out.params[3]  # untouched: returned as it came in
    assert out.name == fn.name


def test_the_input_is_never_changed():
    fn = minipallas.parse(MIXED)
    text, ops = str(fn), list(fn.walk())
    out = discharge(fn)
    assert str(fn) == text and list(fn.walk()) == ops
    assert not {id(v) for v in out.params} & {id(v) for v in fn.params}
    assert not {id(op) for op in out.walk()} & {id(op) for op in ops}


def test_should_discharge_per_parameter_ignores_arrays():
    fn = minipallas.parse(MIXED)
    out = check(fn, should_discharge=[False, False, True, False])
    assert [str(t) for t in out.param_types] == ["Ref{f32[4]}", "f32[]", "i32[2]", "Ref{bool[3]}"]
    assert [str(t) for t in out.result_types] == ["f32[]", "f32[4]", "i32[2]"]
    assert op_names(out)["get"] == 1 and op_names(out)["swap"] == 1
    assert check(fn, should_discharge=[True, True, False, True]).param_types[1] == ArrayType(
        (), "float32"
    )


def test_should_discharge_of_the_wrong_length_is_an_error():
    fn = minipallas.parse(MIXED)
    with pytest.raises(PassError, match="should_discharge has 2 entries for 4 parameters"):
        discharge(fn, [True, False])


def test_an_op_with_no_rule_on_a_discharged_ref_is_an_error_naming_it():
    (r,) = params([RefType((4,), "float32")])
    mystery = Op("mystery.touch", (r,), (Value(ArrayType((), "float32")),))
    fn = Function("f", Block((r,), (mystery,), ()))
    with pytest.raises(PassError, match="no discharge rule for op 'mystery.touch'"):
        discharge(fn)


def test_pure_programs_are_copied():
    out = check("""
    func @f(%x: f32[3], %i: i32[]) -> (f32[3]) {
      %y = exp %x : f32[3]
      %z = add %x, %y : f32[3]
      return %z
    }""")
    assert op_names(out) == {"exp": 1, "add": 1}


def _long_program(n_ops: int):
    r, s, i = params(
        [RefType((64, 128), "float32"), RefType((128,), "float32"), ArrayType((), "int32")]
    )
    b = Builder()
    row_ix = (Int(Dyn(0)), Slice(0, 128, 1))
    while len(b.ops) < n_ops:
        row = b.create("get", [r, i], {"indexer": row_ix}).result
        w = b.create("ref.at", [r, i], {"indexer": (Slice(Dyn(0), 8, 1), Slice(0, 128, 1))})
        x = b.create("get", [w.result], {"indexer": (Int(3), Slice(0, 128, 1))}).result
        y = b.create("add", [row, x]).result
        b.create("swap", [s, y], {"indexer": (Slice(0, 128, 1),)})
        b.create("addupdate", [w.result, y], {"indexer": (Int(2), Slice(0, 128, 1))})
    return b.function("long", [r, s, i], [])


def test_the_discharged_long_program_runs_the_same():
    fn = _long_program(300)
    args = [
        np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32),
        np.zeros(128, np.float32),
        np.int32(5),
    ]
    check(fn, *args)
