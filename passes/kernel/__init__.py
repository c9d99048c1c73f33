"""The kernel passes: those that only a ``pallas_call``'s kernel has a use for, in one room.

Two kinds live here. Passes over the whole ``Kernel`` (``subject="kernel"``: they may change
its grid and block specs): ``fuse-grid-steps`` (``grid_fusion``), which the TPU target runs by
default, and ``reassociate-sums`` (``reassociate``), its ``optimize="fast"`` level. And the
function passes of a kernel's way to the CPU, which ``kernels.programs`` runs on the body:
``bind-grid`` (``program_id`` becomes a parameter), ``drop-inputs`` and ``hoist-invariant``.
The CPU programs themselves (the grid as loops, or batched) are built above, in
``minipallas.kernels.programs``: they trace with the front end. Importing this package
registers every pass in it.
"""

from minipallas.passes.kernel import (  # noqa: F401  (each registers its pass)
    bind_grid,
    drop_inputs,
    grid_fusion,
    hoisting,
    reassociate,  # optimize="fast": reorders float sums
)
