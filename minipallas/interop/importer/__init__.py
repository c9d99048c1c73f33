"""Importing upstream jaxprs as minipallas IR: ``from_jaxpr``.

``engine`` is the importer (an interpreter over a jaxpr whose rules build IR), ``avals`` what
upstream's values are as IR types, ``params`` how a rule declares every parameter of its
primitive (each honoured or refused); every other file holds the import rules of one family of
jax primitives, registered with ``@rule("primitive", ..., params={...})``:

- ``state``, ``mutable``: refs and their reads and writes (``get``, ``swap``, ``jax.new_ref``);
- ``pallas``, ``kernel_call``, ``pipeline``, ``mesh``: Pallas's primitives, whole
  ``pallas_call`` kernels (as a ``Kernel``), ``emit_pipeline``, mesh kernels,
  kernels that span devices (``devices``: a ``shard_map`` over several devices, its kernels in
  ``devices_kernel``, its lax collectives in ``devices_collectives``);
- ``dma``, ``semaphores``, ``triton``, ``lanes``: async copies, semaphores, Triton atomics, the
  TPU's vector primitives;
- ``control``, ``lax``, ``lax_indexing``, ``lax_misc``, ``lax_random``, ``lax_structural``,
  ``lax_total_order``, ``debug``: loops, calls and the ``lax`` primitives;
- ``indexers``: upstream's ``NDIndexer`` as minipallas indexers (used by the rules above).
"""

from minipallas.interop.importer import (  # noqa: F401  (each registers its rules)
    control,
    debug,
    devices,
    devices_collectives,
    dma,
    kernel_call,
    lanes,
    lax,
    lax_indexing,
    lax_misc,
    lax_random,
    lax_structural,
    lax_total_order,
    mesh,
    mutable,
    pallas,
    pipeline,
    semaphores,
    state,
    triton,
)
from minipallas.interop.importer.avals import JaxprImportError
from minipallas.interop.importer.engine import from_jaxpr, rule

__all__ = ["JaxprImportError", "from_jaxpr", "rule"]
