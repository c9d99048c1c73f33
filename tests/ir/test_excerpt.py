"""An error on a program shows the IR around the failing op, its name underlined with carets,
besides its location and fix: from the verifier, from a pass (discharge) and from a lowering (a
Triton rejection); ``minipallas-opt`` shows text IR's own lines instead. Each check is of the
whole text, as FileCheck's CHECK-NEXT lines would be."""

import pytest

import minipallas as mp
from minipallas.cli import main
from minipallas.frontend import values
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError, PassError, VerificationError
from minipallas.ir.excerpt import excerpt, source_excerpt
from minipallas.ir.location import Location
from minipallas.ir.verifier import verify
from minipallas.numpy import exp

F8 = mp.RefType((8,), "float32")

# A while whose condition writes a ref discharge turns into an array and a scratch ref it keeps
# (discharge_scoped=false): discharge cannot replay those writes in the body.
WHILE = """\
func @f(%a: Ref{f32[]}) -> () {
  run_scoped(%a) {
  ^(%s: Ref{f32[]}, %ra: Ref{f32[]}):
    %z = constant 0 : i32[]
    %n = while (%ra, %s) () iter (%z) cond {
    ^(%ca: Ref{f32[]}, %cs: Ref{f32[]}, %c: i32[]):
      %one = constant 1.0 : f32[]
      %o1 = swap %ca[], %one : f32[]
      %o2 = swap %cs[], %one : f32[]
      %k = constant 3 : i32[]
      %p = lt %c, %k : bool[]
      yield %p
    } body {
    ^(%c: i32[]):
      %i = constant 1 : i32[]
      %c2 = add %c, %i : i32[]
      yield %c2
    } : i32[]
    yield
  }
  return
}
"""
WHILE_MESSAGE = (
    "'while': this while condition writes both a discharged ref and a kept one; its writes "
    "cannot be replayed in the body\n  fix: move the condition's writes into the body"
)


def traced():
    def k(x, o):
        o[...] = exp(x[...] * 2.0) + 1.0

    return mp.trace(k, F8, F8)


def with_bad_exp(fn: Function) -> Function:
    """``fn`` with its ``exp`` claiming an f32[4] result."""
    ops = list(fn.body.ops)
    k = [op.name for op in ops].index("exp")
    bad = ops[k]
    ops[k] = Op(bad.name, bad.operands, (Value(mp.ArrayType((4,), "float32")),), bad.attrs)
    return Function(fn.name, Block(fn.body.params, ops, fn.body.results))


def test_a_verifier_error_notes_the_printed_ir_with_carets_under_the_op():
    with pytest.raises(VerificationError) as info:
        verify(with_bad_exp(traced()))
    error = info.value
    assert str(error) == "'exp': result 0 has type f32[4], expected f32[8] (in @k)"
    assert error.__notes__ == [error.excerpt]
    assert error.excerpt == (
        "in @k:\n"
        "    %4 = broadcast_in_dim %3, dims () : f32[8]\n"
        "    %5 = mul %2, %4 : f32[8]\n"
        "    %6 = exp %5 : f32[4]\n"
        "         ^^^\n"
        "    %7 = constant 1.0 : f32[]\n"
        "    %8 = broadcast_in_dim %7, dims () : f32[8]"
    )


def test_the_excerpt_is_of_the_callee_that_holds_the_op():
    callee = with_bad_exp(traced())
    (x, o) = (Value(F8), Value(F8))
    call = Op("call", (x, o), (), {"callee": callee})
    caller = Function("main", Block((x, o), (call,), ()))
    (op,) = [op for op in callee.walk() if op.name == "exp"]
    assert excerpt(caller, op).startswith("in @k:\n")
    with pytest.raises(VerificationError) as info:
        verify(caller)
    assert info.value.excerpt.splitlines()[3:5] == ["    %6 = exp %5 : f32[4]", "         ^^^"]
    assert excerpt(traced(), op) is None  # not in that function


def test_a_discharge_error_notes_the_op_inside_its_region():
    with pytest.raises(PassError) as info:
        mp.discharge(mp.parse(WHILE), discharge_scoped=False)
    error = info.value
    assert str(error) == f"5:10: {WHILE_MESSAGE}"
    assert error.__notes__ == [error.excerpt]
    assert error.excerpt == (
        "in @f:\n"
        "    ^(%1: Ref{f32[]}, %2: Ref{f32[]}):\n"
        "      %3 = constant 0 : i32[]\n"
        "      %4 = while (%2, %1) () iter (%3) cond {\n"
        "           ^^^^^\n"
        "      ^(%5: Ref{f32[]}, %6: Ref{f32[]}, %7: i32[]):\n"
        "        %8 = constant 1.0 : f32[]"
    )


def test_in_the_pipeline_the_excerpt_is_of_the_passs_input_once():
    with pytest.raises(PassError) as info:
        mp.passes.run(mp.parse(WHILE), "cleanup,discharge{discharge_scoped=false}", verify=True)
    error = info.value
    assert error.__notes__ == [error.excerpt]
    assert error.excerpt.splitlines()[3:5] == [
        "      %4 = while (%2, %1) () iter (%3) cond {",
        "           ^^^^^",
    ]


def test_a_triton_rejection_notes_the_kernel_body_it_lowered():
    def k(x_ref, o_ref):
        o_ref[...] = values.emit_array("erf", [x_ref[...] * 2.0])

    f = mp.ArrayType((8, 128), "float32")
    with pytest.raises(MiniPallasError) as info:
        mp.pallas_call(k, f).lower(f, target="gpu")
    error = info.value
    assert str(error).endswith(
        "'erf': erf has no Triton lowering (upstream Pallas's Triton backend has no rule for "
        "it)\n  fix: compute erf outside the kernel, or from floor/ceil/exp/... inside it"
    )
    assert error.__notes__ == [error.excerpt]
    assert error.excerpt == (
        "in @k:\n"
        "    %3 = constant 2.0 : f32[8,128]\n"
        "    %4 = mul %2, %3 : f32[8,128]\n"
        "    %5 = erf %4 : f32[8,128]\n"
        "         ^^^\n"
        "    %6 = swap %1[:, :], %5 : f32[8,128]\n"
        "    return"
    )


def test_minipallas_opt_shows_the_text_irs_own_lines_instead(tmp_path, capsys):
    path = tmp_path / "while.mir"
    path.write_text(WHILE)
    assert main([str(path), "--pass-pipeline=discharge{discharge_scoped=false}"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"{path}:5:10: {WHILE_MESSAGE}\n"
        "    ^(%s: Ref{f32[]}, %ra: Ref{f32[]}):\n"
        "      %z = constant 0 : i32[]\n"
        "      %n = while (%ra, %s) () iter (%z) cond {\n"
        "           ^^^^^\n"
        "      ^(%ca: Ref{f32[]}, %cs: Ref{f32[]}, %c: i32[]):\n"
        "        %one = constant 1.0 : f32[]\n"
    )


def test_a_source_excerpt_underlines_the_op_name_or_marks_the_column():
    text = "func @f() -> () {\n  %add = add %x, %add : f32[]\n  return\n}"
    assert source_excerpt(text, Location("", 2, 3), "add", context=0) == (
        "    %add = add %x, %add : f32[]\n           ^^^"
    )
    assert source_excerpt(text, Location("", 2, 14), None, context=1) == (
        "  func @f() -> () {\n    %add = add %x, %add : f32[]\n               ^\n    return"
    )
    assert source_excerpt(text, Location("", 9, 1)) is None
    assert source_excerpt(text, Location("k.py", 2, 0)) is None
