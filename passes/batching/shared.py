"""Shared arrays: one array for every batch point, each point writing its own positions.

A collective group's programs share their scratch (issue 15): batched over the group, the
scratch is not one copy per point but one array, and each program's write lands in it. That
is sound when the points never touch what another writes (race-free between barriers): a
point then reads the same elements from the one array as from its own copy.

- A write into a shared array (``dynamic_update_slice``) whose index or contents differ
  between points is one ``scatter_add`` over each point's clamped positions (``indexed``'s
  ``window_positions``, without the batch axes), into the array itself, of the bits each
  point changes (``_write``). Under a ``cond`` whose branch differs between points, the points
  that do not take the branch add nothing.
- A control op that carries a shared array keeps it shared: its regions take it as a shared
  parameter and must give back its newest value (``origins`` says which result that is).
- Anything else reading a shared array reads it as an unbatched value.

A write with integer-array indices into a shared array has no batched form here
(``NotBatchable``); nor has a result that would differ between points (``into_shared``).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.ir import dtypes, indexing
from minipallas.ir.builder import Builder
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.passes.batching.engine import (
    SHARED_WRITES,
    Batched,
    Batcher,
    NotBatchable,
    axes,
    emit,
    splat,
)
from minipallas.passes.batching.indexed import window_positions

WRITES = ("dynamic_update_slice", "scatter", "scatter_add")


@SHARED_WRITES.register(*WRITES)
def _write(bt: Batcher, builder: Builder, op: Op, ins: list[Batched]) -> list[Batched]:
    """Each point adds the bit difference between what it writes and what the array holds
    there: integer adds commute, so a point that writes back what it read (a window that
    discharge takes through a branch and back) adds nothing, and one that writes a new value
    sets exactly its bits, wherever the points' windows overlap."""
    x = ins[0][0]
    root = bt.current(op, x)
    dtype, unbatched = x.type.dtype, (None,) * op.result.type.ndim
    if bt.mask is None and not any(axes(lay) for _, lay in ins):
        new = builder.add(op.renamed(tuple(v for v, _ in ins))).result
        bt.share(new, root)
        return [(new, unbatched)]
    if indexing.has_arrays(op.attrs["indexer"]) or op.result.type.ndim == 0:
        raise NotBatchable(
            "a write into a shared array that differs between batch points needs a window "
            "without integer-array indices",
            op=op.name,
            loc=op.loc,
        )
    if dtype == "bool" or dtypes.itemsize(dtype) > 4:
        raise NotBatchable(f"a shared {dtype} array has no batched writes", op=op.name, loc=op.loc)
    positions, indexer = window_positions(bt, builder, op, ins[1:-1], batched=False)
    attrs = {"indexer": indexer}
    held = builder.create("gather", [x, *positions], attrs, (), op.loc).result
    bits = dtypes.signed_twin(dtype) if dtypes.is_float(dtype) else dtype
    update = _as(builder, bt.to_leading(builder, ins[-1]), bits)
    delta = emit(builder, "sub", [update, _as(builder, held, bits)])
    if bt.mask is not None:  # the points that do not take the branch write nothing
        taken = emit(builder, "broadcast_in_dim", [bt.mask], shape=delta.type.shape,
                     dims=tuple(range(len(bt.sizes))))  # fmt: skip
        delta = emit(builder, "select", [taken, delta, splat(builder, 0, delta.type)])
    summed = builder.create("scatter_add", [_as(builder, x, bits), *positions, delta], attrs,
                            (), op.loc).result  # fmt: skip
    new = _as(builder, summed, dtype)
    bt.share(new, root)
    return [(new, unbatched)]


def _as(builder: Builder, value: Value, dtype: str) -> Value:
    """``value``'s bits as ``dtype`` (of the same width)."""
    return value if value.type.dtype == dtype else emit(builder, "bitcast", [value], dtype=dtype)


def result_roots(bt: Batcher, op: Op, regions: Sequence[Block], ins: Sequence[Batched]) -> list:
    """For each result of the control op ``op``, the shared array it is the newest value of
    (None if none): its regions' ``origins``, each the number of a region parameter bound
    to ``ins``; a result that is a version of two shared arrays has no batched form."""
    args = [bt.current(op, v) for v, _ in ins]
    found: list[set[int]] = [set() for _ in op.results]
    for region in regions:
        for k, origin in enumerate(origins(region)):
            if origin is not None and args[origin] is not None:
                found[k].add(args[origin])
    if any(len(roots) > 1 for roots in found):
        raise NotBatchable("a result is a version of two shared arrays", op=op.name, loc=op.loc)
    return [next(iter(roots), None) for roots in found]


def origins(block: Block) -> list[int | None]:
    """For each result of ``block``, the parameter it is a written version of, if it is one:
    followed through writes and through the regions of ``cond``, ``for`` and ``call``."""
    origin = {p: k for k, p in enumerate(block.params)}
    for op in block.ops:
        if op.name in WRITES and op.operands[0] in origin:
            origin[op.result] = origin[op.operands[0]]
            continue
        inner = _inner_origins(op)
        for r, k in zip(op.results, inner, strict=False):
            if k is not None and op.operands[k] in origin:
                origin[r] = origin[op.operands[k]]
    return [origin.get(r) for r in block.results]


def _inner_origins(op: Op) -> list[int | None]:
    """For each result of ``op``, the operand it is a version of, through its regions."""
    if op.name == "cond":  # branch parameter k is operand k + 1 (after the branch index)
        per_branch = zip(*(origins(b) for b in op.regions), strict=True)
        return [next((k + 1 for k in ks if k is not None), None) for ks in per_branch]
    if op.name in ("for", "while"):  # the body's carries receive the inits
        body = len(op.regions) - 1
        first_carry = op.param_slices(body)["inits"].start
        return _carried(origins(op.regions[body]), first_carry, op.slices()["inits"].start)
    if op.name == "call":
        callee: Function = op.attrs["callee"]
        return origins(callee.body)
    return []


def _carried(body: list[int | None], first_carry: int, first_init: int) -> list[int | None]:
    """Loop result j is a version of init j if the body gives back a version of carry j."""
    return [first_init + j if k == first_carry + j else None for j, k in enumerate(body)]
