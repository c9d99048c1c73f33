"""Import rule for upstream's ``emit_pipeline`` primitive (``pltpu.emit_pipeline`` with the
primitive on, as in a core of a mesh kernel): the pipeline's grid as one ``for`` loop.

A pipeline runs its body at every point of its grid, in row-major order, over blocks of its
operands (refs, usually in HBM) that its block specs pick; the double-buffered copies into VMEM
are how the chip overlaps them, and a race-free body cannot tell. So it imports as what it
computes: a ``for`` over the grid's points (its sizes static or given at run time), whose step
finds each operand's block with the spec's index map and calls the body, bound to that grid
point (``passes.kernel.bind_grid``: its ``program_id`` and ``num_programs`` answered), on
views of the blocks (``ref.at``): reads and writes land in the operands themselves.

On a mesh, ``emit_pipeline(..., core_axis_name=...)`` splits a ``parallel`` grid axis among the
cores: each core runs its part, offset by where its part starts (``_static_grid_offsets``, or a
value given at run time); its grid indices are global (``program_id``), its sizes the part's.

Refused: index maps with captured constants, block dimensions other than ``Blocked`` (or
squeezed), and a ``lax.axis_index`` inside the body (the body sees the pipeline's grid only).
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import READ, NoEffect
from minipallas.interop.importer.rules.dma import _ref
from minipallas.ir.core import Function, Value
from minipallas.ir.indexing import Dyn, Int, Slice
from minipallas.ir.types import ArrayType, RefType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import pallas_core, state_types, tree_util
from minipallas.passes.kernel.bind_grid import bind_grid

I32 = ArrayType((), "int32")


_SPLIT = NoEffect("which axis is split among cores: each core's part, and where it starts, are "
                  "in grid_mapping and _static_grid_offsets already")  # fmt: skip


@rule(
    "emit_pipeline",
    params={
        "grid_mapping": READ,
        "body_jaxpr": READ,
        "args_tree": READ,
        "body_consts_len": READ,
        "_num_extra_dynamic": READ,
        "_static_grid_offsets": READ,
        "core_axis": _SPLIT,
        "core_axis_name": _SPLIT,
        "dimension_semantics": NoEffect(
            "the order the grid may run in; the import runs it in row-major order, which "
            "every semantics allows (the split among cores is above)"
        ),
        "tiling": NoEffect("how the blocks' buffers are tiled in VMEM"),
        "no_pipelining": NoEffect("whether copies overlap the body; the blocks are the same"),
        "trace_scopes": NoEffect("named scopes around the pipeline's steps, for profiles"),
    },
)
def emit_pipeline(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    p, gm = eqn.params, eqn.params["grid_mapping"]
    if any(bm.index_map_jaxpr.consts for bm in gm.block_mappings):
        raise scope.error("a pipeline whose index maps capture constants cannot be imported")
    atoms = list(eqn.invars)
    n_dyn, n_extra, n_consts = (
        gm.num_dynamic_grid_bounds,
        p["_num_extra_dynamic"],
        p["body_consts_len"],
    )
    dyn = [scope.read(a) for a in atoms[:n_dyn]]
    extra = [scope.read(a) for a in atoms[n_dyn : n_dyn + n_extra]]
    consts = [scope.read(a) for a in atoms[n_dyn + n_extra : n_dyn + n_extra + n_consts]]
    tree = tree_util.tree_unflatten(p["args_tree"], atoms[n_dyn + n_extra + n_consts :])
    leaves = tree_util.tree_leaves(
        tree, is_leaf=lambda x: isinstance(x, state_types.TransformedRef)
    )
    refs = [_ref(scope, leaf) for leaf in leaves]
    sizes, dyn_left = [], iter(dyn)
    for n in gm.grid:
        sizes.append(
            next(dyn_left) if pallas_core.is_dynamic_dim(n) else scope.constant(int(n), "int32")
        )
    extra_left = iter(extra)
    offsets = [
        next(extra_left) if pallas_core.is_dynamic_dim(o) else scope.constant(int(o), "int32")
        for o in p["_static_grid_offsets"]
    ]
    blocks = [_block(scope, bm) for bm in gm.block_mappings]
    block_types = [
        RefType(tuple(b for b in blk if b is not None), ref.type.dtype, ref.type.memory_space)
        for ref, blk in zip(refs, blocks, strict=True)
    ]
    body = _body(scope, p["body_jaxpr"], gm, block_types, consts)
    total = sizes[0]
    for n in sizes[1:]:
        total = scope.emit("mul", [total, n])
    outer = [*refs, *sizes, *offsets, *consts]
    params = [Value(v.type) for v in outer]
    k = Value(I32)
    inner = scope.child()
    r, s, o, c = _split(params, len(refs), len(sizes), len(offsets))
    local = _unravel(inner, k, s)
    point = [inner.emit("add", [i, off]) for i, off in zip(local, o, strict=True)]
    views = [
        _view(inner, ref, bm, blk, point)
        for ref, bm, blk in zip(r, gm.block_mappings, blocks, strict=True)
    ]
    dynamic = [n for n, d in zip(s, gm.grid, strict=True) if pallas_core.is_dynamic_dim(d)]
    inner.emit_op("call", [*point, *dynamic, *views, *c], callee=body)
    block = inner.builder.block([k, *params], [])
    scope.emit_op(
        "for", [scope.constant(0, "int32"), total, *outer], [block], num_consts=len(outer)
    )
    return []


def _split(values: list, *counts: int) -> list[list]:
    out, start = [], 0
    for n in counts:
        out.append(values[start : start + n])
        start += n
    out.append(values[start:])
    return out


def _block(scope: ImportScope, bm: object) -> tuple:
    """A block mapping's block shape: an int per ``Blocked`` dimension, None per squeezed one."""
    shape = []
    for d in bm.block_shape:
        if isinstance(d, pallas_core.Squeezed) or d is None:
            shape.append(None)
        elif isinstance(d, pallas_core.Blocked):
            shape.append(int(d.block_size))
        else:
            raise scope.error(f"a pipeline block dimension {d!r} cannot be imported",
                              fix="use blocked (or squeezed) dimensions")  # fmt: skip
    return tuple(shape)


