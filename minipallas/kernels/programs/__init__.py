"""The programs a kernel becomes on the CPU: its grid as loops (``grid``) or batched
(``vectorized_grid``), and ``choose``, which decides between them for every caller."""
