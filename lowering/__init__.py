"""Lowering of minipallas functions to MLIR for a backend; ``minipallas.lower`` is the entry.

One subpackage per target (``stablehlo`` now; ``tpu`` and ``gpu`` follow the same layout: a
lowering context, a rule table, one rule file per op family). Every private jaxlib entry point
they use is in ``jaxlib_shim``.
"""