def _body(
    scope: ImportScope, jaxpr: jax_core.Jaxpr, gm: object, types: list, consts: list
) -> Function:
    """The pipeline body as a function of its grid point (bound: ``bind_grid``), then its
    block refs (of ``types``: the blocks in their operands' memory), then its constants."""
    importer = scope.importer
    moved = jaxpr.replace(constvars=[], invars=[*jaxpr.invars, *jaxpr.constvars])
    enclosing, importer.mesh = importer.mesh, None  # the body sees the pipeline's grid only
    try:
        fn = importer.function(importer.unique_name("pipeline_body"), moved, (),
                               [*types, *(c.type for c in consts)])  # fmt: skip
    finally:
        importer.mesh = enclosing
    grid = [None if pallas_core.is_dynamic_dim(n) else int(n) for n in gm.grid]
    return bind_grid(fn, grid)


def _unravel(scope: ImportScope, k: Value, sizes: list[Value]) -> list[Value]:
    """Row-major grid indices of step ``k`` (the last axis fastest, as upstream iterates)."""
    indices, rest = [], k
    for n in reversed(sizes):
        indices.append(scope.emit("rem", [rest, n]))
        rest = scope.emit("div", [rest, n])
    return indices[::-1]


def _view(scope: ImportScope, ref: Value, bm: object, block: tuple, point: list[Value]) -> Value:
    """``ref``'s block at the grid point: the index map's block indices times the block."""
    index_map = bm.index_map_jaxpr
    indices = scope.inline(index_map.jaxpr, index_map.consts, point)
    entries, dyn = [], []
    for i, size in zip(indices, block, strict=True):
        start = i if size is None else scope.emit("mul", [i, scope.constant(size, "int32")])
        dyn.append(start)
        pos = Dyn(len(dyn) - 1)
        entries.append(Int(pos) if size is None else Slice(pos, size, 1))
    if not isinstance(ref.type, RefType):
        raise scope.error("a pipeline operand that is not a ref cannot be imported")
    return scope.emit("ref.at", [ref, *dyn], indexer=tuple(entries))
