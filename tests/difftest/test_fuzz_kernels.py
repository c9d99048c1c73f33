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
    outcome = fuzz_kernels.check(spec, seed=0)
    assert outcome.batched and outcome.problem is not None and outcome.known == []
    assert outcome.problem.startswith("cpu program differs from upstream at flat index 2")
    assert " vs " in outcome.problem and "scratch=running" in outcome.problem


def test_bf16_kernels_count_jax_jits_excess_precision_apart():
    """A bf16 row sum subtracted from its row: jax.jit's default keeps the chain in f32;
    minipallas and upstream's program compiled with per-op rounding agree."""
    spec = KernelSpec(
        grid=(2,), block=(4, 8), inputs=(Operand((8, 8), IndexMap(("axis", "const"), (0, 0))),),
        output=Operand((8, 8), IndexMap(("axis", "const"), (0, 0))), accumulate=False,
        scratch=None, reset_axis=0, scale_axis=0, reduce="sum", dtype="bfloat16",
    )  # fmt: skip
    outcomes = [fuzz_kernels.check(spec, seed) for seed in range(4)]
    assert all(o.problem is None for o in outcomes)
    assert any(o.known == ["excess precision"] for o in outcomes)


def test_a_bf16_rounding_upstream_skips_is_known_when_minipallas_is_its_interpreter():
    """``t = v * 3`` through bf16 scratch, then ``t - v``: upstream's XLA program skips the
    rounding of ``v * 3``; minipallas rounds it, as its reference interpreter does."""
    spec = KernelSpec(
        grid=(3,), block=(2,), inputs=(Operand((6,), IndexMap(("axis",), (0,))),),
        output=Operand((7,), IndexMap(("axis",), (0,))), accumulate=False, scratch=None,
        reset_axis=0, scale_axis=0, staged=True, dtype="bfloat16",
    )  # fmt: skip
    outcomes = [fuzz_kernels.check(spec, seed) for seed in range(6)]
    assert all(o.problem is None for o in outcomes)
    assert any("dropped bf16 rounding" in o.known for o in outcomes)


def test_main_exits_nonzero_only_on_disagreement(capsys):
    assert fuzz_kernels.main(["--count", "2", "--seed", "1"]) == 0
    assert "2 kernels" in capsys.readouterr().out
