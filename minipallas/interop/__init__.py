"""Interop with upstream JAX: import a jaxpr as minipallas IR, and run minipallas under JAX.

- ``from_jaxpr(closed_jaxpr)``: an upstream program (state primitives, Pallas ``run_scoped`` /
  ``load`` / ``store``, refs made with ``jax.new_ref``, loops, conds, calls, common ``lax``
  ops) as a minipallas ``Function`` that computes what upstream's ``discharge_state`` +
  evaluation computes.
- ``to_jax(fn)``: a minipallas function as a function of JAX arrays, built from ``jax.lax``
  ops, that works under ``jax.jit`` on any backend.

Import rules are registered per primitive (``importer.rule``), one file per family; ``to_jax``
rules per op (``to_jax.rule``). The function ``to_jax`` is imported last so that it, not
its module of the same name, is this package's ``to_jax``.
"""

from minipallas.interop import (  # noqa: F401
    control,
    debug,  # jax.debug.print: its import and to_jax rules
    dma,  # pltpu.make_async_copy / async_copy
    lanes,  # pltpu.roll, pltpu.bitcast, platform_index: import and to_jax rules
    lax,
    lax_indexing,
    lax_misc,
    lax_random,  # jax.random with threefry keys: threefry2x32 and the key primitives
    lax_structural,
    lax_total_order,  # lt_to / le_to / eq_to (jnp.searchsorted, jnp.histogram)
    mesh,  # pl.kernel / core_map (mpmd_map) over a mesh, axis_index, core_barrier
    mutable,
    pallas,
    pallas_call,  # registers the pallas_call rule
    pipeline,  # pltpu.emit_pipeline's primitive: its grid as a loop over block views
    semaphores,
    state,
    to_jax_indexing,  # noqa: F401  (registers its to_jax rules)
    to_jax_structural,
    triton,  # Pallas Triton's atomics
)
from minipallas.interop.importer import JaxprImportError, from_jaxpr, rule
from minipallas.interop.to_jax import to_jax

__all__ = ["JaxprImportError", "from_jaxpr", "rule", "to_jax"]
