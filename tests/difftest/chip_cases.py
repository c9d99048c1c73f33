"""Kernels for the difftest's TPU ways (``minipallas-difftest tests/difftest/chip_cases.py
--device tpu``, on a TPU machine): each is one upstream ``pallas_call``, run on the chip by
upstream's lowering and by minipallas's, and against the reference interpreter.

``CHIP`` exercises the comparison itself: the chip's transcendentals and one-pass f32 dot (its
numerics envelope), and outputs with elements the chip leaves undefined (unwritten rows, the
padding of a partial block feeding a sum). ``BEYOND`` are kernels upstream's Mosaic lowering
refuses and minipallas runs (the README's "Beyond upstream" table): ``upstream`` is a
fragment of upstream's error. ``tests/difftest/test_tpu_ways.py`` checks on the CPU that
upstream refuses each, that libtpu compiles minipallas's module, and that the CPU ways agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from minipallas.tools.difftest import Case

F32 = jnp.float32
RNG = np.random.default_rng(26)
X = RNG.standard_normal((16, 128)).astype(np.float32)
ROWS = pl.BlockSpec((8, 128), lambda i: (i, 0))


def _call(body, out, *, grid=(), in_specs=None, out_specs=None):
    """Interpreted for the CPU ways; the TPU ways lower it for the chip whatever it says."""
    kwargs = {} if not grid else {"grid": grid, "in_specs": in_specs, "out_specs": out_specs}
    return pl.pallas_call(body, out, interpret=True, **kwargs)


def _exp_tanh(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.exp(x) * jnp.tanh(x) + jnp.log(jnp.abs(x) + 1.0)


def _matmul(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...])


def _half_rows(x_ref, o_ref):
    o_ref[:4] = x_ref[:4] * 2.0


def _column_sums(x_ref, o_ref):  # the last block's padding feeds its sums
    o_ref[...] = jnp.broadcast_to(x_ref[...].sum(axis=0, keepdims=True), (8, 128))


S = jax.ShapeDtypeStruct
CHIP = [
    Case("exp_tanh_log", _call(_exp_tanh, S((16, 128), F32)), (X,)),
    Case(
        "matmul_f32_default",
        _call(_matmul, S((16, 128), F32)),
        (X, RNG.standard_normal((128, 128)).astype(np.float32)),
    ),
    Case(
        "half_rows_written",
        _call(_half_rows, S((16, 128), F32), grid=(2,), in_specs=[ROWS], out_specs=ROWS),
        (X,),
        expect="unwritten-output",  # the kernel checks' finding: half of each block is garbage
    ),
    Case(
        "partial_block_sums",
        _call(_column_sums, S((20, 128), F32), grid=(3,), in_specs=[ROWS], out_specs=ROWS),
        (RNG.standard_normal((20, 128)).astype(np.float32),),
        expect="undefined-read",  # the padding of the last block enters its sums
    ),
]


@dataclass(frozen=True)
class Beyond:
    """A kernel upstream's Mosaic lowering refuses: the case, and a fragment of the refusal."""

    case: Case
    upstream: str


def _scalar_sum(x_ref, o_ref):  # one element written: the rest is undefined on the chip
    o_ref[0, 0] = jnp.sum(x_ref[...])


def _scalar_exp_compare(x_ref, o_ref):
    o_ref[0, 0] = jnp.exp(x_ref[0, 0])
    o_ref[0, 1] = jnp.where(x_ref[0, 2] > x_ref[0, 3], 1.0, 2.0)
    o_ref[0, 2] = jnp.floor(x_ref[0, 4]) + jnp.remainder(x_ref[0, 5], 0.7)


def _lane_dynamic_slice(x_ref, o_ref):
    o_ref[...] = jax.lax.dynamic_slice(x_ref[...], (0, 3), (8, 64))


def _unsigned_max(x_ref, o_ref):
    o_ref[...] = jnp.max(x_ref[...], axis=1, keepdims=True)


def _bf16_is_finite(x_ref, o_ref):
    o_ref[...] = jnp.isfinite(x_ref[...]).astype(jnp.int32)


def _float_iota(x_ref, o_ref):
    o_ref[...] = x_ref[...] + jax.lax.broadcasted_iota(F32, (8, 128), 1)


BF16_SPECIALS = np.where(RNG.random((8, 128)) < 0.2, np.inf, X[:8]).astype(jnp.bfloat16)
BEYOND = [
    Beyond(
        Case("scalar_sum", _call(_scalar_sum, S((8, 128), F32)), (X,), expect="unwritten-output"),
        "Cannot store scalars",
    ),
    Beyond(
        Case(
            "scalar_exp_compare",
            _call(_scalar_exp_compare, S((8, 128), F32)),
            (X,),
            expect="unwritten-output",
        ),
        "Cannot store scalars",
    ),
    Beyond(
        Case("lane_dynamic_slice", _call(_lane_dynamic_slice, S((8, 64), F32)), (X,)),
        "Unimplemented primitive in Pallas TPU lowering for tc: dynamic_slice",
    ),
    Beyond(
        Case(
            "unsigned_row_max",
            _call(_unsigned_max, S((8, 1), jnp.uint32)),
            (RNG.integers(0, 2**32, (8, 128), dtype=np.uint32),),
        ),
        "Reductions over unsigned integers",
    ),
    Beyond(
        Case("bf16_is_finite", _call(_bf16_is_finite, S((8, 128), jnp.int32)), (BF16_SPECIALS,)),
        "'tpu.weird' op Input type must be F32",
    ),
    Beyond(
        Case("float_iota", _call(_float_iota, S((8, 128), F32)), (X[:8],)),
        "'tpu.iota' op result #0 must be vector of integer",
    ),
]
CASES = [*CHIP, *(b.case for b in BEYOND)]
