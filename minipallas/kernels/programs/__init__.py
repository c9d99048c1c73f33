"""The programs a kernel becomes on the CPU: its grid as loops (``grid``) or batched
(``vectorized_grid``), and ``choose``, which decides between them: the "stablehlo" target's
prepare step. The IR->IR steps on the way are registered passes in ``passes.kernel``
(``bind-grid``, ``drop-inputs``, ``hoist-invariant``), so a pipeline and ``minipallas-opt`` run
and print them."""
