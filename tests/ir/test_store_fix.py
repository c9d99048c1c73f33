"""A write of the wrong dtype names the fix that mends it, a ``convert``, not the op's form
(which suggested a mask) (issue 48 §4)."""

import pytest

import minipallas as mp

STORE = "func @f(%r: Ref{f32[8]}, %v: i32[8]) -> () {\n  OP\n  return\n}\n"


@pytest.mark.parametrize(
    "op", ["store %r[0:8], %v", "%o = swap %r[0:8], %v : f32[8]", "addupdate %r[0:8], %v"]
)
def test_a_write_of_the_wrong_dtype_suggests_a_convert(op):
    with pytest.raises(mp.VerificationError) as e:
        mp.parse(STORE.replace("OP", op))
    assert "has type i32[8], expected f32[8]" in str(e.value)
    assert "convert %v : f32[8]" in e.value.fix and "mask" not in e.value.fix
