"""Kernels that span devices (issue 47): the program each device runs (``local``), its remote
copies as exchanges, its reads of other rows as gathers (``rows``), its conditions on the
device masked (``masked``), each device's cores in turn (``cores``). ``on_devices``, which runs
that program under ``jax.shard_map`` as XLA collectives, is JAX-facing and lives above, in
``minipallas/platforms/devices_xla.py``."""

from minipallas.kernels.devices.local import device_program

__all__ = ["device_program"]
