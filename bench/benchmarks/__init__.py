"""Speed tables, each ``python -m bench.benchmarks.NAME`` from the repository root.

- ``ir_bench``, ``discharge_bench``: the IR's stages and discharge on 1k-100k-op programs;
  ``cleanup_counts``: op counts with and without folding; ``vs_upstream``: minipallas against
  upstream's discharge on the same programs;
- ``kernels_bench`` (``make bench``), ``call_overhead``: kernels on the CPU against upstream's
  interpret mode and ``jax.jit``, and where one call's time goes;
- ``tpu_bench`` (``make tpu-bench``), ``fusion_sweep``: kernels on the chip, and
  ``fuse-grid-steps`` settings;
- ``collectives_bench``: what race detection costs the multi-program interpreter.
"""
