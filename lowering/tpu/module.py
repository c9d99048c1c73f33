"""The Mosaic module's shape: the kernel ``func.func`` and one index-map function per block spec.

This is the calling convention Pallas TPU hands to Mosaic (upstream's
``lower_jaxpr_into_pipelined_module``)::

    func.func @kernel(%i: i32, %j: i32,                       // one per grid axis
                      %x: memref<128x128xf32, #tpu.memory_space<vmem>>, ...,   // operands
                      %acc: memref<128x128xf32, #tpu.memory_space<vmem>>)       // scratch
        attributes {dimension_semantics = [...], iteration_bounds = array<i64: 2, 2>,
                    scalar_prefetch = 0, scratch_operands = 1, tpu.core_type = #tpu.core_type<tc>,
                    window_params = [{transform_indices = @transform_0,
                                      window_bounds = array<i64: 128, 128>}, ...]}
    func.func @transform_0(%i: i32, %j: i32) -> (i32, i32)   // the block spec's index map

With scalar prefetch (``PrefetchScalarGridSpec``), the kernel and every ``@transform_k`` take
the prefetched arrays as whole SMEM memrefs right after the grid indices, and
``scalar_prefetch`` counts them. A dynamic grid size is ``iteration_bounds``' dynamic entry
(``ShapedType.get_dynamic_size()``), read in the body with ``tpu.iteration_bound``.

An operand's memref is one block (a squeezed dimension is 1); ANY-space operands are not
windowed (``{}``) and get no index-map function. A block with ``Element`` dimensions (all of
its dimensions ``Element`` or squeezed, as upstream requires) has ``window_kind =
#tpu.element_window<[low...], [high...]>``, its padding per dimension: its index map returns
element offsets into the padded array. Without a grid there are no windows, iteration bounds
or grid arguments.

A block spec's ``pipeline_mode`` (``Buffered``) becomes its window's ``pipeline_mode``, as
upstream's lowering emits it: ``Buffered(1)`` is ``#tpu.pipeline_mode<synchronous>`` (the block
fetched in the step that uses it), ``Buffered(2)`` ``double_buffered``, and a ``revisit``
adds ``revisit_mode = #tpu.revisit_mode<immediate|any>``. A whole-array VMEM block with an
all-zero index map is fetched once: ``Buffered(1)`` whatever the spec says, as upstream forces
it. Upstream refuses, and so does ``pipeline_params``, with upstream's messages: 3 or more
buffers, lookahead, ``RevisitMode.ANY`` with 2 buffers, and a mode that is not ``Buffered``.
ANY-space windows take no pipeline mode (upstream's skip it too).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from minipallas.ir import dtypes
from minipallas.ir.core import Function
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Buffered, Kernel, RevisitMode, TracedBlockSpec
from minipallas.ir.location import user_location
from minipallas.lowering.compat.jaxlib_shim import func, ir
from minipallas.lowering.tpu import emit
from minipallas.lowering.tpu.context import LoweringContext, MemRef
from minipallas.lowering.tpu.ranges import index_map_ranges


def kernel_function(
    ctx: LoweringContext, kernel: Kernel, body: Function, semantics: Sequence[str]
) -> func.FuncOp:
    """Emits the kernel function (and its index-map functions) into ``ctx.module``."""
    specs = (*kernel.in_specs, *kernel.out_specs)
    for k, spec in enumerate(specs):
        check_block(kernel, k, spec)
    scratch = [emit.scratch_space(t) for t in kernel.scratch_types]
    i32 = ir.IntegerType.get_signless(32)
    arg_types = [
        *([i32] * len(kernel.grid)),
        *(emit.ref_memref_type(t) for t in kernel.scalar_prefetch),
        *(_block_memref(s) for s in specs),
        *(emit.ref_memref_type(t) for t in scratch),
    ]
    with ir.InsertionPoint(ctx.module.body), ir.Location.unknown():
        fn = func.FuncOp(_symbol(kernel.name), ir.FunctionType.get(arg_types, []))
        entry = fn.add_entry_block()
    n_grid, args = len(kernel.grid), list(entry.arguments)
    ctx.grid_indices = args[:n_grid]
    first = n_grid + len(kernel.scalar_prefetch)  # the first block operand
    prefetch, operands = args[n_grid:first], args[first : first + len(specs)]
    scratch_args = args[first + len(specs) :]
    refs = (
        _prefetch_refs(kernel, prefetch)
        + [
            MemRef(a, s.array.dtype, s.memory_space, s.squeezed)
            for a, s in zip(operands, specs, strict=True)
        ]
        + [
            MemRef(a, t.dtype, t.memory_space, (False,) * t.ndim)
            for a, t in zip(scratch_args, scratch, strict=True)
        ]
    )
    with ir.InsertionPoint(entry), ir.Location.unknown():
        ctx.lower_body(body, refs)
        func.ReturnOp([])
    _attributes(ctx, fn, kernel, specs, semantics)
    return fn


def _attributes(
    ctx: LoweringContext,
    fn: func.FuncOp,
    kernel: Kernel,
    specs: Sequence[TracedBlockSpec],
    semantics: Sequence[str],
) -> None:
    attrs = fn.attributes
    i64 = ir.IntegerType.get_signless(64)
    if kernel.grid:
        attrs["window_params"] = ir.ArrayAttr.get(
            [_window(ctx, kernel, k, s) for k, s in enumerate(specs)]
        )
        dynamic = ir.ShapedType.get_dynamic_size()
        attrs["iteration_bounds"] = ir.DenseI64ArrayAttr.get(
            [dynamic if n is None else n for n in kernel.grid]
        )
    attrs["scalar_prefetch"] = ir.IntegerAttr.get(i64, len(kernel.scalar_prefetch))
    attrs["scratch_operands"] = ir.IntegerAttr.get(i64, len(kernel.scratch_types))
    attrs["dimension_semantics"] = ir.ArrayAttr.get(
        [ir.Attribute.parse(f"#tpu.dimension_semantics<{s}>") for s in semantics]
    )
    attrs["tpu.core_type"] = ir.Attribute.parse("#tpu.core_type<tc>")


def _window(ctx: LoweringContext, kernel: Kernel, k: int, spec: TracedBlockSpec) -> ir.Attribute:
    """``window_params`` entry ``k``, emitting its ``@transform_k`` index-map function."""
    if emit.space_name(spec.memory_space) == "any":
        return ir.DictAttr.get({})
    name = f"transform_{k}"
    i32 = ir.IntegerType.get_signless(32)
    n_grid = len(kernel.grid)
    arg_types = [*[i32] * n_grid, *(emit.ref_memref_type(t) for t in kernel.scalar_prefetch)]
    with ir.InsertionPoint(ctx.module.body), ir.Location.unknown():
        fn = func.FuncOp(name, ir.FunctionType.get(arg_types, [i32] * spec.array.ndim))
        entry = fn.add_entry_block()
    args = list(entry.arguments)
    ctx.ranges.update(index_map_ranges(spec.index_map, kernel.grid))  # clamps that cannot fire
    with ir.InsertionPoint(entry), ir.Location.unknown():
        refs = _prefetch_refs(kernel, args[n_grid:])
        func.ReturnOp(ctx.lower_block(spec.index_map.body, [*args[:n_grid], *refs]))
    params = {
        "transform_indices": ir.FlatSymbolRefAttr.get(name),
        "window_bounds": ir.DenseI64ArrayAttr.get(_block_shape(spec)),
    }
    if spec.element_dims:
        params["window_kind"] = _element_window(kernel, k, spec)
    params.update(pipeline_params(kernel, k, spec))
    return ir.DictAttr.get(params)


def pipeline_params(kernel: Kernel, k: int, spec: TracedBlockSpec) -> dict[str, ir.Attribute]:
    """The window's ``pipeline_mode`` (and ``revisit_mode``) entries, as upstream's lowering
    makes them (see the module doc); a mode Mosaic cannot take is refused with upstream's
    message."""
    mode = spec.pipeline_mode
    if emit.space_name(spec.memory_space) == "vmem" and trivial_window(spec):
        mode = Buffered(1)  # fetched once
    if mode is None:
        return {}

    def refuse(message: str, fix: str) -> PassError:
        shown = mode if isinstance(mode, Buffered) else repr(mode)
        return PassError(
            f"{message} (block spec {k} of kernel '{kernel.name}': array {spec.array}, block "
            f"shape {spec.block_shape}, pipeline_mode={shown})",
            op="pallas_call",
            loc=user_location(),
            fix=fix,
        )

    if not isinstance(mode, Buffered):
        raise refuse(
            f"Unsupported pipeline mode: {mode}.",
            "give pipeline_mode=minipallas.Buffered(1) or Buffered(2), or none",
        )
    if mode.use_lookahead:
        raise refuse(
            "Lookahead is not supported for XLA pipeline emitter lowering.",
            "leave use_lookahead=False",
        )
    if not 1 <= mode.buffer_count <= 2:
        raise refuse(
            f"Only single (1) and double (2) buffering are supported. Got {mode.buffer_count}.",
            "give Buffered(1) (fetch in the step that uses the block) or Buffered(2) (the "
            "default: fetch the next block during this step)",
        )
    kind = "synchronous" if mode.buffer_count == 1 else "double_buffered"
    params = {"pipeline_mode": ir.Attribute.parse(f"#tpu.pipeline_mode<{kind}>")}
    if mode.revisit is not None:
        if mode.revisit is RevisitMode.ANY and mode.buffer_count > 1:
            raise refuse(
                "RevisitMode.ANY is not supported with double buffering.",
                "use Buffered(1, revisit=RevisitMode.ANY), or RevisitMode.IMMEDIATE",
            )
        params["revisit_mode"] = ir.Attribute.parse(f"#tpu.revisit_mode<{mode.revisit.value}>")
    return params


def _element_window(kernel: Kernel, k: int, spec: TracedBlockSpec) -> ir.Attribute:
    """``#tpu.element_window<[low...], [high...]>``: each dimension's padding; upstream takes
    a block whose dimensions are all ``Element`` or squeezed only."""
    if any(b is not None and d not in spec.element_dims for d, b in enumerate(spec.block_shape)):
        raise PassError(
            f"block spec {k} of kernel '{kernel.name}' (array {spec.array}, block shape "
            f"{spec.block_shape}, Element dimensions {sorted(spec.element_dims)}): All block "
            "dimensions must be Elements or none of them can be Elements (the Pallas TPU "
            "lowering)",
            op="pallas_call",
            loc=user_location(),
            fix="make every non-squeezed dimension of this block an Element (indexed by its "
            "first element: Element(n) with index i * n for a block index i), or none of them",
        )
    low, high = ([p[j] for p in spec.pads] for j in (0, 1))
    return ir.Attribute.parse(f"#tpu.element_window<{low},{high}>")


def _prefetch_refs(kernel: Kernel, args: Sequence[ir.Value]) -> list[MemRef]:
    """The scalar-prefetch arguments as refs: whole arrays, nothing squeezed."""
    return [
        MemRef(a, t.dtype, t.memory_space, (False,) * t.ndim)
        for a, t in zip(args, kernel.scalar_prefetch, strict=True)
    ]


def _block_shape(spec: TracedBlockSpec) -> list[int]:
    return [1 if b is None else b for b in spec.block_shape]


def _block_memref(spec: TracedBlockSpec) -> ir.MemRefType:
    return emit.memref_type(_block_shape(spec), spec.array.dtype, spec.memory_space)


def _symbol(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.$-]", "_", name) or "kernel"


def trivial_window(spec: TracedBlockSpec) -> bool:
    """The block is the whole array and the index map returns constant zeros (upstream's
    ``has_trivial_window``): the same block at every grid step."""
    if tuple(_block_shape(spec)) != spec.array.shape:
        return False
    defs = {r: op for op in spec.index_map.body.ops for r in op.results}
    for r in spec.index_map.body.results:
        op = defs.get(r)
        if op is None or op.name != "constant" or int(op.attrs["value"].array()) != 0:
            return False
    return True


def check_block(kernel: Kernel, k: int, spec: TracedBlockSpec) -> None:
    """Upstream's block-shape rules for TPU (``_check_block_mappings``), with its reasons."""
    space = emit.space_name(spec.memory_space)
    trivial = trivial_window(spec)
    where = (
        f"block spec {k} (array {spec.array}, block shape {spec.block_shape}, memory space {space})"
    )
    if not kernel.grid and not trivial:
        raise PassError(
            f"{where}: non-trivial windowing is not supported for a pallas_call without a grid",
            fix="give the pallas_call a grid, or use whole-array blocks",
        )
    if space == "smem" and trivial or space == "semaphore_mem":
        return  # upstream checks neither (a semaphore passed between kernels is rank 0)
    if space == "any" and not trivial:
        raise PassError(
            f"{where}: the Pallas TPU lowering supports blocks in memory space ANY only when "
            "they are the whole array with an index map returning all 0s",
            fix="use a whole-array block for ANY operands and copy windows with DMAs",
        )
    block, shape = _block_shape(spec), spec.array.shape
    if not block:
        raise PassError(
            f"{where}: the Pallas TPU lowering supports only blocks of rank >= 1",
            fix="reshape the operand to at least 1-D",
        )
    if len(block) >= 2:
        ok = (block[-1] == shape[-1] or block[-1] % 128 == 0) and (
            block[-2] == shape[-2] or block[-2] % 8 == 0
        )
        rule = "the last two dimensions of a block shape are divisible by 8 and 128"
    else:
        bits = 32 if spec.array.dtype == "bool" else 8 * dtypes.itemsize(spec.array.dtype)
        b = block[0]
        ok = b == shape[0] or b % 1024 == 0 or (b >= 128 * (32 // bits) and b & (b - 1) == 0)
        rule = (
            "a rank-1 block equals the array, is a multiple of 1024, or is a power of 2 of at "
            f"least {128 * (32 // bits)}"
        )
    if not ok:
        raise PassError(
            f"{where}: the Pallas TPU lowering requires that {rule} (or equal the array's "
            "dimensions)",
            fix="pick block dimensions that are multiples of (8, 128) or span the array",
        )
