"""The IR types the tests build programs from, written once: scalars of each kind, the
8-element f32 vector and the ref to one. A test that needs another shape spells it out where
it is used."""

from minipallas.ir.types import ArrayType, RefType

F32 = ArrayType((), "float32")
I32 = ArrayType((), "int32")
U32 = ArrayType((), "uint32")
BOOL = ArrayType((), "bool")
F8 = ArrayType((8,), "float32")
REF8 = RefType((8,), "float32")
