"""``xla_cpu.cpu_execute`` hands numpy arguments to XLA zero-copy where their alignment
allows: the arguments must still never be written, and a result must never share an argument's
memory, even when the program returns a parameter unchanged."""

import numpy as np
import pytest

from minipallas.lowering.runtime import xla_cpu

N = 4096
PASS_THROUGH = f"""module {{
  func.func @main(%a: tensor<{N}xf32>) -> (tensor<{N}xf32>, tensor<{N}xf32>) {{
    %0 = stablehlo.add %a, %a : tensor<{N}xf32>
    return %a, %0 : tensor<{N}xf32>, tensor<{N}xf32>
  }}
}}"""


def aligned(n: int, offset: int = 0) -> np.ndarray:
    """``n`` float32s starting ``offset`` elements past a 64-byte boundary."""
    raw = np.empty(n + 32, np.float32)
    start = (-raw.ctypes.data % 64) // 4 + offset
    return raw[start : start + n]


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "unaligned"])
def test_results_own_their_memory_and_arguments_stay_unwritten(offset):
    executable = xla_cpu.cpu_compile(PASS_THROUGH)
    x = aligned(N, offset)
    x[:] = np.arange(N, dtype=np.float32)
    same, doubled = xla_cpu.cpu_execute(executable, [x])
    assert not np.shares_memory(same, x) and not np.shares_memory(doubled, x)
    np.testing.assert_array_equal(same, np.arange(N, dtype=np.float32))
    np.testing.assert_array_equal(doubled, 2 * np.arange(N, dtype=np.float32))
    same[:] = -1  # writing a result leaves the argument alone...
    x[:] = 7  # ...and writing the argument afterwards leaves the results alone
    np.testing.assert_array_equal(doubled, 2 * np.arange(N, dtype=np.float32))
    assert (same == -1).all()
