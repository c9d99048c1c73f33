"""The import rules, one file per family of jax primitives; each registers its rules with
``@rule("primitive", ..., params={...})`` in ``engine.RULES``, and importing this package
registers them all.

- ``state``, ``mutable``: refs and their reads and writes (``get``, ``swap``, ``jax.new_ref``);
- ``pallas``, ``kernel_call``, ``pipeline``, ``mesh``: Pallas's primitives, whole
  ``pallas_call`` kernels (as a ``Kernel``), ``emit_pipeline``, mesh kernels;
- kernels that span devices: ``devices`` (a ``shard_map`` over several devices, which
  ``control``'s ``shard_map`` rule hands over), its kernels in ``devices_kernel``, their cores in
  ``devices_cores`` and grids in ``devices_grid``, its lax collectives in
  ``devices_collectives``. ``devices``, ``devices_cores`` and ``devices_grid`` register no rule
  of their own: they are the parts of those rules that call ``mesh``'s and ``devices_kernel``'s
  helpers, so they sit beside them;
- ``dma``, ``semaphores``, ``triton``, ``lanes``: async copies, semaphores, Triton atomics, the
  TPU's vector primitives;
- ``control``, ``lax``, ``lax_indexing``, ``lax_misc``, ``lax_random``, ``lax_structural``,
  ``lax_total_order``, ``debug``: loops, calls and the ``lax`` primitives.
"""

from minipallas.interop.importer.rules import (  # noqa: F401  (each registers its rules)
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
