"""Random state statements: indexers of every kind, get/swap/addupdate, masked load/store, views.

An indexer is drawn one dimension at a time from: full slice, static int, static slice (with
a stride), dynamic int, dynamic slice (``Slice(Dyn(k), size, stride)``) and integer array. Dynamic
starts and ints come from visible integer scalars (parameters, loop indices, computed values)
or constants that are sometimes out of range, so clamping is exercised. Integer-array indices
for reads are constants with out-of-range entries (gathers clamp) or visible integer arrays;
for writes they are constants holding distinct in-range positions plus, sometimes, positions
out of range (which writes drop), so no two updates land on one element (except integer
``addupdate``, where repeated positions add up in any order to the same result).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from minipallas.ir import dtypes, indexing
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.types import ArrayType, RefType
from minipallas.tools.generate.program import Var
from minipallas.tools.generate.scope import BITCAST_PARTNERS, SampleScope, factor_shape, permutation

if TYPE_CHECKING:  # the sampler's menu holds these statements: it imports this module
    from minipallas.tools.generate.sampler import Sampler

KINDS = ("full", "int", "slice", "dyn_int", "dyn_slice", "array")


def indexer(
    s: Sampler, scope: SampleScope, shape: tuple[int, ...], *, arrays: bool, write: str = ""
) -> tuple[tuple, list[Var]]:
    """A random indexer for ``shape`` and its dynamic index variables (``Dyn(k)`` is ``[k]``).

    ``write`` is "" for reads, "set" for swap/store, "add" for addupdate.
    """
    kinds = KINDS if arrays and s.cfg.array_indexers else KINDS[:-1]
    plan = []  # (kind, static parameters) per dimension
    for n in shape:
        kind = s.c.pick(kinds)
        if n == 0 and kind in ("int", "dyn_int", "array"):
            kind = "full"
        if kind in ("slice", "dyn_slice"):
            stride = s.c.integer(1, 3)
            size = s.c.integer(0 if s.c.chance(0.05) else min(n, 1), (n - 1) // stride + 1)
            span = (size - 1) * stride + 1 if size else 0
            plan.append((kind, (stride, size, span)))
        else:
            plan.append((kind, ()))
    array_dims = [d for d, (kind, _) in enumerate(plan) if kind == "array"]
    index_arrays = iter(array_indices(s, scope, [shape[d] for d in array_dims], write))
    entries, dyn = [], []
    for n, (kind, params) in zip(shape, plan, strict=True):
        if kind == "full":
            entries.append(Slice(0, n, 1))
        elif kind == "int":
            entries.append(Int(s.c.integer(0, n - 1)))
        elif kind == "slice":
            stride, size, span = params
            entries.append(Slice(s.c.integer(0, n - span), size, stride))
        elif kind == "dyn_int":
            entries.append(Int(Dyn(len(dyn))))
            dyn.append(index_scalar(s, scope, n - 1))
        elif kind == "dyn_slice":
            stride, size, span = params
            entries.append(Slice(Dyn(len(dyn)), size, stride))
            dyn.append(index_scalar(s, scope, n - span))
        else:
            entries.append(Array(Dyn(len(dyn))))
            dyn.append(next(index_arrays))
    return tuple(entries), dyn


def index_scalar(s: Sampler, scope: SampleScope, hi: int) -> Var:
    """An integer scalar meant to land in ``[0, hi]``; sometimes a visible one, or out of range."""
    if s.c.chance(0.6):
        found = s.find(scope, ArrayType((), "int32"))
        if found is not None:
            return found
    dtype = s.c.weighted([(8, "int32"), (1, "int8"), (1, "uint32")])
    value = s.c.integer(-2 if dtype != "uint32" else 0, hi + 2)
    return s.index_constant(scope, np.array(value), dtype)


def array_indices(s: Sampler, scope: SampleScope, extents: list[int], write: str) -> list[Var]:
    """Integer-array index operands for dimensions of ``extents`` (one shared index shape)."""
    if not extents:
        return []
    if write:
        # Distinct in-range tuples, a few then pushed out of range (those updates are dropped).
        total = int(np.prod(extents))
        k = s.c.integer(1, min(total, 4))
        rng = np.random.default_rng(s.c.integer(0, 1 << 16))
        if write == "add" and s.c.chance(0.3):
            flat = rng.integers(0, total, k)  # duplicates: added up one after another
        else:
            flat = rng.choice(total, k, replace=False)
        cols = [np.asarray(c) for c in np.unravel_index(flat, extents)]
        if s.c.chance(0.3):
            col = s.c.integer(0, len(cols) - 1)
            cols[col] = np.where(rng.random(k) < 0.5, cols[col], extents[col] + 1)
        return [s.index_constant(scope, c) for c in cols]
    index_shape = s.c.pick([(s.c.integer(1, 4),), (), (s.c.integer(1, 3), s.c.integer(1, 3))])
    found = []
    for n in extents:
        reuse = s.find(scope, ArrayType(index_shape, "int32")) if s.c.chance(0.2) else None
        if reuse is None:
            seed = np.random.default_rng(s.c.integer(0, 1 << 16))
            reuse = s.index_constant(scope, seed.integers(-2, n + 2, index_shape))
        found.append(reuse)
    return found


def window(ref: Var, idx: tuple, dyn: list[Var]) -> ArrayType:
    shape = indexing.result_shape(idx, [d.type for d in dyn])
    return ArrayType(shape, ref.type.dtype)


def access(
    s: Sampler, scope: SampleScope, write: str = "", ok: Callable[[Var], bool] | None = None
) -> tuple[Var, tuple, list[Var]] | None:
    """A ref, indexer and dynamic indices for a state op, or None if no ref fits.

    Often a window an earlier op in a visible scope used again, so reads see earlier writes
    of the same window and cleanup's forwarding has something to do; otherwise a new one.
    A window holding repeated integer-array positions is never reused for a write that sets.
    """
    if s.c.chance(0.3):
        lists = [sc.windows for sc in scope.chain() if sc.windows]
        if lists:
            ref, idx, dyn, unique = s.recent(s.c.pick(lists))  # type: ignore[misc]
            fits = (not write or s.writable(scope, ref)) and (ok is None or ok(ref))
            if fits and (unique or write != "set"):
                return ref, idx, dyn
    ref = s.pick_ref(scope, write=bool(write), ok=ok)
    if ref is None:
        return None
    idx, dyn = indexer(s, scope, ref.type.shape, arrays=True, write=write)
    scope.windows.append((ref, idx, dyn, write == "set" or not indexing.has_arrays(idx)))
    return ref, idx, dyn


def get(s: Sampler, scope: SampleScope) -> None:
    found = access(s, scope)
    if found is not None:
        ref, idx, dyn = found
        s.emit(scope, "get", (ref, *dyn), {"indexer": idx})


def swap(s: Sampler, scope: SampleScope) -> None:
    found = access(s, scope, "set")
    if found is not None:
        ref, idx, dyn = found
        value = s.obtain(scope, window(ref, idx, dyn))
        s.emit(scope, "swap", (ref, *dyn, value), {"indexer": idx})


def addupdate(s: Sampler, scope: SampleScope) -> None:
    """Accumulate; repeated integer-array positions only into integers (order-free sums)."""
    ok = lambda r: r.type.dtype != "bool"  # noqa: E731
    found = access(s, scope, "set", ok) if s.c.chance(0.5) else None
    found = found or access(s, scope, "add", lambda r: ok(r) and dtypes.is_int(r.type.dtype))
    if found is not None:
        ref, idx, dyn = found
        value = s.obtain(scope, window(ref, idx, dyn))
        s.emit(scope, "addupdate", (ref, *dyn, value), {"indexer": idx})


def load(s: Sampler, scope: SampleScope) -> None:
    """A masked load. Without ``other`` its masked-off lanes are unspecified, so the loaded
    value is used only through a ``select`` on the same mask."""
    found = access(s, scope)
    if found is None:
        return
    ref, idx, dyn = found
    win = window(ref, idx, dyn)
    mask = s.obtain(scope, ArrayType(win.shape, "bool"))
    other = s.c.pick(("none", "scalar", "window"))
    attrs = {"indexer": idx, "masked": True, "has_other": other != "none"}
    if other == "none":
        (loaded,) = s.emit(scope, "load", (ref, *dyn, mask), attrs, pool=False)
        s.emit(scope, "select", (mask, loaded, s.obtain(scope, win)))
        return
    fill = s.obtain(scope, win if other == "window" else ArrayType((), win.dtype))
    s.emit(scope, "load", (ref, *dyn, mask, fill), attrs)


def store(s: Sampler, scope: SampleScope) -> None:
    found = access(s, scope, "set")
    if found is None:
        return
    ref, idx, dyn = found
    win = window(ref, idx, dyn)
    value = s.obtain(scope, win)
    if s.c.chance(0.7):
        mask = s.obtain(scope, ArrayType(win.shape, "bool"))
        s.emit(scope, "store", (ref, *dyn, value, mask), {"indexer": idx, "masked": True})
    else:
        s.emit(scope, "store", (ref, *dyn, value), {"indexer": idx, "masked": False})


def view(s: Sampler, scope: SampleScope) -> None:
    """A view of a visible ref: ``ref.at`` window, reshape, bitcast or transpose; chains of
    views stay at most ``Config.max_view_chain`` long, as in real kernels."""
    ref = s.pick_ref(scope, ok=lambda r: s.chain_length.get(r, 0) < s.cfg.max_view_chain)
    if ref is None:
        return
    t: RefType = ref.type  # type: ignore[assignment]
    kind = s.c.pick(s.cfg.view_kinds)
    if kind == "reshape" and t.ndim and 0 not in t.shape:
        out = s.emit(
            scope, "ref.reshape", (ref,), {"shape": factor_shape(s.c, math.prod(t.shape), t.shape)}
        )
    elif kind == "bitcast" and t.dtype in BITCAST_PARTNERS:
        dtype = s.c.pick([d for d in BITCAST_PARTNERS[t.dtype] if d in s.cfg.dtypes] or [t.dtype])
        out = s.emit(scope, "ref.bitcast", (ref,), {"dtype": dtype})
    elif kind == "transpose" and t.ndim >= 2:
        perm = tuple(permutation(s.c, t.ndim))
        out = s.emit(scope, "ref.transpose", (ref,), {"permutation": perm})
    else:
        idx, dyn = indexer(s, scope, t.shape, arrays=False)
        out = s.emit(scope, "ref.at", (ref, *dyn), {"indexer": idx})
    (v,) = out
    s.root[v] = s.root[ref]
    s.chain_length[v] = s.chain_length.get(ref, 0) + 1
    scope.refs.append(v)
