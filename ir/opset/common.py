"""Small type-rule helpers shared by the op families."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from minipallas.ir import dtypes, indexing
from minipallas.ir.opdef import TypeCheckError, require
from minipallas.ir.types import ArrayType, RefType, Type


def _error(what: str | int, message: str) -> TypeCheckError:
    """``message`` about ``what``: a description (``"mask"``), or an operand's position, which
    the builder turns into the operand's declared name (``operand 'ref' must be a Ref``)."""
    if isinstance(what, int):
        return TypeCheckError(message, operand=what)
    return TypeCheckError(f"{what} {message}")


def ref_operand(types: Sequence[Type], what: str | int = 0) -> RefType:
    if not (len(types) >= 1 and isinstance(types[0], RefType)):
        raise _error(what, "must be a Ref")
    return types[0]  # type: ignore[return-value]


# The helpers below test before formatting their message: they run for every op the builder
# makes or the verifier checks, and printing types on the success path would dominate the cost.


def array_operand(t: Type, what: str | int) -> ArrayType:
    if not isinstance(t, ArrayType):
        raise _error(what, f"must be an array, got {t}")
    return t  # type: ignore[return-value]


def int_scalar(t: Type, what: str | int) -> ArrayType:
    if not (isinstance(t, ArrayType) and t.shape == () and dtypes.is_int(t.dtype)):
        raise _error(what, f"must be an integer scalar, got {t}")
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
        raise TypeCheckError(str(e), fix=e.fix) from None


def count_dyn(attrs: Mapping[str, Any]) -> int:
    """How many dynamic index operands the op's ``indexer`` uses; checks each entry's form."""
    indexer = attrs.get("indexer")
    require(isinstance(indexer, tuple), "missing 'indexer' attribute")
    for dim, entry in enumerate(indexer):
        if not _well_formed(entry):
            raise TypeCheckError(
                f"indexer entry {dim} is {entry!r}; expected Int(int | Dyn), "
                "Slice(int | Dyn, int, int) or Array(Dyn)"
            )
    return indexing.num_dyn(indexer)


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _well_formed(entry: object) -> bool:
    def index(x: object) -> bool:
        return _is_int(x) or (isinstance(x, indexing.Dyn) and _is_int(x.pos))

    if isinstance(entry, indexing.Int):
        return index(entry.index)
    if isinstance(entry, indexing.Slice):
        return index(entry.start) and _is_int(entry.size) and _is_int(entry.stride)
    return (
        isinstance(entry, indexing.Array)
        and isinstance(entry.index, indexing.Dyn)
        and _is_int(entry.index.pos)
    )


def same_type(t: Type, expected: Type, what: str, fix: str | None = None) -> None:
    if t != expected:
        raise TypeCheckError(f"{what} has type {t}, expected {expected}", fix=fix)


def no_refs(types: Sequence[Type], what: str) -> None:
    for i, t in enumerate(types):
        if isinstance(t, RefType):
            raise TypeCheckError(f"{what} {i} is a Ref ({t}); only arrays may flow here")


def static_ints(value: object, what: str) -> tuple[int, ...]:
    require(
        isinstance(value, tuple)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value),
        f"attribute '{what}' must be a tuple of ints, got {value!r}",
    )
    return value  # type: ignore[return-value]


def is_permutation(perm: tuple[int, ...], rank: int) -> bool:
    return sorted(perm) == list(range(rank))
