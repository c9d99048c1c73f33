"""Kernels that span devices, compiled (issue 47): ``on_devices(f)`` runs a ``jax.shard_map``
over a ``pallas_call`` with remote copies as XLA collectives (``compiled``), from the program
each device runs (``local``)."""

from minipallas.kernels.devices.compiled import device_function, on_devices, run_device_eqn
from minipallas.kernels.devices.local import device_program

__all__ = ["device_function", "device_program", "on_devices", "run_device_eqn"]
