"""The builder's handling of static attributes: any integer type is accepted and stored as a
Python int, so the type rules, the printer and attribute equality see one spelling."""

import numpy as np
import pytest

from minipallas.ir import ArrayType, Block, Builder, Function, params
from minipallas.ir.builder import static
from minipallas.ir.errors import VerificationError


@pytest.mark.parametrize("int_type", [np.int64, np.int32, np.uint8, np.intp])
def test_numpy_integer_attributes_become_python_ints(int_type):
    (x,) = params([ArrayType((3,), "float32")])
    b = Builder()
    op = b.create(
        "broadcast_in_dim", [x], {"shape": (int_type(2), int_type(3)), "dims": (int_type(1),)}
    )
    plain = Builder().create("broadcast_in_dim", [x], {"shape": (2, 3), "dims": (1,)})
    assert op.attrs == plain.attrs
    assert all(type(v) is int for v in (*op.attrs["shape"], *op.attrs["dims"]))
    assert op.result.type == ArrayType((2, 3), "float32")
    fn = Function("f", Block((x,), tuple(b.ops), (op.result,)))
    assert "broadcast_in_dim %0, dims (1) : f32[2,3]" in str(fn)


def test_nested_tuples_and_scalars_are_made_ints_and_bools_stay_bools():
    assert static(((np.int64(1), 2), np.int32(3))) == ((1, 2), 3)
    assert type(static(np.int16(7))) is int
    assert static(np.bool_(True)) is np.bool_(True) and static(True) is True
    ints = (1, 2)
    assert static(ints) is ints  # nothing to change: the same tuple


def test_non_integers_are_still_rejected():
    (x,) = params([ArrayType((3,), "float32")])
    with pytest.raises(VerificationError, match=r"attribute 'dims' must be a tuple of ints"):
        Builder().create("broadcast_in_dim", [x], {"shape": (2, 3), "dims": (1.0,)})
