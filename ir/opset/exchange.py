"""``exchange`` and ``gather_rows``: how the devices of a mesh talk in a compiled kernel that
spans devices (issue 47): a remote copy, and a read of other devices' rows.

A kernel that spans devices (a ``jax.shard_map`` over a ``pallas_call``) copies a window of
its memory into a window of another device's with ``make_async_remote_copy``. Compiled for
XLA (``minipallas.kernels.devices``), every device runs the same program, so each remote copy
is a step all devices take together: each sends its ``payload`` and the window's ``indices``
to its target, and each receiver writes what it got into its own ``dst`` at the sender's
window. The op is pure (arrays in, the receiver's new ``dst`` out) but means something only
where the devices run together, under ``jax.shard_map``: the reference interpreter and the
StableHLO lowering of one program refuse it.

The target is either static, ``pairs`` of (sender, receiver) device numbers (row-major over
``axes``) known at compile time, each receiver once (``lax.ppermute``), or computed at run
time: one ``targets`` operand per axis (``lax.all_gather`` of payload, window and target,
then each receiver keeps what was sent to it). ``gather_rows`` gives every device the value
each device passes it, a row per device (``lax.all_gather``): what a device reads of other
devices' rows (the importer's ``psum``, ``ppermute``, ``all_gather`` of the body are such
reads) where every device reads together. Printed forms::

    %d2 = exchange %d[%i, :], %p, axes ("x") (4), pairs (0, 1, 1, 2, 2, 3, 3, 0) : f32[4,128]
    %d2 = exchange %d[%i, :], %p, to (%t), axes ("x") (4) : f32[4,128]
    %g = gather_rows %v, axes ("x") (4) : f32[4,8,128]
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from minipallas.ir.opdef import Attrs, OperandTypes, Regions, Types, Variadic, declare, require
from minipallas.ir.opset.common import array_operand, count_dyn, int_scalar, window
from minipallas.ir.syntax import Parsed, Pieces, Windowed
from minipallas.ir.types import ArrayType

if TYPE_CHECKING:
    from minipallas.ir.core import Op
    from minipallas.ir.parser import Parser
    from minipallas.ir.printer import Printer


class Exchange:
    """``%dst[window], %payload``, then ``to (targets)`` or nothing, then the mesh, then
    ``pairs`` when the target is static."""

    window = Windowed(1)

    def print(self, p: Printer, op: Op) -> Pieces:
        (text,) = self.window.print(p, op)
        targets = op.operands[op.slices()["targets"]]
        if targets:
            text += f", to ({p.values(targets)})"
        text += _mesh_text(p, op)
        if not targets:
            text += f", pairs {p.ints(tuple(n for pair in op.attrs['pairs'] for n in pair))}"
        return [text]

    def parse(self, r: Parser) -> Parsed:
        parsed = self.window.parse(r)
        r.expect(",", "after the payload")
        targets = []
        if r.accept("to"):
            r.expect("(", "after 'to'")
            targets = r.values()
            r.expect(")", "after the targets")
            r.expect(",", "after the targets")
        axes, shape = _parse_mesh(r)
        flat: tuple[int, ...] = ()
        if not targets:
            r.expect(",", "before 'pairs'")
            r.expect("pairs", "after the mesh")
            flat = r.int_tuple("after 'pairs'")
        pairs = tuple(zip(flat[::2], flat[1::2], strict=True))
        attrs = {**parsed.attrs, "axes": axes, "shape": shape, "pairs": pairs,
                 "n_targets": len(targets)}  # fmt: skip
        return Parsed([*parsed.operands, *targets], attrs)


def _mesh_text(p: Printer, op: Op) -> str:
    axes = ", ".join(json.dumps(a) for a in op.attrs["axes"])
    return f", axes ({axes}) {p.ints(op.attrs['shape'])}"


def _parse_mesh(r: Parser) -> tuple[tuple[str, ...], tuple[int, ...]]:
    r.expect("axes", "before the mesh")
    return r.string_tuple("after 'axes'"), r.int_tuple("after the axis names")


class GatherRows:
    """``%v, axes ("x") (4)``."""

    def print(self, p: Printer, op: Op) -> Pieces:
        return [f" {p.value(op.operands[0])}{_mesh_text(p, op)}"]

    def parse(self, r: Parser) -> Parsed:
        own = r.operand("after 'gather_rows'")
        r.expect(",", "before 'axes'")
        axes, shape = _parse_mesh(r)
        return Parsed([own], {"axes": axes, "shape": shape})


def _mesh(attrs: Attrs) -> int:
    """Checks ``axes`` and ``shape``; the number of devices."""
    axes, sizes = attrs.get("axes"), attrs.get("shape")
    require(
        isinstance(axes, tuple) and bool(axes) and all(isinstance(a, str) for a in axes),
        f"'axes' must be a non-empty tuple of axis names, got {axes!r}",
    )
    require(
        isinstance(sizes, tuple) and len(sizes) == len(axes)
        and all(isinstance(k, int) and k > 0 for k in sizes),
        f"'shape' must give one positive size per axis of {axes}, got {sizes!r}",
    )  # fmt: skip
    devices = 1
    for k in sizes:
        devices *= k
    return devices


def _pairs_ok(pairs: object, devices: int) -> bool:
    if not isinstance(pairs, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        return False
    senders, receivers = [s for s, _ in pairs], [d for _, d in pairs]
    in_range = all(isinstance(n, int) and 0 <= n < devices for n in senders + receivers)
    return in_range and len(set(senders)) == len(senders) and len(set(receivers)) == len(receivers)


@declare(
    "exchange",
    operands=("dst", Variadic("indices"), "payload", Variadic("targets", count="n_targets")),
    syntax=Exchange(),
)
def exchange(types: OperandTypes, attrs: Attrs, regions: Regions) -> Types:
    """Each device sends ``%p`` to its target, which writes it into its ``%d`` at the sender's
    window: ``%d2 = exchange %d[%i, :], %p, axes ("x") (4), pairs (0, 1, 1, 0) : f32[4,128]``."""
    n = count_dyn(attrs)
    require(len(types) >= 2 + n, f"expected dst, {n} window indices and a payload")
    dst = array_operand(types.one("dst"), "dst")
    shape = window(dst.shape, attrs, types.group("indices"))
    payload = array_operand(types.one("payload"), "payload")
    require(
        payload.shape == shape and payload.dtype == dst.dtype,
        f"payload must be the window, {dst.dtype}{list(shape)}, got {payload}",
    )
    devices, axes = _mesh(attrs), attrs["axes"]
    targets = types.group("targets")
    require(len(targets) in (0, len(axes)), f"expected no targets or one per axis of {axes}")
    for k, t in enumerate(targets):
        int_scalar(t, f"target {k}")
    pairs = attrs.get("pairs")
    require(
        _pairs_ok(pairs, devices) and (not targets or not pairs),
        f"'pairs' must be (sender, receiver) device numbers below {devices}, each sender and "
        f"receiver once, and none with targets; got {pairs!r}",
    )
    return (dst,)


@declare("gather_rows", operands=("own",), syntax=GatherRows())
def gather_rows(types: Types, attrs: Attrs, regions: Regions) -> Types:
    """Every device's ``%v``, a row per device in front:
    ``%g = gather_rows %v, axes ("x", "y") (2, 2) : f32[2,2,8,128]``."""
    require(len(types) == 1, f"expected one operand, got {len(types)}")
    own = array_operand(types[0], "own")
    _mesh(attrs)
    return (ArrayType((*attrs["shape"], *own.shape), own.dtype),)
