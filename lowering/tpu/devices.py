"""One device's Mosaic module of a kernel that spans devices (issue 47).

A kernel in a ``jax.shard_map`` runs on every device of the mesh; minipallas imports it as
the program of one device over buffers with a row per device
(``platforms.devices_tpu``). ``lower_device_kernel`` emits that program as the module
each device runs, in the context of one device of the mesh (``device_context``; its rules are
``rules.remote``): its rows are the device's memrefs, another device's row a remote copy's or
signal's target.

Not the ``tpu`` row's pipeline: its grid steps must stay steps (a step's remote copies and
signals are the user's, not to be fused), its scratch is its own, and the collective-axes
check would refuse the rows the body is written over.
"""

from __future__ import annotations

from functools import partial

from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.location import Location
from minipallas.lowering.lowered import Lowered
from minipallas.lowering.tpu import _module
from minipallas.lowering.tpu.device_context import DeviceContext, Mesh
from minipallas.lowering.tpu.semantics import DimensionSemantics, dimension_semantics

__all__ = ["lower_device_kernel"]


def upstream_default(kernel: Kernel) -> DimensionSemantics:
    """Upstream's default for a grid whose semantics the compiler params do not give:
    ``arbitrary`` (a step's remote copies and signals may meet another step's, so minipallas
    infers nothing here)."""
    n = len(kernel.grid)
    why = "axis {} arbitrary: upstream's default for a kernel that spans devices"
    return DimensionSemantics(("arbitrary",) * n, tuple(why.format(a) for a in range(n)), True)


def lower_device_kernel(
    kernel: Kernel, mesh: Mesh, remote_signals: frozenset[Location] = frozenset()
) -> Lowered:
    """The Mosaic module of ``kernel`` on each device of ``mesh`` (names, sizes): its operands
    (whole shards, or blocks of them over its grid) and scratch are one device's, and its body
    takes them with a row per device, the barrier semaphore (a row per device too) as its last
    parameter; its grid's dimension semantics are the kernel's, else upstream's default.
    ``remote_signals``: the user lines where the kernel's text signals another device (a
    signal there of the device's own row names the device, as upstream's)."""
    given = kernel.dimension_semantics is not None
    semantics = dimension_semantics(kernel) if given else upstream_default(kernel)
    context = partial(DeviceContext, mesh=mesh, remote_signals=remote_signals)
    module = _module(kernel, kernel.body, semantics, context)
    info = {"dimension_semantics": semantics, "promotion": None}
    return Lowered("tpu", module, kernel.body, info=info)
