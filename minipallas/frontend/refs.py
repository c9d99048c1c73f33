"""Traced refs: reading, writing and viewing mutable buffers, as in Pallas kernels.

``ref[idx]`` records a ``get``; ``ref[idx] = v`` a ``swap`` whose old value is unused (that is
what ``set`` means); ``addupdate``, ``load`` and ``store`` are the other state ops. ``ref.at[idx]``,
``ref.reshape``, ``ref.bitcast`` and ``ref.T`` record views, which alias the ref.

Written values must have the ref's dtype: a Python number is converted to it (when that loses
nothing), a traced value of another dtype is an error rather than a silent conversion. Values are
broadcast to the window's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

from minipallas.frontend import indexing
from minipallas.frontend.promotion import canonical, check_fits, is_python_scalar
from minipallas.frontend.scopes import Tracer, check_open, emit, trace_error
from minipallas.frontend.values import (
    TracedArray,
    asarray,
    broadcast_to,
    emit_array,
    index_operands,
    resolve_shape,
)
from minipallas.ir import dtypes
from minipallas.ir.indexing import result_shape
from minipallas.ir.types import MemorySpace


class TracedRef(Tracer):
    """A mutable buffer being traced: index it to read and write (``ref[...]``)."""

    __slots__ = ()
    kind = "ref"

    @property
    def memory_space(self) -> MemorySpace:
        return self._value.type.memory_space

    def __getitem__(self, idx: Any) -> TracedArray:
        indexer, dynamic = _index(self, idx)
        return emit_array("get", [self, *dynamic], indexer=indexer)

    def __setitem__(self, idx: Any, value: Any) -> None:
        indexer, dynamic = _index(self, idx)
        value = _written(self, indexer, dynamic, value)
        emit_array("swap", [self, *dynamic, value], indexer=indexer)

    def __iter__(self) -> None:
        raise trace_error("a ref is not iterable", fix="read it (ref[...]) or index it")

    @property
    def at(self) -> _At:
        """``ref.at[idx]``: a view of a window of the ref (chainable)."""
        return _At(self)

    def reshape(self, *shape: Any) -> TracedRef:
        """The same buffer with another shape (row-major); one dimension may be -1."""
        dims = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return _view("ref.reshape", self, shape=resolve_shape(dims, self.shape))

    def bitcast(self, dtype: Any) -> TracedRef:
        """The same bits seen as another dtype; of another width, the second-minor dim scales
        by the width ratio (upstream's TPU rule: an ``i32[8,128]`` ref is an ``i16[16,128]``
        one, row ``2i + k`` holding piece ``k`` of row ``i``, low piece first)."""
        return _view("ref.bitcast", self, dtype=canonical(dtype))

    def transpose(self, *perm: Any) -> TracedRef:
        """The buffer with its dimensions permuted (reversed by default)."""
        axes = perm[0] if len(perm) == 1 and not isinstance(perm[0], int) else perm
        axes = tuple(int(a) for a in axes) if axes else tuple(reversed(range(self.ndim)))
        return _view("ref.transpose", self, permutation=axes)

    @property
    def T(self) -> TracedRef:  # noqa: N802 - numpy's name
        return self.transpose()


def _not_a_value(symbol: str, example: str) -> Callable[..., NoReturn]:
    """An operator of ``TracedRef`` that explains a ref must be read before computing with it."""

    def reject(self: TracedRef, *other: Any) -> NoReturn:
        raise trace_error(
            "a ref is a mutable buffer, not an array value, so it cannot be computed with",
            op=symbol,
            fix=f"read its value with ref[...] first, e.g. {example}",
        )

    return reject


TracedRef.__array__ = _not_a_value("numpy", "minipallas.numpy.exp(x_ref[...])")
for _name, _symbol in {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
    "pow": "**", "matmul": "@", "and": "&", "or": "|", "xor": "^", "lshift": "<<", "rshift": ">>",
}.items():  # fmt: skip
    setattr(TracedRef, f"__{_name}__", _not_a_value(_symbol, f"x_ref[...] {_symbol} 1"))
    setattr(TracedRef, f"__r{_name}__", _not_a_value(_symbol, f"1 {_symbol} x_ref[...]"))
for _name, _symbol in {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}.items():
    setattr(TracedRef, f"__{_name}__", _not_a_value(_symbol, f"x_ref[...] {_symbol} 0"))
for _name, _symbol in {"neg": "-", "pos": "+", "abs": "abs", "invert": "~"}.items():
    _example = "abs(x_ref[...])" if _symbol == "abs" else f"{_symbol}x_ref[...]"
    setattr(TracedRef, f"__{_name}__", _not_a_value(_symbol, _example))


class _At:
    """What ``ref.at`` returns; indexing it makes the view."""

    def __init__(self, ref: TracedRef) -> None:
        self._ref = ref

    def __getitem__(self, idx: Any) -> TracedRef:
        indexer, dynamic = _index(self._ref, idx, arrays=False)
        return _view("ref.at", self._ref, *dynamic, indexer=indexer)


def _view(name: str, ref: TracedRef, *dynamic: TracedArray, **attrs: Any) -> TracedRef:
    (view,) = emit(TracedRef, name, [ref, *dynamic], attrs)
    return view


def ds(start: Any, size: Any = None, stride: Any = None) -> indexing.DSlice:
    """A dynamic slice ``start, start+stride, ...`` of ``size`` elements, as ``pl.ds``.

    ``start`` may be a traced integer scalar; ``size`` and ``stride`` are static ints.
    ``ds(n)`` means ``ds(0, n)``.
    """
    if size is None:
        start, size = 0, start
    stride = 1 if stride is None else stride
    if not _static_int(size) or size < 0:
        raise trace_error(
            f"ds size must be a static, non-negative int, got {size!r}",
            fix="sizes are static; only the start of a ds may be traced",
        )
    if not _static_int(stride) or stride < 1:
        raise trace_error(f"ds stride must be a static int >= 1, got {stride!r}")
    if isinstance(start, Tracer):
        if start.kind == "ref" or start.ndim != 0 or not dtypes.is_int(start.type.dtype):
            raise trace_error(
                f"ds start must be an integer scalar, got {start.type}",
                fix="pass a scalar, e.g. i or idx_ref[0]",
            )
    elif not _static_int(start):
        raise trace_error(f"ds start must be an int or a traced integer scalar, got {start!r}")
    return indexing.DSlice(
        start if isinstance(start, Tracer) else int(start), int(size), int(stride)
    )


def _static_int(x: Any) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_)


def addupdate(ref: TracedRef, idx: Any, value: Any) -> None:
    """``ref[idx] += value``, as one in-place accumulation."""
    _check_ref(ref, "addupdate")
    indexer, dynamic = _index(ref, idx)
    value = _written(ref, indexer, dynamic, value)
    emit(TracedArray, "addupdate", [ref, *dynamic, value], {"indexer": indexer})


def load(ref: TracedRef, idx: Any = None, *, mask: Any = None, other: Any = None) -> TracedArray:
    """``ref[idx]`` where ``mask`` is true; elsewhere ``other`` (unspecified without it).

    Both Pallas spellings: the old ``load(ref, idx, mask=, other=)`` and the current one
    (``plgpu.load``, jax >= 0.10.2), ``load(ref.at[idx], mask=, other=)``; no ``idx`` (or
    ``None``, as upstream passes) means the whole ref or view.
    """
    _check_ref(ref, "load")
    indexer, dynamic = _index(ref, ... if idx is None else idx)
    shape = _window_shape(indexer, dynamic)
    if mask is None:
        if other is not None:
            raise trace_error("load: 'other' is only used with a mask", fix="pass mask=")
        return emit_array("load", [ref, *dynamic], indexer=indexer, masked=False, has_other=False)
    operands = [ref, *dynamic, _mask(mask, shape)]
    if other is not None:
        fill = _as_ref_dtype(ref, other, "other")
        operands.append(fill if fill.ndim == 0 else _fit(fill, shape, "other"))
    return emit_array("load", operands, indexer=indexer, masked=True, has_other=other is not None)


def store(ref: TracedRef, *idx_and_value: Any, mask: Any = None) -> None:
    """``ref[idx] = value`` where ``mask`` is true; elsewhere the ref keeps its contents.

    Both Pallas spellings: the old ``store(ref, idx, value, mask=)`` and the current one
    (``plgpu.store``), ``store(ref.at[idx], value, mask=)``, which writes the whole view.
    """
    _check_ref(ref, "store")
    if len(idx_and_value) == 1:
        idx, value = ..., idx_and_value[0]
    elif len(idx_and_value) == 2:
        idx, value = idx_and_value
        idx = ... if idx is None else idx
    else:
        raise trace_error(
            f"store takes a ref, an optional index and a value, got {1 + len(idx_and_value)} "
            "positional arguments",
            fix="store(ref.at[idx], value, mask=m) or store(ref, idx, value, mask=m)",
        )
    indexer, dynamic = _index(ref, idx)
    value = _written(ref, indexer, dynamic, value)
    operands = [ref, *dynamic, value]
    if mask is not None:
        operands.append(_mask(mask, value.shape))
    emit(TracedArray, "store", operands, {"indexer": indexer, "masked": mask is not None})


# ----- helpers -----


def _check_ref(ref: Any, what: str) -> None:
    if not isinstance(ref, TracedRef):
        raise trace_error(f"{what} needs a ref as its first argument, got {type(ref).__name__}")


def _index(ref: TracedRef, idx: Any, arrays: bool = True) -> tuple[tuple, list[TracedArray]]:
    check_open(ref, *(idx if isinstance(idx, tuple) else (idx,)))
    index = indexing.normalize(idx, ref.shape, arrays=arrays)
    return index.indexer, index_operands(index)


def _window_shape(indexer: tuple, dynamic: list[TracedArray]) -> tuple[int, ...]:
    return result_shape(indexer, [d.type for d in dynamic])


def _written(ref: TracedRef, indexer: tuple, dynamic: list[TracedArray], value: Any) -> TracedArray:
    """``value`` as the window's contents: the ref's dtype, broadcast to the window's shape."""
    return _fit(
        _as_ref_dtype(ref, value, "stored value"), _window_shape(indexer, dynamic), "stored value"
    )


