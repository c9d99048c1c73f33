"""The kernels marked for the TPU (``tpu_cases.py``) equal upstream's interpret mode on the CPU,
bit for bit, before the hardware check runs them on the chip."""

import numpy as np
import pytest
from kernel_helpers import as_tuple, assert_same_bits

from minipallas.tools.corpora.tpu_cases import TPU_CASES


@pytest.mark.parametrize("case", TPU_CASES, ids=lambda c: c.name)
def test_a_tpu_case_equals_upstream_interpret_on_the_cpu(case):
    args = case.inputs()
    got, want = as_tuple(case.minipallas()(*args)), as_tuple(case.upstream()(*args))
    for g, w in zip(got, want, strict=True):
        assert_same_bits(g, np.asarray(w))
