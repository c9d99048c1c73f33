"""Measurements of XLA:CPU's float numerics, which the interpreter's rules, exact-mode batching
and the difftest's envelope are built on; each ``python -m bench.numerics.NAME`` from the
repository root.

- ``xla_sum_order``, ``dot_general_bits``, ``bf16_dot_bits``: XLA's orders of sums and dots;
- ``transcendental_exactness``: the interpreter's elementwise math against XLA:CPU's;
- ``batched_bits``: which batched reductions and dots keep the per-point bits;
- ``envelope_rates``, ``envelope_cpus``: how tight and how safe the numerics envelope is.
"""
