"""``to_jax`` rules for the pure indexed ops: ``slice``, ``dynamic_slice``, ``gather``,
``dynamic_update_slice``, ``scatter`` and ``scatter_add``, with minipallas's indexer meaning
(``ir.indexing``): a dynamic ``Int`` is clamped into ``[0, dim-1]``, a dynamic slice start
into ``[0, dim - span]``; integer-array positions are clamped by reads and dropped by writes
when out of range.

Windows without arrays use ``lax.dynamic_slice`` / ``lax.dynamic_update_slice`` on clamped
starts (then a strided ``lax.slice``). Windows with arrays, and strided writes, use explicit
position arrays, one per dimension, all of the window's shape, built as the reference
interpreter builds them (``ir/interpret/windows.py``), then jnp indexing: ``x[positions]`` to
read, ``x.at[positions].set/add(..., mode="drop")`` to write, a dropped position being sent to
``dim`` (past the end).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from minipallas.interop.exporter.engine import rule
from minipallas.ir import indexing
from minipallas.ir.core import Op
from minipallas.ir.indexing import Dyn, Int, Slice


def _clamped(value: Any, high: int) -> Any:
    """A dynamic index clamped into ``[0, high]`` in its own dtype, as int32."""
    top = min(high, int(np.iinfo(value.dtype).max))
    low = lax.full_like(value, 0)
    return lax.convert_element_type(lax.clamp(low, value, lax.full_like(value, top)), jnp.int32)


def _start(entry: Int | Slice, dim: int, dyn: Sequence[Any]) -> Any:
    """The clamped start of a window entry, an int or an int32 scalar."""
    at = entry.index if isinstance(entry, Int) else entry.start
    if not isinstance(at, Dyn):
        return at
    high = dim - indexing.span(entry)
    return _clamped(dyn[at.pos], high)


def _split(op: Op, args: Sequence[Any]) -> tuple[Any, tuple, list[Any], list[Any]]:
    indices = op.slices()["indices"]  # ``args`` line up with the operands
    return args[0], op.attrs["indexer"], list(args[indices]), list(args[indices.stop :])


def _window(x: Any, indexer: tuple, dyn: Sequence[Any], out_shape: tuple[int, ...]) -> Any:
    """The window of an indexer without arrays: dynamic_slice, stride, drop ``Int`` dims."""
    starts = [_start(e, d, dyn) for e, d in zip(indexer, x.shape, strict=True)]
    spans = [indexing.span(e) for e in indexer]
    if all(isinstance(s, int) for s in starts):
        limits = [s + n for s, n in zip(starts, spans, strict=True)]
        window = lax.slice(x, starts, limits)
    else:
        window = lax.dynamic_slice(
            x, [jnp.int32(s) if isinstance(s, int) else s for s in starts], spans
        )
    strides = [e.stride if isinstance(e, Slice) else 1 for e in indexer]
    if any(s != 1 for s in strides):
        window = lax.slice(window, [0] * len(spans), spans, strides)
    return lax.reshape(window, out_shape)


@rule("slice", "dynamic_slice")
def read_window(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    x, indexer, dyn, _ = _split(op, args)
    return [_window(x, indexer, dyn, op.result.type.shape)]


@rule("gather")
def gather(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    x, indexer, dyn, _ = _split(op, args)
    index, _ = positions(indexer, x.shape, dyn, read=True)
    return [jnp.asarray(x)[index]]  # a constant operand is a numpy array: index it as JAX's


@rule("dynamic_update_slice")
def write_window(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    x, indexer, dyn, (update,) = _split(op, args)
    if any(isinstance(e, Slice) and e.stride != 1 for e in indexer):
        index, _ = positions(indexer, x.shape, dyn, read=False)
        return [x.at[index].set(update, mode="drop")]
    starts = [_start(e, d, dyn) for e, d in zip(indexer, x.shape, strict=True)]
    spans = [1 if isinstance(e, Int) else e.size for e in indexer]
    update = lax.reshape(update, spans)
    starts = [jnp.int32(s) if isinstance(s, int) else s for s in starts]
    return [lax.dynamic_update_slice(x, update, starts)]


@rule("scatter", "scatter_add")
def scatter(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    x, indexer, dyn, (update,) = _split(op, args)
    index, _ = positions(indexer, x.shape, dyn, read=False)
    if op.name == "scatter_add":
        return [x.at[index].add(update, mode="drop")]
    return [x.at[index].set(update, mode="drop")]


def positions(
    indexer: tuple, shape: Sequence[int], dyn: Sequence[Any], read: bool
) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """One int32 position array per dimension, all of the window's shape, and that shape.

    Integers and arrays broadcast together; their dimensions go where the first of them
    stands when they are adjacent, first otherwise (numpy's rule, ``indexing.window_layout``).
    Array positions out of range are clamped (``read``) or sent past the end (writes).
    """
    layout = indexing.layout(indexer, [np.shape(v) for v in dyn])
    window = layout.shape
    out = []
    for entry, dim, axes in zip(indexer, shape, layout.axes, strict=True):
        if isinstance(entry, Slice):
            lane = lax.broadcasted_iota(jnp.int32, window, axes[0]) * entry.stride
            out.append(lane + _start(entry, dim, dyn))
        elif isinstance(entry, Int):
            out.append(jnp.broadcast_to(jnp.int32(_start(entry, dim, dyn)), window))
        else:
            raw = dyn[entry.index.pos]
            if read:
                where = _clamped(raw, dim - 1)
            else:
                if dim <= np.iinfo(raw.dtype).max:
                    inside = (raw >= 0) & (raw < dim)
                else:  # every non-negative value of the dtype is in range
                    inside = raw >= 0
                where = jnp.where(inside, raw.astype(jnp.int32), jnp.int32(dim))
            out.append(lax.broadcast_in_dim(where, window, axes))
    return tuple(out), window
