"""Scripts run on a TPU (or GPU) machine, each ``python -m bench.chip.NAME`` from the repository
root; most have a ``--cpu`` or ``--aot`` mode that runs their machinery here.

- ``tpu_check`` (``make tpu-check``): every kernel on the chip against upstream and the CPU;
- ``tpu_bugs``: the bug corpus on the chip; ``bug_interpret``: the same corpus under
  upstream's TPU interpret mode on the CPU, and minipallas's checks;
- ``tpu_mesh``, ``tpu_fidelity``: mesh kernels and issue 39's fidelity gaps on the chip;
- ``tpu_remote``: kernels that span devices (remote copies, signals, the barrier semaphore) in
  a shard_map over the one chip, upstream's lowering against minipallas's module;
- ``tpu_params`` (``make tpu-params``): issue 46's one-parameter kernels, upstream's lowering
  against minipallas's module, each against a float64 reference;
- ``tpu_numerics``: the chip's own float numerics (the TPU envelope);
- ``gpu_check``: every suite kernel's Triton module on an NVIDIA GPU;
- ``workers``: the worker processes that survive a kernel halting the chip.
"""
