"""``minipallas.difftest.fuzz_kernels``: random kernels against upstream interpret mode."""

import io

from minipallas.difftest import fuzz_kernels
from minipallas.generate.kernels import IndexMap, KernelSpec, Operand


def test_a_short_campaign_agrees_with_upstream_bit_for_bit():
    out = io.StringIO()
    summary = fuzz_kernels.campaign(count=12, seconds=300, seed=3, out=out)
    assert summary.kernels == 12 and summary.batched >= 1
    assert summary.disagreements == [], out.getvalue()


def test_a_planted_bug_is_reported_with_the_kernel(monkeypatch):
    """Batching a kernel whose scratch flows between grid points (as if the scratch rule
    were dropped) gives other bits than upstream; the check says which program and where."""
    from minipallas.kernels import vectorized_grid

    monkeypatch.setattr(
        vectorized_grid, "_live_params", lambda block, known, live: [False] * len(known)
    )
    spec = KernelSpec(
        grid=(2,), block=(2,), inputs=(Operand((4,), IndexMap(("axis",), (0,))),),
        output=Operand((4,), IndexMap(("axis",), (0,))), accumulate=False,
        scratch="running", reset_axis=0, scale_axis=0,
    )  # fmt: skip
    batched, problem = fuzz_kernels.check(spec, seed=0)
    assert batched and problem is not None
    assert problem.startswith("cpu program differs from upstream at flat index 2")
    assert " vs " in problem and "scratch=running" in problem


def test_main_exits_nonzero_only_on_disagreement(capsys):
    assert fuzz_kernels.main(["--count", "2", "--seed", "1"]) == 0
    assert "2 kernels" in capsys.readouterr().out
