"""The cleanup pass's rewrite patterns: small local facts about pure ops, one function each.

A pattern looks at one op (its operands already cleaned) and the ops that defined those operands,
and returns what to use instead: an existing ``Value`` (the op disappears), a new ``Op`` with the
same results (the pass tries the patterns again on it), or ``None`` (no match). Patterns are
registered per op name with ``@pattern``. Each holds for every input, including the clamping of
dynamic starts: two ops with the same indexer and the very same dynamic index values (identity)
pick the same window.

Windows written by ``scatter`` are not forwarded to later ``gather``s: duplicate and
out-of-range indices make the read differ from the update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from minipallas.ir.core import Op, Value
from minipallas.ir.indexing import Int, Slice
from minipallas.ir.rules import check_name, declared_ops
from minipallas.passes.indexer_facts import facts, pair


class Pattern(Protocol):
    """``(op, defs) -> Value | Op | None``; ``defs`` maps a value to the op that defined it."""

    def __call__(self, op: Op, defs: Mapping[Value, Op]) -> Value | Op | None: ...


PATTERNS: dict[str, list[Pattern]] = {}

# How far a pattern looks back through a chain of writes, and how many times one op may be
# rewritten: bounds that keep the pass linear in program size.
MAX_WALK = 16


def pattern(
    *names: str, table: dict[str, list[Pattern]] = PATTERNS
) -> Callable[[Pattern], Pattern]:
    """Registers a pattern for the ops ``names`` in ``table``; patterns of one op are tried in
    order. A name that is no declared op is a ``ValueError`` (a pattern that could never
    match)."""
    for name in names:
        check_name(name, declared_ops(), "cleanup pattern")

    def register(fn: Pattern) -> Pattern:
        for name in names:
            table.setdefault(name, []).append(fn)
        return fn

    return register


# --- windows -------------------------------------------------------------------------------


def _x(op: Op) -> Value:
    """A window op's array (its declared operand ``x``)."""
    (x,) = op.group("x")
    return x


def _update(op: Op) -> Value:
    """A window write's new values (its declared operand ``update``)."""
    (update,) = op.group("update")
    return update


def _same_window(a: Op, b: Op) -> bool:
    return a.attrs["indexer"] == b.attrs["indexer"] and a.group("indices") == b.group("indices")


def _is_whole(op: Op) -> bool:
    """The indexer selects all of ``x`` (a full-size slice's dynamic start clamps to 0)."""
    return facts(op.attrs["indexer"]).slice_sizes == _x(op).type.shape


def _positions(entry: Int | Slice) -> range:
    if isinstance(entry, Int):
        return range(entry.index, entry.index + 1)
    return range(entry.start, entry.start + entry.size * entry.stride, entry.stride)


def _static_basic(op: Op) -> bool:
    """Static ints and slices only: the window is known when the pass runs."""
    return facts(op.attrs["indexer"]).static_basic


def _disjoint(a: tuple, b: tuple) -> bool:
    """Two static windows of one array share no element: they are apart in some dimension."""
    return any(_apart(_positions(ea), _positions(eb)) for ea, eb in zip(a, b, strict=True))


def _apart(a: range, b: range) -> bool:
    if not a or not b:
        return True
    if len(a) == 1:
        return a[0] not in b
    if len(b) == 1:
        return b[0] not in a
    if a.step == b.step == 1:
        return a.stop <= b.start or b.stop <= a.start
    return set(a).isdisjoint(b)


