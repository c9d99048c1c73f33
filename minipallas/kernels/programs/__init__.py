"""The programs a kernel becomes on the CPU: its grid as loops (``grid``) or batched
(``vectorized_grid``), and ``choose``, which decides between them for every caller. The IR->IR
steps on the way are registered passes (``bind-grid``, ``drop-inputs``, ``hoist-invariant``),
so a pipeline and ``minipallas-opt`` run and print them: importing this package registers them."""

from minipallas.kernels.programs import (  # noqa: F401  (each registers its pass)
    bind_grid,
    drop_inputs,
    hoisting,
)
