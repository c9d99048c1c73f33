"""Raw IR constructors for the verifier tests: ops built without type checking.

The builder would reject most invalid programs before the verifier saw them, so these tests
build them with ``Op``/``Block``/``Function`` directly. Every op that matters gets
``Location("user.py", line)``, so a test can assert the message names the op and that line.
"""

import pytest

import minipallas
from minipallas.ir import (
    ArrayType,
    Block,
    Function,
    Location,
    Op,
    RefType,
    Slice,
    Value,
)
from minipallas.ir.errors import MiniPallasError, VerificationError

I8 = ArrayType((8,), "int32")
REF2D = RefType((8, 128), "float32")
FULL8 = (Slice(0, 8, 1),)


def at(line):
    return Location("user.py", line)


def mk(name, operands=(), result_types=(), attrs=None, regions=(), line=1):
    """A raw op with fresh result values of the given types (no type checking)."""
    return Op(
        name,
        tuple(operands),
        tuple(Value(t) for t in result_types),
        attrs or {},
        tuple(regions),
        at(line),
    )


def fn(params, ops, results=(), name="f"):
    return Function(name, Block(tuple(params), tuple(ops), tuple(results)))


def rejects(target, op, line, *fragments):
    """Verifying ``target`` raises a VerificationError naming ``op`` at ``user.py:line``."""
    with pytest.raises(VerificationError) as info:
        minipallas.verify(target)
    message = str(info.value)
    assert isinstance(info.value, MiniPallasError)
    assert f"'{op}'" in message, message
    assert f"user.py:{line}" in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message
