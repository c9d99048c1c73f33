"""A kernel over a mesh of cores: ``mesh_call`` (upstream's ``pl.kernel`` / ``core_map``, the
``mpmd_map`` primitive, issue 38).

``%o = mesh_call @body(%x), mesh ("core") (2) : f32[16,128]`` runs ``@body`` once on every
core of a 2-core mesh whose one axis is named ``"core"``. ``@body`` takes refs to the *whole*
arrays, ``[*inputs, *outputs]``, in memory every core sees (upstream's ``ANY``/HBM), and
returns nothing; inside, ``axis_index ("core")`` says which core runs. The inputs are copied
into fresh buffers, the outputs start as the fill value (or, for ``aliases (i, o)``, as input
``i``), and the results are the output buffers once every core is done.

The cores run *together*: they may share a collective ``run_scoped`` allocation and meet at a
``barrier``. So this is a kernel whose grid is the mesh and whose axes are named, and it runs
where such kernels run (docs/guides/collectives.md): under ``collectives="simulate"`` in the
multi-program interpreter (``ir/interpret/rules/mesh.py``) and, discharged, as the collective
kernel program (``kernels/collective/mesh.py``); by default a collective ``run_scoped`` in
the body is refused with upstream's messages (``ir.collectives``), and a body without one
runs its cores one after another, as upstream's ``interpret=True`` does.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from minipallas.ir.core import Function
from minipallas.ir.opdef import Attrs, Regions, Types, Variadic, declare, require
from minipallas.ir.opset.common import same_type
from minipallas.ir.syntax import Parsed, Pieces, symbol
from minipallas.ir.types import RefType

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer


class MeshCall:
    """``@body(%x, ...), mesh ("core") (2)`` then, when there are any, ``, aliases (0, 0)``
    (flat (input, output) pairs)."""

    def print(self, p: Printer, op: Op) -> Pieces:
        callee = op.attrs.get("callee")
        name = symbol(callee.name) if callee is not None else "@<missing>"
        axes = ", ".join(json.dumps(a) for a in op.attrs.get("axes", ()))
        text = (
            f" {name}({p.values(op.operands)}), mesh ({axes}) {p.ints(op.attrs.get('shape', ()))}"
        )
        pairs = [k for pair in op.attrs.get("aliases", ()) for k in pair]
        return [text + (f", aliases {p.ints(pairs)}" if pairs else "")]

    def parse(self, r: Parser) -> Parsed:
        callee = r.callee()
        operands = r.paren_values("after the callee")
        r.expect(",", "after the operands")
        r.expect("mesh", "after the operands")
        axes = r.string_tuple("after 'mesh'")
        shape = r.int_tuple("after the mesh's axis names")
        flat: tuple[int, ...] = ()
        if r.accept(","):
            r.expect("aliases", "after the mesh")
            flat = r.int_tuple("after 'aliases'")
        pairs = tuple(zip(flat[::2], flat[1::2], strict=False))
        attrs = {"callee": callee, "axes": axes, "shape": shape, "aliases": pairs}
        return Parsed(operands, attrs)


@declare("mesh_call", operands=(Variadic("args"),), syntax=MeshCall(), pure=False)
def mesh_call(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Run a kernel body on every core of a mesh, together:
    ``%o = mesh_call @body(%x), mesh ("core") (2) : f32[16,128]`` (upstream's ``pl.kernel``).
    ``@body`` takes a ref per input then per output, each the whole array, and returns
    nothing; the results are the outputs' final contents."""
    callee, axes, shape = attrs.get("callee"), attrs.get("axes"), attrs.get("shape")
    require(isinstance(callee, Function), f"attribute 'callee' must be a function, got {callee!r}")
    require(
        isinstance(axes, tuple) and bool(axes) and all(isinstance(a, str) for a in axes),
        f"'axes' must be a non-empty tuple of axis names, got {axes!r}",
    )
    require(
        isinstance(shape, tuple) and len(shape) == len(axes)
        and all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape),
        f"'shape' must give one positive size per axis of {axes}, got {shape!r}",
    )  # fmt: skip
    params = callee.body.param_types
    require(not callee.result_types, f"@{callee.name} must return nothing (it writes its outputs)")
    require(
        len(params) >= len(types) and all(isinstance(t, RefType) for t in params),
        f"@{callee.name} must take a ref per input and per output; it takes {list(params)}",
    )
    for i, (t, p) in enumerate(zip(types, params, strict=False)):
        same_type(t, p.value_type, f"input {i} of @{callee.name}")
    outs = tuple(p.value_type for p in params[len(types) :])
    for i, o in attrs.get("aliases", ()):
        require(
            0 <= i < len(types) and 0 <= o < len(outs) and types[i] == outs[o],
            f"alias ({i}, {o}) must pair an input and an output of one type",
        )
    return outs
