"""Text that parses but breaks an op's type rule is a ``VerificationError`` (the verifier's
class), not a ``ParseError``, located at the op's ``line:col`` and with a fix: the rule's own
(result types, static bounds) or else the op's documented form."""

import pytest

from minipallas import VerificationError, parse
from minipallas.ir.errors import ParseError
from minipallas.ir.location import Location

H = "func @f(%0: f32[8], %1: Ref{f32[8,128]}, %2: i32[]) -> (f32[8]) {\n"
ERRORS = {
    "type_error": (
        "func @f(%0: f32[8], %1: f32[4]) -> () {\n  %2 = add %0, %1 : f32[8]\n  return\n}",
        "2:8: 'add': operands must have one type, got f32[8] and f32[4]",
    ),
    "result_type": (
        H + "  %3 = neg %0 : f32[4]\n  return %3\n}",
        "2:8: 'neg': result types are (f32[8]), but the text says (f32[4])",
    ),
    "out_of_bounds": (
        H + "  %3 = get %1[0, 0:200] : f32[200]\n  return %0\n}",
        "2:8: 'get': dimension 1: slice 0+200*1 is out of bounds for size 128",
    ),
    "ref_as_index": (
        H + "  %3 = get %1[%1, 0:8] : f32[8]\n  return %3\n}",
        "2:8: 'get': dimension 0: a dynamic integer index must be an integer "
        "scalar, got Ref{f32[8,128]}",
    ),
    "load_mask_type": (
        H + "  %3 = load %1[0, 0:8], mask %0 : f32[8]\n  return %3\n}",
        "2:8: 'load': mask has type f32[8], expected bool[8]",
    ),
    "call_types": (
        "func @g(%0: f32[8]) -> (f32[8]) {\n  return %0\n}\n"
        "func @f(%0: i32[8]) -> () {\n  %1 = call @g(%0) : f32[8]\n  return\n}",
        "5:8: 'call': argument 0 of @g has type i32[8], expected f32[8]",
    ),
    "bad_permutation": (
        "func @f(%0: f32[2,3]) -> () {\n  %1 = transpose %0, permutation (0, 0) : f32[2,2]\n"
        "  return\n}",
        "2:8: 'transpose': (0, 0) is not a permutation of 2 dims",
    ),
}
FIXES = {
    "result_type": "write the type the op's rule gives after the colon: ': f32[8]'",
    "out_of_bounds": "make the slice end by 128: start + (size - 1) * stride must be below 128",
    "type_error": "write it as %z = add %x, %y : f32[8]",
}


@pytest.mark.parametrize("case", ERRORS, ids=str)
def test_type_errors_in_text_are_verification_errors_with_a_fix(case):
    source, message = ERRORS[case]
    with pytest.raises(VerificationError) as info:
        parse(source)
    error = info.value
    assert not isinstance(error, ParseError)
    assert str(error).split("\n  fix: ")[0] == message
    line, col = (int(n) for n in message.split(":")[:2])
    assert error.loc == Location("", line, col)
    assert error.fix
    if case in FIXES:
        assert error.fix == FIXES[case]


def test_an_out_of_bounds_static_index_has_a_fix():
    with pytest.raises(VerificationError) as info:
        parse(H + "  %3 = get %1[8, 0:8] : f32[8]\n  return %3\n}")
    assert "index 8 is out of bounds for size 8" in str(info.value)
    assert info.value.fix.startswith("use an index from 0 to 7")
