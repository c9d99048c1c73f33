"""What a TPU computes differently from the reference interpreter, measured on the chip.

``bench/chip/tpu_numerics.py`` ran each float op a kernel may use through Mosaic and through XLA
on a v5e chip (``bench/results/tpu_numerics_v5e.json``); both give the same bits, so one model
serves kernels and XLA programs on the chip alike:

- transcendentals are the chip's own approximations, far looser than XLA:CPU's: ``ulp_bound``
  is the largest float32 distance from the exact value measured (over inputs of each op's usual
  range), plus 2 ulps for the interpreter's own distance from it;
- a float32 ``dot`` at jax's default precision is one bfloat16 pass: both operands rounded to
  bfloat16, products summed in float32 (measured: at most 6927 float32 eps times sum |a*b|,
  median 921; at ``HIGHEST``, 0.5). minipallas's ``dot`` carries no precision, so the model
  takes the default for every float32 dot: an envelope it draws is wide for a ``HIGHEST`` one;
- float sums run in an order of the chip's choosing (the CPU model's rule 1 covers it: at most
  0.27 eps times sum |x| measured).

``Perturbation(seed, chip=TPU_V5E)`` runs the interpreter with these in place of XLA:CPU's
freedoms; the difftest's TPU ways are judged by the envelope that draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Chip:
    """A chip's float model: ``ulp_bound`` per op (float32 ulps), and the dtype float32 dot
    operands are rounded to (None: kept)."""

    name: str
    ulp_bound: dict[str, int] = field(hash=False)
    dot_operands: str | None


_MEASURED_V5E = {  # max float32 ulps from the exact value, bench/results/tpu_numerics_v5e.json
    "exp": 93,
    "log": 3951,
    "tanh": 1061,
    "logistic": 91,
    "log1p": 172,
    "erf": 6,
    "rsqrt": 2,
    "sqrt": 2,
    "sin": 2,
    "cos": 2,
    "div": 2,
}
TPU_V5E = Chip("TPU v5e", {op: n + 2 for op, n in _MEASURED_V5E.items()}, "bfloat16")
