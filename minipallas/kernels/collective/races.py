"""Races a collective kernel's index arithmetic proves, found before anything runs (issue 15).

Within one epoch (between two barriers) the programs of a group are unordered. When an access
to the shared allocation has a window computed only from the grid indices and constants (the
usual ``shared[ds(i * 8, 8), :]``), its window is known for every program of the group without
running the kernel: evaluate the index arithmetic per program with the reference interpreter's
own rules. Two such accesses in one epoch, by two different programs, at least one a write and
not both accumulates, that share an element are a race: ``collective_program`` refuses the
kernel with both ops. Accesses whose windows depend on data, masks, views and live values are
left to the multi-program interpreter's check.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product

import numpy as np

from minipallas.ir.core import Function, Op, Value
from minipallas.ir.errors import RaceError
from minipallas.ir.interpret.engine import RULES, Interpreter
from minipallas.ir.interpret.programs import program_name
from minipallas.ir.interpret.windows import locate
from minipallas.ir.opdef import OPS

KINDS = {"get": "read", "swap": "write", "addupdate": "accum"}
MAX_CHECKED = 1 << 16  # elements of a shared buffer times programs: bigger ones are skipped


def check_static_races(
    epoch: Function, grid_params: Sequence[Value], shared: Sequence[Value],
    group: Sequence[tuple[int, ...]], along: Sequence[int],
) -> None:  # fmt: skip
    """Raises ``RaceError`` for two accesses of ``epoch`` to a ``shared`` ref that overlap for
    two programs of ``group`` (grid indices along the axes ``along``; the others at 0)."""
    defs = {r: op for op in epoch.body.ops for r in op.results}
    found = []
    for op in epoch.body.ops:
        if op.name in KINDS and op.operands[0] in shared:
            if int(np.prod(op.operands[0].type.shape)) * len(group) <= MAX_CHECKED:
                masks = _windows(op, defs, grid_params, group, along)
                if masks is not None:
                    found.append((op, masks))
    for (a, ma), (b, mb) in product(found, repeat=2):
        ka, kb = KINDS[a.name], KINDS[b.name]
        if a.operands[0] is not b.operands[0] or (ka == kb and ka in ("read", "accum")):
            continue  # another buffer, or two reads, or two accumulates: no race
        flat_a, flat_b = (m.reshape(len(group), -1).astype(np.int32) for m in (ma, mb))
        overlap = flat_a @ flat_b.T  # [p, q]: elements program p's a and program q's b share
        np.fill_diagonal(overlap, 0)
        if overlap.any():
            p, q = (int(k) for k in np.argwhere(overlap)[0])
            raise RaceError(
                f"statically: program {program_name(group[p])} {ka}s the shared buffer where "
                f"program {program_name(group[q])} {kb}s it at {b.loc} "
                f"('{b.name}') in the same epoch",
                op=a.name,
                loc=a.loc,
                fix="put a minipallas.barrier between the two accesses, or give each program "
                "its own elements (index by axis_index)",
                first=(b.name, b.loc, program_name(group[q])),
                second=(a.name, a.loc, program_name(group[p])),
            )


def _windows(
    op: Op, defs: dict[Value, Op], grid_params: Sequence[Value],
    group: Sequence[tuple[int, ...]], along: Sequence[int],
) -> np.ndarray | None:  # fmt: skip
    """Per program, the elements of the ref the op touches (bools, ``[programs, *shape]``), or
    None when its window depends on more than the grid indices and constants."""
    indexer = op.attrs["indexer"]
    dyn = list(op.group("indices"))
    slice_ops = _slice(dyn, defs, set(grid_params))
    if slice_ops is None:
        return None
    interp = Interpreter()
    shape = op.operands[0].type.shape
    masks = np.zeros((len(group), *shape), np.bool_)
    for k, point in enumerate(group):
        env = {p: np.int32(0) for p in grid_params}
        for axis, i in zip(along, point, strict=True):
            env[grid_params[axis]] = np.int32(i)
        for s in slice_ops:
            outs = RULES[s.name](interp, s, [env[v] for v in s.operands])
            env.update(zip(s.results, outs, strict=True))
        access = locate(interp, op, indexer, shape, [env[v] for v in dyn])
        if not access.basic:  # an index array: left to the simulator
            return None
        masks[k][access.index] = True
    return masks


def _slice(values: list[Value], defs: dict[Value, Op], leaves: set[Value]) -> list[Op] | None:
    """The pure ops computing ``values`` from ``leaves`` and constants, in order; None if they
    need anything else."""
    needed: dict[Op, None] = {}

    def visit(v: Value) -> bool:
        if v in leaves:
            return True
        op = defs.get(v)
        if op is None or op.regions or op.name in KINDS or not _pure(op):
            return False
        if op not in needed:
            if not all(visit(u) for u in op.operands):
                return False
            needed[op] = None
        return True

    return list(needed) if all(visit(v) for v in values) else None


def _pure(op: Op) -> bool:
    return OPS[op.name].pure
