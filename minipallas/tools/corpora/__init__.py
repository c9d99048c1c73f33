"""The corpora: cases the tests, the bench scripts and the difftest's command line all run,
imported by name.

- ``multi_device``: 51 kernels that span devices (remote copies, signals, the barrier
  semaphore), each with its numpy reference and what upstream's interpret mode does with it.

A corpus that both ``tests/`` and ``bench/`` run belongs here, not in a test folder that one of
them has to put on ``sys.path``.
"""
