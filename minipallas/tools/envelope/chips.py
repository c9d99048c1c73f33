"""What a TPU computes differently from the reference interpreter, measured on the chip.

``bench/chip/tpu_numerics.py`` ran each float op a kernel may use through Mosaic and through XLA
on a v5e chip (``bench/results/tpu_numerics_v5e.json``); both give the same bits, so one model
serves kernels and XLA programs on the chip alike:

- transcendentals are the chip's own approximations, far looser than XLA:CPU's: ``ulp_bound``
  is the largest float32 distance from the exact value measured (over inputs of each op's usual
  range), plus 2 ulps for the interpreter's own distance from it;
- a float32 ``dot`` at jax's default precision is one bfloat16 pass: both operands rounded to
  bfloat16, products summed in float32 (measured: at most 6927 float32 eps times sum |a*b|,
  median 921; at ``HIGHEST``, 0.5). A ``dot`` whose precision is ``HIGHEST`` for both operands
  (``#tpu.contract_precision<fp32>``) keeps its operands: float32 products, its sum's order the
  chip's (0.5 eps times sum |a*b| is inside rule 1's bound); every other precision takes the
  one-pass model (Mosaic refuses ``HIGH`` and mixed pairs; on XLA:TPU the model is wide there);
- ``reciprocal`` (``pl.reciprocal``, ``tpu.reciprocal``) with ``approx`` is the chip's own
  approximation, not the bfloat16 stand-in the interpreter computes off the chip: modelled as
  ``1 / x`` within a relative error of ``approx_reciprocal``, 2**-15 (measured in a kernel on a
  v5e, 2026-12-07, 2**18 inputs of magnitude 1e-3 to 1e3, both signs: at most 1.6e-5, i.e.
  2**-15.9 or 195 float32 ulps, median 4.7e-6); without ``approx``, at most 1 ulp from the
  exact value (the same run; not yet in ``tpu_numerics_v5e.json``). Outside a kernel XLA:TPU
  computes upstream's off-chip rule instead, a bfloat16 division (the same run: within 2**-8 of
  ``1 / x`` of ``x`` rounded to bfloat16), which this model does not cover;
- XLA:TPU keeps chains of bfloat16 ops in float32 (``jax.jit``'s default excess precision): a
  chain widened to float32 at its end shows it (seen on the xla-tpu way of a float32 kernel's
  ``lax.mul(out_dtype=bfloat16)``, 2026-12-07): ``perturb``'s rule 7;
- float sums run in an order of the chip's choosing (the CPU model's rule 1 covers it: at most
  0.27 eps times sum |x| measured).

``Perturbation(seed, chip=TPU_V5E)`` runs the interpreter with these in place of XLA:CPU's
freedoms; the difftest's TPU ways are judged by the envelope that draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Chip:
    """A chip's float model: ``ulp_bound`` per op (float32 ulps), the dtype float32 dot
    operands are rounded to at the default precision (None: kept), and the relative error of
    its approximate reciprocal (None: the interpreter's, off the chip)."""

    name: str
    ulp_bound: dict[str, int] = field(hash=False)
    dot_operands: str | None
    approx_reciprocal: float | None = None


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
    "reciprocal": 1,  # measured in a kernel (module doc), not by bench/chip/tpu_numerics.py
}
TPU_V5E = Chip("TPU v5e", {op: n + 2 for op, n in _MEASURED_V5E.items()}, "bfloat16", 2.0**-15)
