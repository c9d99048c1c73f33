"""Type rules read their operands by the names the op declares (``OperandTypes``), never by
slicing positions: ``types.group("indices")``, ``types.one("value")``."""

import ast
from pathlib import Path

import pytest

from minipallas.ir import ArrayType, RefType
from minipallas.ir.opdef import OPS, OperandTypes, TypeCheckError

ROOT = Path(__file__).resolve().parents[2]
I32, F32 = ArrayType((), "int32"), ArrayType((8,), "float32")
REF = RefType((8,), "float32")


def test_groups_and_single_operands_are_read_by_name():
    types = OperandTypes((I32, I32, REF, F32, F32), OPS["for"], {"num_consts": 1})
    assert types == (I32, I32, REF, F32, F32)  # still the tuple the rule was always given
    assert types.one("lower") is I32
    assert types.group("consts") == (REF,)
    assert types.group("inits") == (F32, F32)


def test_a_flagged_operand_is_there_only_with_its_flag():
    store = OPS["store"]
    assert OperandTypes((REF, F32), store, {"masked": False}).group("mask") == ()
    with pytest.raises(TypeCheckError, match="operand 'mask' is missing"):
        OperandTypes((REF, F32), store, {"masked": False}).one("mask")
    masked = OperandTypes((REF, F32, ArrayType((8,), "bool")), store, {"masked": True})
    assert masked.one("mask") == ArrayType((8,), "bool")


def test_operands_that_do_not_fit_the_declaration_are_a_type_error():
    with pytest.raises(TypeCheckError, match=r"3 operands do not fit the declared \(lower, upper"):
        OperandTypes((I32, I32, REF), OPS["for"], {"num_consts": 2}).group("consts")


def _slices_of_types(text: str) -> list[int]:
    """Lines where a type rule (or a helper of one: a function taking ``types: Types`` or
    ``types: OperandTypes``) slices its operand types: ``types[1:]``."""
    rules = [
        fn
        for fn in ast.walk(ast.parse(text))
        if isinstance(fn, ast.FunctionDef)
        and any(
            a.arg == "types"
            and isinstance(a.annotation, ast.Name)
            and a.annotation.id in ("Types", "OperandTypes")
            for a in fn.args.args
        )
    ]
    return sorted(
        {
            node.lineno
            for fn in rules
            for node in ast.walk(fn)
            if isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "types"
            and isinstance(node.slice, ast.Slice)
        }
    )


def test_no_type_rule_slices_its_operand_types():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "ir" / "opset").glob("*.py"))
        for line in _slices_of_types(path.read_text())
    ]
    assert not found, "type rules slicing types (read by name: types.group(...)):\n" + "\n".join(
        found
    )
    rule = "def f(types: Types, attrs):\n    x = types[1 : 1 + n]\n    return types[0]\n"
    assert _slices_of_types(rule) == [2]
    assert _slices_of_types("def parse(types: list):\n    return types[:1]\n") == []
