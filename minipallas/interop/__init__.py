"""Interop with upstream JAX, one folder per direction.

- ``importer``: ``from_jaxpr(closed_jaxpr)``, an upstream program (state primitives, Pallas
  ``run_scoped`` / ``load`` / ``store``, refs made with ``jax.new_ref``, loops, conds, calls,
  common ``lax`` ops, whole ``pallas_call`` kernels) as a minipallas ``Function`` that computes
  what upstream's ``discharge_state`` + evaluation computes. Import rules are registered per
  jax primitive (``importer.rule``), one file per family.
- ``exporter``: ``to_jax(fn)``, a minipallas function as a function of JAX arrays, built from
  ``jax.lax`` ops, that works under ``jax.jit`` on any backend. Its rules are registered per
  minipallas op (``exporter.rule``).
"""

from minipallas.interop.exporter import to_jax
from minipallas.interop.importer import JaxprImportError, from_jaxpr, rule

__all__ = ["JaxprImportError", "from_jaxpr", "rule", "to_jax"]
