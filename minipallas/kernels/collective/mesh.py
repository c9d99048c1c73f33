"""A ``mesh_call`` (an upstream ``pl.kernel`` over a mesh, ``ir/opset/mesh.py``) as a kernel,
and its discharge: the kernel's program over arrays.

A mesh kernel is a kernel whose grid is the mesh, whose axes are the mesh's names, and whose
blocks are the whole operands (index maps that give 0). ``mesh_kernel`` builds that
``Kernel``; the discharge rule registered here replaces the ``mesh_call`` by a ``call`` of the
program the CPU runs for it (the "stablehlo" target's prepare step): under
``discharge(..., collectives="simulate")`` the collective kernel program (the groups' epochs
in turn, ``collective.program``), bit for bit with the multi-program interpreter on a
race-free kernel; by default the loop over the cores (the collective-axes check has refused
a body that shares memory first). The rule lives on this floor because those programs do; the
importer that makes ``mesh_call`` ops loads it.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas import lowering
from minipallas.ir.core import Op, Value
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.kernels.spec.tracing import trace_index_map, whole_array_map
from minipallas.passes.discharge import discharge
from minipallas.passes.discharge.engine import DischargeScope, rule


def mesh_kernel(op: Op) -> Kernel:
    """The ``Kernel`` a ``mesh_call`` runs: the mesh as its grid, whole operands as blocks."""
    callee, shape = op.attrs["callee"], op.attrs["shape"]
    specs = [_whole(t, len(shape), f"{callee.name} operand {k}")
             for k, t in enumerate(callee.body.param_types)]  # fmt: skip
    n_in = len(op.operands)
    return Kernel(
        name=callee.name,
        body=callee,
        grid=tuple(shape),
        in_specs=tuple(specs[:n_in]),
        out_specs=tuple(specs[n_in:]),
        input_output_aliases=tuple(op.attrs.get("aliases", ())),
    )


def _whole(ref_type: object, n_axes: int, what: str) -> TracedBlockSpec:
    ndim = len(ref_type.shape)
    return TracedBlockSpec(
        array=ref_type.value_type,
        block_shape=tuple(ref_type.shape),
        index_map=trace_index_map(whole_array_map(ndim), n_axes, ndim, what),
        ref_type=ref_type,
    )


@rule("mesh_call", always=True)
def _mesh_call(scope: DischargeScope, op: Op) -> Sequence[Value]:
    kernel = mesh_kernel(op)
    shares = any(
        o.name == "run_scoped" and o.attrs.get("collective_axes") for o in kernel.body.walk()
    )
    simulate = scope.ctx.collectives == "simulate" and shares  # else: cores that share nothing
    axes = op.attrs["axes"] if simulate else None
    program = lowering.target("stablehlo").prepared(kernel, collective_axes=axes)
    pure = discharge(program, collectives=scope.ctx.collectives)
    args = [scope.value(v) for v in op.operands]
    return list(scope.emit_op("call", args, op.loc, callee=pure).results)
