"""Mosaic TPU emission: a traced ``pallas_call`` becomes the module upstream Pallas hands Mosaic.

``lower_to_mosaic(kernel)`` takes a ``minipallas.ir.kernel_spec.Kernel`` and returns a
``Lowered`` (``str()`` is the MLIR text, ``.module`` the module) whose kernel function follows
Pallas TPU's calling convention (``module``). Unlike the StableHLO path, the body is *not*
discharged: refs stay in memory as ``memref``s and the rules (``rules/``, one file per op
family, registered in ``context.RULES``) turn state ops into ``vector.load`` /
``tpu.vector_store``. Beside them: the context, ``emit`` (the op builders the rules share),
``windows``, ``pieces`` and ``widen`` (what several rules share), ``ranges`` (integer ranges),
``semantics``, ``output_reads``, ``promote`` and ``aot`` (libtpu's compile of the module).

Pipeline (steps 1-3 are the target table's pipeline, the rest ``emit_mosaic``):
1. ``collectives{context=mosaic}``: the collective-axes check in its Mosaic form (a
   ``run_scoped`` with collective axes raises upstream Mosaic's ``NotImplementedError``, with
   the location note);
2. unless ``optimize=False``, ``fuse-grid-steps`` (``passes.kernel.grid_fusion``): a grid of
   many small steps runs as fewer steps over windows of blocks, each old step's ops unchanged,
   so the results are upstream's bit for bit and the per-step cost is paid less often; at
   ``optimize="fast"``, ``reassociate-sums`` (``passes.kernel.reassociate``) first: a sum added
   into an output every step is kept as partial sums, reduced at the last step (other bits);
3. with ``promote_scratch=True``, ``promote-scratch`` (``passes.promote_scratch``): scoped
   scratch that fits in registers is discharged into SSA values; ``emit_mosaic`` reports the op
   counts with and without (``promote.PromotionReport``);
4. an output block read before anything writes it is refused (``output_reads``: on a TPU it
   holds whatever VMEM held);
5. ``dimension_semantics``: the kernel's, or inferred from its effects and index maps
   (``semantics``), the reasons kept in the module and in ``Lowered.info``;
6. emission (the integer ranges of the body first, so index clamps that cannot fire are left
   out), the MLIR verifier with the dialects registered, then MLIR's canonicalizer.
"""

from __future__ import annotations

from collections.abc import Callable

from minipallas.ir.core import Function
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Kernel
from minipallas.lowering import TARGETS, AfterEach
from minipallas.lowering.compat.jaxlib_shim import canonicalize, ir
from minipallas.lowering.lowered import Lowered
from minipallas.lowering.tpu import rules  # noqa: F401  (registers every rule)
from minipallas.lowering.tpu.aot import MosaicCompileError, compile_check
from minipallas.lowering.tpu.context import RULES, LoweringContext, rule
from minipallas.lowering.tpu.module import kernel_function
from minipallas.lowering.tpu.output_reads import check_output_reads
from minipallas.lowering.tpu.promote import PromotionReport
from minipallas.lowering.tpu.ranges import int_ranges
from minipallas.lowering.tpu.semantics import DimensionSemantics, dimension_semantics
from minipallas.passes.pipeline import run
from minipallas.passes.promote_scratch import promoted_count

__all__ = [
    "RULES",
    "DimensionSemantics",
    "LoweringContext",
    "MosaicCompileError",
    "PromotionReport",
    "compile_check",
    "count_ops",
    "emit_mosaic",
    "lower_to_mosaic",
    "rule",
]

REASONS_ATTR = "minipallas.dimension_semantics_reasons"


def lower_to_mosaic(
    kernel: Kernel,
    *,
    promote_scratch: bool = False,
    after_each: AfterEach | None = None,
    optimize: bool | str = True,
) -> Lowered:
    """The Mosaic TPU module of ``kernel``, verified and canonicalized: the table's ``tpu`` row,
    whose pipeline is steps 1-3, then ``emit_mosaic``."""
    return TARGETS["tpu"].lower(
        kernel, promote_scratch=promote_scratch, after_each=after_each, optimize=optimize
    )


def emit_mosaic(kernel: Kernel, body: Function, *, promote_scratch: bool = False) -> Lowered:
    """Steps 3-5 on ``body``, the pipeline's result (promoted with ``promote_scratch``).

    ``Lowered.info`` holds ``"dimension_semantics"`` (a ``DimensionSemantics``: values, one
    reason per axis, whether inferred) and ``"promotion"`` (a ``PromotionReport``, or None
    when ``promote_scratch`` is False): the module is emitted once more from the pipeline
    without promotion, to count what promotion saved. ``"vmem_limit_bytes"`` is the
    kernel's (``Kernel.vmem_limit_bytes``, fusion's when it widened past Mosaic's default
    scope): the custom call asks for it.
    """
    check_output_reads(kernel, body)
    semantics = dimension_semantics(kernel)
    module = _module(kernel, body, semantics)
    report = None
    if promote_scratch:
        unpromoted = run(kernel.body, TARGETS["tpu"].pipeline_for(kernel, optimize=False))
        baseline = _module(kernel, unpromoted, semantics)
        report = PromotionReport(promoted_count(unpromoted), count_ops(baseline), count_ops(module))
    info = {"dimension_semantics": semantics, "promotion": report}
    return Lowered("tpu", module, body, info={**info, "vmem_limit_bytes": kernel.vmem_limit_bytes})


def _module(
    kernel: Kernel,
    body: Function,
    semantics: DimensionSemantics,
    context: Callable[..., LoweringContext] = LoweringContext,
) -> ir.Module:
    """The module of ``body``, emitted in a ``context`` (one device's, ``device_context``)."""
    ctx = context(kernel.grid, int_ranges(body.body, kernel.grid))
    ctx.fuse_transposed_lhs = kernel.fuse_transposed_lhs
    with ctx.mlir, ir.Location.unknown():
        fn = kernel_function(ctx, kernel, body, semantics.values)
        fn.attributes[REASONS_ATTR] = ir.ArrayAttr.get(
            [ir.StringAttr.get(r) for r in semantics.reasons]
        )
        try:
            ctx.module.operation.verify()
        except ir.MLIRError as e:
            raise PassError(
                f"the Mosaic module emitted for kernel '{kernel.name}' fails the MLIR "
                f"verifier: {e}",
                fix="this is a bug in minipallas's TPU lowering rules; please report it",
            ) from None
    canonicalize(ctx.module)
    return ctx.module


def count_ops(module: ir.Module) -> int:
    """Operations in ``module``, nested ones included, the module itself not."""

    def count(op: ir.Operation) -> int:
        return sum(
            1 + count(inner)
            for region in op.regions
            for block in region.blocks
            for inner in block.operations
        )

    return count(module.operation)
