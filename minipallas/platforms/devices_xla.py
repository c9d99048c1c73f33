"""``on_devices(f)``: a kernel that spans devices, compiled to XLA collectives (issue 47).

``f`` is upstream code: a ``jax.shard_map`` over a mesh of devices whose body holds
``pallas_call``s (or mesh kernels of cores: ``cores``) with remote copies
(``pltpu.make_async_remote_copy``) and semaphores, and ops and lax collectives around them
(what ``interop/importer/rules/devices.py`` imports). The
simulator runs such a kernel with every device's program together and names its races and
deadlocks (``collectives="simulate"``); ``on_devices`` gives the same bits at XLA's speed:
``jax.jit(on_devices(f))(x)`` runs a ``jax.shard_map`` over ``f``'s mesh whose per-device body
is the device's program (``local.device_program``: rows gone, each remote copy an
``exchange``, each read of other rows a ``gather_rows``), discharged to arrays and evaluated
with ``jax.lax`` (``interop.to_jax``), so each remote copy is a ``lax.ppermute`` or an
``all_gather`` inside the shard_map and XLA runs it on whatever devices the mesh holds:
several CPU devices of one process, or devices of several processes after
``jax.distributed.initialize``.

The bits: the device's program is exported with ``to_jax(..., exact=True)``, so XLA:CPU
rounds each float32 product before the add that reads it (no FMA) and divides by a divisor
(never by its inverse) as the simulator does (``exporter/roundings.py``), and the simulator adds
a float sum over one dimension of at most 32 elements in XLA's order (``xla/sum_order.py``).
The device corpus's ring attention (exp, an online softmax, ``acc / total``) then has the
simulator's bits on 4 and 8 devices: before, 2480 of 4096 elements differed (up to 2.4e-7).
Still outside (the interpreter's envelope, ``ir/interpret/rules/arrays.py``): a float32 ``dot`` that
XLA sums in another order than numpy's (its right side transposed, ``q @ k.T``: with normal
random q and k, 3400 of 4096 of ring attention's elements differ, within 7e-7 of numpy; exact
when every partial sum is, as the corpus's multiples of 1/8), longer or multi-dimensional float
sums, and the transcendentals with an ulp bound (``xla.transcendental.ULP_BOUND``).

The rest of ``f``'s jaxpr runs as it is (``platforms.mesh_tpu.evaluate_kernels``); a
``shard_map`` with no ``pallas_call`` in it is rebuilt with its own body. Kernels whose
communication depends on data are refused with the reason (``local``): run them in the
simulator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax import lax

from minipallas.interop.exporter import to_jax
from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import closed_parts
from minipallas.interop.importer.rules.devices import KERNELS, device_shard_map
from minipallas.interop.importer.rules.devices_cores import equations
from minipallas.ir import dtypes
from minipallas.ir.core import Function
from minipallas.kernels.devices.local import device_program
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.platforms.mesh_tpu import evaluate_kernels, mesh_call_of

__all__ = ["device_function", "on_devices", "run_device_eqn"]


def on_devices(f: Callable[..., Any]) -> Callable[..., Any]:
    """``f`` with each ``shard_map`` over a kernel that spans devices compiled to XLA
    collectives (module doc): ``jax.jit(on_devices(f))(x)`` gives what the simulator gives."""

    def run(*args: Any) -> Any:
        closed, shapes = jax.make_jaxpr(f, return_shape=True)(*args)
        leaves = jax.tree.leaves(args)
        outs = evaluate_kernels(closed.jaxpr, closed.consts, leaves, {"shard_map": run_device_eqn})
        return jax.tree.unflatten(jax.tree.structure(shapes), outs)

    run.__name__ = f"on_devices({getattr(f, '__name__', 'f')})"
    return run


def device_function(eqn: jax_core.JaxprEqn) -> Function:
    """The program one device runs (``local.device_program``) for upstream's ``shard_map``
    equation over kernels that span devices: a ref per operand, then per result, each the
    device's shard."""
    op = mesh_call_of(eqn, device_shard_map)
    devices = len(eqn.params["mesh"].axis_names)  # then the cores' axes, if any (``cores``)
    return device_program(op.attrs["callee"], op.attrs["axes"], op.attrs["shape"], devices)


def run_device_eqn(eqn: jax_core.JaxprEqn, ins: Sequence[Any]) -> list[Any]:
    """A ``shard_map`` equation run as a new ``jax.shard_map`` over its mesh whose body is the
    device's program (``device_function``), each result starting as the simulator's does (the
    fill value); one with no kernel in it keeps its own body."""
    jaxpr, consts = closed_parts(eqn.params["jaxpr"])
    if any(e.primitive.name in KERNELS for e in equations(jaxpr)):
        program = to_jax(device_function(eqn), exact=True)

        def body(*shards: Any) -> tuple[Any, ...]:
            outs = [_filled(v.aval, k) for k, v in enumerate(jaxpr.outvars)]
            return tuple(program(*shards, *outs)[len(shards) :])

    else:
        body = jax_core.jaxpr_as_fun(jax_core.ClosedJaxpr(jaxpr, consts))
    mapped = jax.shard_map(
        lambda *xs: tuple(body(*xs)),
        mesh=eqn.params["mesh"],
        in_specs=tuple(eqn.params["in_specs"]),
        out_specs=tuple(eqn.params["out_specs"]),
        check_vma=False,
    )
    return list(mapped(*ins))


def _filled(aval: Any, k: int) -> Any:
    fill = dtypes.fill_value(type_of(aval, f"result {k}").dtype)
    return lax.full(aval.shape, fill, aval.dtype)
