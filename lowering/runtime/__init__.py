"""The runtime room: compiling a lowered module and running it on a backend, from numpy.

``compiled`` is ``minipallas.compile`` (a function's StableHLO on XLA:CPU, called with numpy
arrays), which runs through ``jax_dispatch`` (the executable behind ``jax.jit``'s dispatch) or
``xla_cpu`` (jaxlib's CPU client, for host callbacks); ``libtpu`` compiles a Mosaic module
ahead of time and says what the machine has; ``triton_call`` launches a Triton module as
upstream Pallas does. Each reaches jax and jaxlib only through ``lowering/compat``. How a kernel
becomes a JAX primitive on each platform is not here: that is ``minipallas/platforms``.
"""
