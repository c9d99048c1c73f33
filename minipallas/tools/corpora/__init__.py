"""The corpora: cases the tests, the bench scripts and the difftest's command line all run,
imported by name (``from minipallas.tools.corpora.suite import KERNELS``), so no script puts a
test folder on ``sys.path``.

- ``suite``: the kernel suite (matmul, softmax, layer norm ... at small sizes) each target
  runs; ``tpu_cases``, ``dma_cases``: TPU kernels beyond it; ``param_cases``,
  ``param_op_cases``: one-parameter kernels (issue 46); ``gpu_kernels``: the GPU's extras;
- ``difftest_cases``: programs over refs the differential tester runs against upstream;
  ``frontend_checks``: programs and kernels built with minipallas's own front end;
- ``float_corpus`` (with ``plants``, its planted compiler bugs) and ``float_programs``: float
  kernels and programs the numerics envelope is tested and measured on;
- ``bug_corpus``: kernels with a known bug class each, for the kernel checks and the chip;
- ``mesh_corpus``: mesh kernels of cores; ``multi_device``: 51 kernels that span devices
  (remote copies, signals, the barrier semaphore), each with its numpy reference.
"""

import os

from minipallas.ir.location import count_as_user_code

count_as_user_code(os.path.dirname(__file__))  # errors in these kernels name their own lines
