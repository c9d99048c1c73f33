"""Op declarations: operands are named, so the builder and verifier name the operand a type
error is about; a declaration that could not name them one way is refused."""

import pytest
import textir_programs as programs

from minipallas.ir import OPS, ArrayType, Builder, RefType, Slice, params
from minipallas.ir.errors import VerificationError
from minipallas.ir.opdef import Variadic, declare
from minipallas.ir.syntax import Operands

F8 = ArrayType((8,), "float32")
REF8 = RefType((8,), "float32")


def test_operand_names_follow_the_declaration():
    both = {"masked": True, "has_other": True}
    assert OPS["load"].operand_names(5, both) == (
        "ref",
        "indices[0]",
        "indices[1]",
        "mask",
        "other",
    )
    assert OPS["load"].operand_names(2, {}) == ("ref", "indices[0]")
    assert OPS["store"].operand_names(3, {"masked": True}) == ("ref", "value", "mask")
    assert OPS["for"].operand_names(5, {"num_consts": 2}) == (
        *("lower", "upper", "consts[0]", "consts[1]", "inits[0]"),
    )
    attrs = {"cond_nconsts": 1, "body_nconsts": 0}
    assert OPS["while"].operand_names(2, attrs) == ("cond_consts[0]", "inits[0]")
    assert OPS["select"].operand_names(3, {}) == ("pred", "on_true", "on_false")


def test_a_count_that_does_not_fit_has_no_names_and_the_label_is_the_position():
    assert OPS["add"].operand_names(3, {}) is None
    assert OPS["swap"].operand_names(0, {}) is None
    assert OPS["for"].operand_names(3, {"num_consts": 2}) is None
    assert OPS["for"].operand_names(3, {"num_consts": "2"}) is None
    assert OPS["add"].operand_label(1, 3, {}) == "1"
    assert OPS["add"].operand_label(1, 2, {}) == "'y'"


@pytest.mark.parametrize(
    "name, types, attrs, message",
    [
        ("neg", [REF8], {}, "operand 'x' must be an array, got Ref{f32[8]}"),
        ("get", [F8], {"indexer": (Slice(0, 8, 1),)}, "operand 'ref' must be a Ref"),
        ("sort", [F8, REF8], {"dimension": 0, "num_keys": 1}, "operand 'arrays[1]' must be"),
        ("add", [F8, F8, REF8], {}, "expected 2 operands, got 3"),  # no names: the rule's words
    ],
)
def test_a_type_error_names_the_operand(name, types, attrs, message):
    with pytest.raises(VerificationError, match=f"'{name}': {message}".replace("[", r"\[")):
        Builder().create(name, params(types), attrs)


def test_every_op_of_the_programs_has_a_name_for_each_operand():
    for build in programs.ALL:
        for op in build().walk():
            names = OPS[op.name].operand_names(len(op.operands), op.attrs)
            assert names is not None and len(names) == len(op.operands), op


def test_two_groups_without_a_count_are_refused():
    with pytest.raises(ValueError, match="only one Variadic may go without a count"):
        declare("two_groups", operands=(Variadic("a"), Variadic("b")), syntax=Operands())
    assert "two_groups" not in OPS


def test_each_op_says_how_it_is_written_without_markup():
    """``OpDef.form``, which a type error's fix quotes: the op's printed form from its
    docstring, reST markup gone; a region op's is its whole ``::`` block."""
    for name, opdef in OPS.items():
        assert name in opdef.form and "``" not in opdef.form, name
    assert OPS["add"].form == "%z = add %x, %y : f32[8]"
    assert OPS["atomic_max"].form == "%old = atomic_max %r[0:8], %v, mask %m : f32[8]"
    assert OPS["for"].form.splitlines()[0] == "%c = for %lo to %hi (%ref) iter (%init) {"
    assert OPS["for"].form.splitlines()[-1] == "} : f32[]"
