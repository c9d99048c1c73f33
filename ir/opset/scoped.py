"""Scoped allocation (Pallas ``run_scoped``) and the ``uninitialized`` value discharge gives it."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from minipallas.ir.opdef import Attrs, Regions, Types, Variadic, declare, require
from minipallas.ir.opset.common import no_refs, same_type
from minipallas.ir.syntax import Operands, Parsed, Pieces, type_of
from minipallas.ir.types import ArrayType, RefType

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer


class RunScoped:
    """``%o = run_scoped(%x) collective_axes ("x") { ^(%scratch, %x_in): ... } : f32[8]``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        axes = op.attrs.get("collective_axes", ())
        names = ", ".join(json.dumps(a) for a in axes)
        return [
            f"({p.values(op.operands)})",
            f" collective_axes ({names})" if axes else "",
            " ",
            *op.regions,
        ]

    def parse(self, r: Parser) -> Parsed:
        operands = r.paren_values("after 'run_scoped'")
        axes = r.string_tuple("after 'collective_axes'") if r.accept("collective_axes") else ()
        return Parsed(operands, {"collective_axes": axes}, [r.region()])


@declare(
    "run_scoped",
    operands=(Variadic("args"),),
    syntax=RunScoped(),
    regions=1,
    pure=False,
    params=((Variadic("allocs"), "args"),),
)
def run_scoped(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Allocate fresh refs for the duration of a body::

        %out = run_scoped(%x) collective_axes ("x") {
        ^(%scratch: Ref{f32[8], tpu.vmem}, %x_in: Ref{f32[8]}):
          ...
          yield %v
        } : f32[]

    The body's parameters are the new allocations followed by one parameter per operand (the
    outer values the body uses). ``collective_axes`` is a tuple of axis names, empty by default.
    Allocations never outlive the body: the results must be arrays.
    """
    (body,) = regions
    axes = attrs.get("collective_axes", ())
    require(
        isinstance(axes, tuple) and all(isinstance(a, str) for a in axes),
        f"collective_axes must be a tuple of axis names, got {axes!r}",
    )
    n_alloc = len(body.params) - len(types)
    require(n_alloc >= 0, f"body has {len(body.params)} parameters for {len(types)} operands")
    for i, p in enumerate(body.params[:n_alloc]):
        require(isinstance(p.type, RefType), f"allocation {i} must be a Ref, got {p.type}")
    for i, (p, t) in enumerate(zip(body.params[n_alloc:], types, strict=True)):
        same_type(p.type, t, f"body parameter {n_alloc + i}")
    no_refs(body.result_types, "result")
    return body.result_types


@declare("uninitialized", operands=(), syntax=Operands(type_of))
def uninitialized(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """A value whose contents are unspecified: ``%u = uninitialized : f32[8]``.

    Discharge starts every scoped allocation from one. It reads as NaN for floats, the minimum
    for integers and False for bool, as upstream JAX's discharge does.
    """
    require(not types, "takes no operands")
    t = attrs.get("type")
    require(isinstance(t, ArrayType), f"attribute 'type' must be an array type, got {t!r}")
    return (t,)
