"""The compat room: the only modules that touch jax's and jaxlib's private APIs.

``jax_private`` names every ``jax._src`` module minipallas reads, in one table; ``jaxlib_shim``
re-exports every jaxlib entry point (the MLIR bindings, the dialects, the XLA client). Both sit
at the bottom of ``lowering`` so that a jax or jaxlib upgrade edits this folder only:
``tests/lowering/compat/`` scans the tree and holds every other file to them.
"""
