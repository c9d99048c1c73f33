"""``minipallas.tpu.roll`` and ``minipallas.tpu.bitcast``: upstream's TPU vector primitives,
with upstream's argument checks (``pltpu.roll``, ``pltpu.bitcast``), each refused as a
``TraceError`` at the user's line."""

from __future__ import annotations

from typing import Any

from minipallas.frontend.promotion import canonical
from minipallas.frontend.scopes import trace_error
from minipallas.frontend.values import TracedArray, asarray, astype, emit_array
from minipallas.ir import dtypes


def roll(
    x: Any, shift: Any, axis: int, *, stride: int | None = None, stride_axis: int | None = None
) -> TracedArray:
    """``x`` rotated by ``shift`` along ``axis`` (``jnp.roll``'s direction: element ``j`` moves
    to ``j + shift``); with ``stride``, slice ``i`` along ``stride_axis`` rolls by
    ``shift + i * stride``. ``shift`` is a non-negative int or a traced integer scalar."""
    x = asarray(x)
    if isinstance(shift, int) and shift < 0:
        raise trace_error(
            f"shift {shift} is negative", op="roll", fix=f"roll by {shift} % x.shape[axis]"
        )
    if not 0 <= axis < x.ndim:
        raise trace_error(f"axis {axis} is not a dim of {x.type}", op="roll", fix="axis >= 0")
    if (stride is None) != (stride_axis is None):
        raise trace_error(
            "stride and stride_axis must be both given or both left out", op="roll",
            fix="give stride_axis=... with stride=..." if stride_axis is None else
            "give stride=... with stride_axis=...",
        )  # fmt: skip
    if stride is not None and (stride < 0 or not 0 <= stride_axis < x.ndim or stride_axis == axis):
        raise trace_error(
            f"stride {stride} on stride_axis {stride_axis} of {x.type} (axis {axis})",
            op="roll",
            fix="a non-negative stride and a stride_axis that is a dim other than axis",
        )
    amount = asarray(shift)
    if amount.ndim or not dtypes.is_int(amount.type.dtype):
        raise trace_error(f"shift must be an integer scalar, got {amount.type}", op="roll")
    stride_attr = () if stride is None else (int(stride), int(stride_axis))
    return emit_array("roll", [x, astype(amount, "int32")], axis=int(axis), stride=stride_attr)


def bitcast(x: Any, dtype: Any) -> TracedArray:
    """``x``'s bits as ``dtype``; when the widths differ, the second-minor dim scales by their
    ratio as the TPU packs narrow dtypes (``pltpu.bitcast``: an ``i32[8,128]`` is an
    ``i16[16,128]``, row ``2i + k`` holding piece ``k`` of row ``i``, low piece first)."""
    x = asarray(x)
    if x.ndim < 2:
        raise trace_error(
            f"bitcast of {x.type}: needs at least 2 dims (upstream: 'Not implemented: bitcast 1D')",
            op="bitcast",
            fix="reshape to (rows, lanes) first",
        )
    return emit_array("packed_bitcast", [x], dtype=canonical(dtype))
