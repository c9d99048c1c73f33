"""Triton GPU emission of kernels, with scoped allocations discharged into registers.

``lower_to_triton(kernel)`` takes a traced ``pallas_call`` (``minipallas.ir.kernel_spec.Kernel``)
and returns a ``Lowered`` whose module is a Triton (``tt``) module built with jaxlib's Triton
dialect bindings, checked by the MLIR verifier. Steps 1-3 are the target table's pipeline
(``collectives{context=triton},discharge{keep_params=N},cleanup``, N the kernel's operands),
step 4 is ``emit_triton``:

1. the collective-axes check for this path (``"triton"``): a ``run_scoped`` with collective
   axes raises upstream Triton lowering's ``NotImplementedError`` (it has no ``run_scoped``
   rule), since scratch discharged into one program's registers cannot be shared;
2. partial discharge: the kernel's operand refs stay refs (global memory, read and written
   through pointers); every scoped allocation and every scratch operand becomes SSA values
   (registers). Upstream Pallas's Triton backend rejects ``run_scoped`` and scratch outright;
3. cleanup of the partially discharged body (what discharge left mechanical goes away);
4. emission (``module``): the ``tt.func``, program ids for the launched grid axes, loops for
   the axes each program iterates (``grid``), each operand's block; then the body, op by op,
   by the rules (``rules/``, one file per op family): pointer tensors and masked loads/stores
   for the operands (``rules/state.py``), ``arith``/``math``/``tt.reduce``/``tt.dot``
   (``rules/arrays.py``), ``scf`` (``rules/control.py``), register-array indexing
   (``rules/indexed.py``).

The result's ``function`` is the partially discharged body the module was emitted from;
``simulate`` runs it over the grid with the reference interpreter, as the GPU would, and
``ptx.compile_ptx`` compiles the module with the ``triton`` package.
"""

from __future__ import annotations

from minipallas.ir.core import Function
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Kernel
from minipallas.lowering import TARGETS, AfterEach
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.gpu import rules  # noqa: F401  (registers every rule)
from minipallas.lowering.gpu.context import RULES, LoweringContext, rule
from minipallas.lowering.gpu.grid import Schedule, schedule
from minipallas.lowering.gpu.module import emit_kernel
from minipallas.lowering.lowered import Lowered

__all__ = ["RULES", "GpuLowered", "LoweringContext", "emit_triton", "lower_to_triton", "rule"]


class GpuLowered(Lowered):
    """A kernel lowered to Triton: ``Lowered`` plus what a launch needs.

    ``kernel``: the traced kernel; ``schedule``: which grid axes are launched and which each
    program loops over; ``launch_grid``: the CUDA grid (x, y, z order).
    """

    def __init__(self, module: ir.Module, function: Function, kernel: Kernel, plan: Schedule):
        super().__init__("gpu", module, function)
        self.kernel = kernel
        self.schedule = plan
        self.launch_grid = plan.launch_grid(kernel.grid)


def lower_to_triton(kernel: Kernel, *, after_each: AfterEach | None = None) -> GpuLowered:
    """Steps 1-4 of the module doc (the table's ``gpu`` row); raises ``PassError`` for what
    Triton cannot express."""
    return TARGETS["gpu"].lower(kernel, after_each=after_each)


def emit_triton(kernel: Kernel, body: Function) -> GpuLowered:
    """Step 4: the Triton module of ``body``, what steps 1-3 made of ``kernel.body``. A
    dynamic grid or scalar prefetch raises upstream's Triton backend's refusal."""
    for present, message in (
        (kernel.dynamic_axes, "dynamic grid bounds not supported in the Triton backend"),
        (kernel.scalar_prefetch, "scalar prefetch not implemented in the Triton backend"),
    ):
        if present:
            raise PassError(
                f"{message} (kernel '{kernel.name}')",
                fix="run it on the CPU or lower it for 'tpu' (Mosaic)",
            )
    plan = schedule(kernel)
    ctx = LoweringContext(kernel.name)
    ctx.note_uses(body)
    emit_kernel(ctx, kernel, body, plan)
    ctx.verify(kernel.name, fix="this is a bug in minipallas's Triton rules; please report it")
    return GpuLowered(ctx.module, body, kernel, plan)
