"""Where a kernel runs: one row per JAX platform, as ``lowering.TARGETS`` is one row per emitter.

A ``pallas_call`` on JAX values binds one primitive (``primitive.minipallas_call_p``); which
program it becomes is known when the caller's ``jax.jit`` is lowered for a platform, and this
table says: the CPU (and any platform without a row) runs the discharged program as XLA ops,
CUDA and ROCm launch the kernel's Triton module (``triton.launch``), the TPU its Mosaic module
(``mosaic.launch``), each as the custom call upstream Pallas emits there. A new backend is a
row here and a launch module.

This is the JAX-facing room, above ``kernels`` and ``interop``, which it joins: a kernel as a
JAX primitive (``primitive``, ``jax_values``), upstream's jaxprs run with minipallas's kernels
in place of theirs on a TPU (``mesh_tpu``, ``devices_tpu``), kernels that span devices as XLA
collectives (``devices_xla``: ``on_devices``). ``kernels`` and ``interop`` never import it,
save ``pallas_call``'s one listed lazy import of ``jax_values`` for a call on JAX values.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PLATFORMS", "Platform"]


@dataclass(frozen=True)
class Platform:
    """One JAX platform. ``target`` is the ``lowering.TARGETS`` row whose module it runs (None:
    the discharged program, as ``jax.lax`` ops); ``launch`` is ``"module:function"``, called as
    ``launch(ctx, operands, call, platform)`` in the primitive's lowering rule to build the
    custom call, imported on first use (jaxlib's Triton and Mosaic bindings are heavy)."""

    name: str  # jax's platform name
    target: str | None
    launch: str | None

    def launcher(self) -> Callable[..., Any]:
        module, _, name = (self.launch or "").partition(":")
        return getattr(importlib.import_module(module), name)


PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform("cpu", None, None),
        Platform("cuda", "gpu", "minipallas.platforms.triton:launch"),
        Platform("rocm", "gpu", "minipallas.platforms.triton:launch"),
        Platform("tpu", "tpu", "minipallas.platforms.mosaic:launch"),
    )
}
