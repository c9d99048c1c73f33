"""Small type-rule helpers shared by the op families."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from minipallas.ir import dtypes, indexing
from minipallas.ir.opdef import TypeCheckError, require
from minipallas.ir.types import ArrayType, RefType, Type


def ref_operand(types: Sequence[Type], what: str = "operand 0") -> RefType:
    require(len(types) >= 1 and isinstance(types[0], RefType), f"{what} must be a Ref")
    return types[0]  # type: ignore[return-value]


def array_operand(t: Type, what: str) -> ArrayType:
    require(isinstance(t, ArrayType), f"{what} must be an array, got {t}")
    return t  # type: ignore[return-value]


def int_scalar(t: Type, what: str) -> ArrayType:
    require(
        isinstance(t, ArrayType) and t.shape == () and dtypes.is_int(t.dtype),
        f"{what} must be an integer scalar, got {t}",
    )
    return t  # type: ignore[return-value]


def window(
    shape: Sequence[int], attrs: Mapping[str, Any], dyn_types: Sequence[Type]
) -> tuple[int, ...]:
    """Checks the op's ``indexer`` against ``shape`` and returns the selected window's shape."""
    indexer = attrs.get("indexer")
    require(isinstance(indexer, tuple), "missing 'indexer' attribute")
    try:
        indexing.check(indexer, shape, dyn_types)
        return indexing.result_shape(indexer, dyn_types)
    except indexing.IndexError_ as e:
        raise TypeCheckError(str(e)) from None


def count_dyn(attrs: Mapping[str, Any]) -> int:
    indexer = attrs.get("indexer")
    require(isinstance(indexer, tuple), "missing 'indexer' attribute")
    return indexing.num_dyn(indexer)


def same_type(t: Type, expected: Type, what: str) -> None:
    require(t == expected, f"{what} has type {t}, expected {expected}")


def no_refs(types: Sequence[Type], what: str) -> None:
    for i, t in enumerate(types):
        require(not isinstance(t, RefType), f"{what} {i} is a Ref ({t}); only arrays may flow here")


def static_ints(value: object, what: str) -> tuple[int, ...]:
    require(
        isinstance(value, tuple)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value),
        f"attribute '{what}' must be a tuple of ints, got {value!r}",
    )
    return value  # type: ignore[return-value]


def is_permutation(perm: tuple[int, ...], rank: int) -> bool:
    return sorted(perm) == list(range(rank))