def _relative(read: tuple, written: tuple) -> tuple | None:
    """The static ``read`` window as an indexer into the ``written`` window's update, or None.

    The update has one dimension per ``Slice`` of ``written``; an ``Int`` of ``written`` dropped
    its dimension, so ``read`` must pick that same position with an ``Int`` too.
    """
    out = []
    for r, w in zip(read, written, strict=True):
        if isinstance(w, Int):
            if not (isinstance(r, Int) and r.index == w.index):
                return None
            continue
        if isinstance(r, Int):
            offset, rem = divmod(r.index - w.start, w.stride)
            if rem or not 0 <= offset < w.size:
                return None
            out.append(Int(offset))
            continue
        offset, rem = divmod(r.start - w.start, w.stride)
        last = r.start + (r.size - 1) * r.stride
        if rem or r.stride % w.stride or offset < 0 or not r.size or last not in _positions(w):
            return None
        out.append(Slice(offset, r.size, r.stride // w.stride))
    return tuple(out)


# --- reads ---------------------------------------------------------------------------------


@pattern("slice", "dynamic_slice")
def read_whole(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """``slice x[:, :]`` is ``x``."""
    return _x(op) if _is_whole(op) else None


@pattern("slice", "dynamic_slice", "gather")
def read_uninitialized(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """A window of an uninitialized value is a smaller uninitialized value."""
    source = defs.get(_x(op))
    if source is None or source.name != "uninitialized":
        return None
    return op.replace(name="uninitialized", operands=(), attrs={"type": op.results[0].type})


@pattern("slice", "dynamic_slice")
def read_after_write(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """Forward a written window to a read of it; read past writes to other static windows.

    - ``x[I] = u`` then ``read x[I]`` (same indexer, same dynamic values) gives ``u``;
    - static, the read inside the written window: a slice of ``u``;
    - static, the read apart from the written window: read the array before the write, and
      look at the write before that (up to ``MAX_WALK`` writes in one go, so that a read past
      many writes is one rewrite rather than a new op per write).
    """
    source = _x(op)
    read = op.attrs["indexer"]
    static = _static_basic(op)
    for _ in range(MAX_WALK):
        write = defs.get(source)
        if write is None or write.name != "dynamic_update_slice":
            break
        update = _update(write)
        if _same_window(op, write):
            return update
        if not (static and _static_basic(write)):
            break
        written = write.attrs["indexer"]
        inner = pair(_relative, read, written)
        if inner is not None:
            return op.replace(name="slice", operands=(update,), attrs={"indexer": inner})
        if not pair(_disjoint, read, written):
            break
        source = _x(write)
    return op.replace(operands=(source,)) if source is not _x(op) else None


# --- writes --------------------------------------------------------------------------------


@pattern("dynamic_update_slice")
def write_whole(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """Replacing every element gives the update (this folds a fully overwritten
    ``uninitialized``)."""
    return _update(op) if _is_whole(op) else None


@pattern("dynamic_update_slice", "scatter")
def write_back_read(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """``x[I] = x[I]`` is ``x`` (for scatter too: a clamped gather's out-of-range lanes are
    dropped by the scatter, duplicates write the same value). Static windows: also when ``x``
    is the array read from after writes apart from ``I`` (they left ``x[I]`` as it was)."""
    read = defs.get(_update(op))
    reads = {"dynamic_update_slice": ("slice", "dynamic_slice"), "scatter": ("gather",)}
    if read is None or read.name not in reads[op.name] or not _same_window(op, read):
        return None
    x, source = _x(op), _x(read)
    if x is source:
        return x
    if not _static_basic(op):
        return None
    window = op.attrs["indexer"]
    current = x
    for _ in range(MAX_WALK):
        write = defs.get(current)
        if write is None or write.name != "dynamic_update_slice" or not _static_basic(write):
            return None
        if not pair(_disjoint, window, write.attrs["indexer"]):
            return None
        current = _x(write)
        if current is source:
            return x
    return None


@pattern("dynamic_update_slice", "scatter")
def overwrite(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """A write hidden by a later write to the same (or, static, a larger) window is dropped."""
    earlier = defs.get(_x(op))
    if earlier is None or earlier.name != op.name:
        return None
    hidden = _same_window(op, earlier) or (
        _static_basic(op)
        and _static_basic(earlier)
        and pair(_relative, earlier.attrs["indexer"], op.attrs["indexer"]) is not None
    )
    operands = (_x(earlier), *op.group("indices"), _update(op))
    return op.replace(operands=operands) if hidden else None


# --- selects --------------------------------------------------------------------------------


@pattern("select")
def select_known(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """``select`` with a constant all-true or all-false mask (a discharged masked access with a
    full mask), or with two equal branches, is one of its branches."""
    mask, on_true, on_false = op.operands
    if on_true is on_false:
        return on_true
    source = defs.get(mask)
    if source is None or source.name != "constant" or not source.attrs["value"].is_splat():
        return None
    bits = source.attrs["value"].array()
    return on_true if bits.size == 0 or bool(bits.flat[0]) else on_false


# --- shape changes -------------------------------------------------------------------------


@pattern("reshape", "bitcast", "convert", "transpose", "broadcast_in_dim")
def no_change(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """An op whose result type is its operand's type, and that moves no element, is a no-op."""
    (x,) = op.operands
    if op.results[0].type != x.type:
        return None
    if op.name == "transpose" and op.attrs["permutation"] != tuple(range(x.type.ndim)):
        return None
    if op.name == "broadcast_in_dim" and op.attrs["dims"] != tuple(range(x.type.ndim)):
        return None
    return x


@pattern("reshape", "bitcast", "transpose", "broadcast_in_dim")
def compose(op: Op, defs: Mapping[Value, Op]) -> Value | Op | None:
    """Two reshapes (bitcasts, transposes, broadcasts) in a row are one; discharged views and
    the front end's scalar broadcasts make such pairs."""
    inner = defs.get(op.operands[0])
    if inner is None or inner.name != op.name:
        return None
    attrs = dict(op.attrs)
    if op.name == "transpose":
        first, then = inner.attrs["permutation"], op.attrs["permutation"]
        attrs["permutation"] = tuple(first[p] for p in then)
    if op.name == "broadcast_in_dim":  # x's dim k goes to dims[k], then to outer dims[dims[k]]
        attrs["dims"] = tuple(op.attrs["dims"][d] for d in inner.attrs["dims"])
    return op.replace(operands=inner.operands, attrs=attrs)
