"""The fuzzers: one loop (``loop``) and four front ends, each run as ``python -m
minipallas.tools.fuzz.NAME``: ``programs`` (discharge and a user's pipeline on random programs,
against the reference interpreter), ``upstream`` (random programs against upstream JAX),
``kernels`` (random kernels against upstream's interpret mode) and ``tpu`` (random kernels on
the chip, or compiled for it ahead of time)."""