def _as_ref_dtype(ref: TracedRef, value: Any, what: str) -> TracedArray:
    dtype = ref.type.dtype
    if isinstance(value, TracedArray):
        if value.type.dtype != dtype:
            raise trace_error(
                f"dtype mismatch: {what} is {value.type} but the ref holds {dtype}",
                fix=f"convert it explicitly: value.astype({dtype!r})",
            )
        return value
    if isinstance(value, Tracer):
        raise trace_error(
            f"{what} is a ref; refs hold arrays, not refs", fix="store its contents: other_ref[...]"
        )
    if is_python_scalar(value):
        check_fits(value, dtype)
    return asarray(value, dtype)


def _fit(value: TracedArray, shape: tuple[int, ...], what: str) -> TracedArray:
    lead = len(shape) - value.ndim
    if lead < 0 or any(d not in (1, s) for d, s in zip(value.shape, shape[lead:], strict=True)):
        raise trace_error(
            f"shape mismatch: {what} has shape {value.shape}, the window has shape {shape}",
            fix="index a window of the value's shape, or reshape the value",
        )
    return broadcast_to(value, shape)


def _mask(mask: Any, shape: tuple[int, ...]) -> TracedArray:
    mask = asarray(mask)
    if mask.type.dtype != "bool":
        raise trace_error(f"a mask must be bool, got {mask.type}", fix="compare, e.g. x > 0")
    return _fit(mask, shape, "mask")
