"""libtpu's Mosaic compiler, ahead of time, and what the machine has.

libtpu compiles for a TPU *topology* without opening a chip: jax builds compile-only devices
for it, and ``jax.jit(...).lower(...).compile()`` on arrays placed there runs XLA's TPU
compiler, Mosaic's included, on this machine (``minipallas.lowering.tpu.aot``).

- ``mosaic_compile``: a Mosaic module compiled as upstream's ``tpu_custom_call`` would run it;
  ``MosaicRefusal``: its verdict when it refuses; ``tpu_sharding`` / ``tpu_device``: the
  compile-only device of a ``v5e:1x1`` topology; ``topology_devices``: those of any topology
  libtpu describes (several chips: ``v5e:2x2``);
- ``libtpu_available``, ``tpu_chips``, ``has_visible_nvidia_gpu``: what is installed and
  attached, seen without opening a runtime; ``quiet_libtpu``: no errors and no lock from
  libtpu on a machine with no chip.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.lowering.compat import jax_private
from minipallas.lowering.compat.jaxlib_shim import ir

# On a machine with no chip: the one-chip host libtpu asks for (else it logs errors as it
# loads), and no lock on the chip that is not there (else a second process that loads libtpu,
# an xdist worker, fails: "Internal error when accessing libtpu multi-process lockfile").
LIBTPU_NO_CHIP = {
    "TPU_ACCELERATOR_TYPE": "v5litepod-1",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}
__all__ = [
    "MosaicRefusal",
    "has_visible_nvidia_gpu",
    "libtpu_available",
    "mosaic_compile",
    "quiet_libtpu",
    "topology_devices",
    "tpu_chips",
    "tpu_device",
    "tpu_sharding",
]


class MosaicRefusal(Exception):  # noqa: N818  (not an error of ours: Mosaic's verdict)
    """libtpu's compiler refused a module; the message is its own."""


def libtpu_available() -> bool:
    """Whether the ``libtpu`` package (the TPU runtime and its compiler) is installed."""
    import importlib.util

    return importlib.util.find_spec("libtpu") is not None


def tpu_chips() -> int:
    """TPU chips attached to this machine (jax reads the PCI devices; no runtime is opened)."""
    return jax_private.hardware_utils.num_available_tpu_chips_and_device_id()[0]


def has_visible_nvidia_gpu() -> bool:
    """Whether this machine shows an NVIDIA GPU device (no runtime is opened)."""
    return jax_private.hardware_utils.has_visible_nvidia_gpu()


def quiet_libtpu() -> None:
    """On a machine with no TPU chip, sets ``LIBTPU_NO_CHIP`` so that loading libtpu (jax tries
    at its first device query when libtpu is installed) logs no errors and takes no lock, in
    any number of processes. Leaves a TPU machine's own settings, and any already set, alone."""
    import os

    if tpu_chips() == 0:
        for name, value in LIBTPU_NO_CHIP.items():
            os.environ.setdefault(name, value)


@functools.cache
def topology_devices(topology: str = "v5e:1x1") -> tuple[Any, ...]:
    """The compile-only devices of a TPU topology, made once: ``v5e:1x1`` (one chip, one host),
    or a slice of several chips libtpu describes (``v5e:2x2``, ``v6e:2x2``, ``v4:2x2x1``): a
    ``jax.sharding.Mesh`` over them compiles a ``shard_map`` ahead of time, its kernels'
    remote copies included."""
    from jax.experimental import topologies

    quiet_libtpu()
    bounds = {"chips_per_host_bounds": (1, 1, 1)} if topology == "v5e:1x1" else {}
    return tuple(topologies.get_topology_desc(topology, "tpu", **bounds).devices)


@functools.cache
def tpu_sharding() -> Any:
    """A sharding on the one compile-only device of a ``v5e:1x1`` topology (made once)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.array(topology_devices()), ("chip",)), PartitionSpec())


def tpu_device() -> Any:
    """The compile-only TPU device (``jax.default_device(tpu_device())`` lets upstream's own
    lowering, which asks the default device's kind, compile ahead of time too)."""
    return tpu_sharding().mesh.devices.flat[0]


def mosaic_compile(
    module: ir.Module,
    in_types: Sequence[tuple[tuple[int, ...], np.dtype]],
    out_types: Sequence[tuple[tuple[int, ...], np.dtype]],
    *,
    name: str,
    aliases: Sequence[tuple[int, int]] = (),
    params: dict[str, Any] | None = None,
) -> Any:
    """Compiles ``module`` as upstream's ``tpu_custom_call`` would run it (operands ``in_types``,
    results ``out_types``, ``aliases`` as (operand, result) pairs) for a v5e chip; returns jax's
    ``Compiled``. The compiler parameters are upstream ``pallas_call``'s defaults, updated by
    ``params`` (``as_tpu_kernel``'s keyword arguments: a call's ``compiler_params``). A refusal
    (jax's ``JaxRuntimeError``, or an ``ir.MLIRError`` from the serialization passes) is a
    ``MosaicRefusal`` carrying its message."""
    import jax

    sharding = tpu_sharding()
    outs = tuple(jax.ShapeDtypeStruct(s, d) for s, d in out_types)
    fields = {"shape_invariant_numerics": True, "needs_layout_passes": True, **(params or {})}
    kernel = jax_private.tpu_custom_call.as_tpu_kernel(
        module, outs, kernel_name=name, input_output_aliases=tuple(aliases), **fields
    )
    args = [jax.ShapeDtypeStruct(s, d, sharding=sharding) for s, d in in_types]
    try:
        return jax.jit(kernel, out_shardings=sharding).lower(*args).compile()
    except Exception as e:
        # Once upstream's Mosaic lowering is imported, jax re-raises the runtime error as its
        # MosaicError, the location cut out: the original is its cause.
        original = e.__cause__ if isinstance(e.__cause__, jax.errors.JaxRuntimeError) else e
        if not isinstance(original, jax.errors.JaxRuntimeError | ir.MLIRError):
            raise
        raise MosaicRefusal(str(original)) from None
