"""One-parameter TPU kernels, the primitives' parameters (issue 46): every parameter a primitive
carries that upstream's Mosaic lowering reads (``jax/_src/pallas/mosaic/lowering.py``) gets a
small kernel of its own, written once as an upstream Pallas program (``pl.pallas_call`` of a
kernel using ``jax.lax``, ``jnp``, ``pl`` and ``pltpu``), with Mosaic-legal inputs ((8, 128)
tiles of float32, (16, 128) of bfloat16), a float64 numpy reference, and what must hold on the
chip between upstream (``jax.jit(f)``) and minipallas (``jax.jit(on_tpu(f))``):

- ``same-bits``: both run, and give the same bits;
- ``both-refuse``: both refuse, with upstream's message (``message``, a substring of both);
- ``beyond-upstream``: minipallas runs where upstream refuses (``message``), for ``reason``.

``shows``: text upstream's Mosaic module holds for the parameter, which minipallas's must hold
too (``#tpu.contract_precision<fp32>`` for ``precision=HIGHEST``): a parameter dropped on the way
changes no compile verdict, only the module. ``cpu``: why the CPU check (minipallas's import
against upstream's interpret mode) leaves a case out. The kernels of the grid, the block
specs, the compiler params and the custom call's fields are in ``param_cases.py``, which
gathers both into ``PARAM_CASES``; ``test_param_cases.py`` checks them without a chip,
``bench/chip/tpu_params.py`` on one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

BF16 = ml_dtypes.bfloat16
SAME_BITS, BOTH_REFUSE, BEYOND_UPSTREAM = "same-bits", "both-refuse", "beyond-upstream"
ACCURACY = "Not implemented: accuracy"  # upstream's refusal of every accuracy=
Out = tuple[tuple[int, ...], Any]  # (shape, dtype)


@dataclass(frozen=True)
class Expect:
    """What must hold on the chip (module doc): ``outcome`` is one of the three."""

    outcome: str
    message: str = ""  # upstream's refusal (both-refuse, beyond-upstream): a substring of it
    reason: str = ""  # why minipallas runs anyway (beyond-upstream)
    ours: str = ""  # minipallas's refusal where it words it itself (both-refuse); else message

    @property
    def our_message(self) -> str:
        return self.ours or self.message


SAME = Expect(SAME_BITS)


def refused(message: str, ours: str = "") -> Expect:
    return Expect(BOTH_REFUSE, message, ours=ours)


def beyond(message: str, reason: str) -> Expect:
    return Expect(BEYOND_UPSTREAM, message, reason)


@dataclass(frozen=True)
class ParamCase:
    """One parameter's kernel. ``program(interpret)`` is upstream's function of jax arrays
    (``pallas_call(..., interpret=interpret)``); ``reference`` takes the inputs (numpy) to the
    outputs in float64 (an array, or a tuple of them). ``parameter``'s first word is its
    family: the primitive, or ``grid``, ``block_spec``, ``compiler_params``, ``custom_call``."""

    name: str
    parameter: str
    program: Callable[[bool], Callable[..., Any]]
    make_inputs: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
    reference: Callable[..., Any]
    expect: Expect = SAME
    shows: tuple[str, ...] = ()
    cpu: str = ""  # why the CPU check leaves the case out (test_param_cases.py)

    @property
    def family(self) -> str:
        return self.parameter.split()[0]

    def inputs(self, seed: int = 46) -> tuple[np.ndarray, ...]:
        return self.make_inputs(np.random.default_rng(seed))

    def upstream(self, interpret: bool = False) -> Callable[..., Any]:
        return self.program(interpret)

    def expected(self, *args: np.ndarray) -> tuple[np.ndarray, ...]:
        out = self.reference(*args)
        return tuple(out) if isinstance(out, tuple | list) else (out,)


# ----- building blocks -----


def call(kernel: Callable[..., None], out: Out, **options: Any) -> Callable:
    """``program(interpret)`` for ``pl.pallas_call(kernel, out, **options)``, ``out`` a
    (shape, dtype) pair."""

    def program(interpret: bool) -> Callable[..., Any]:
        shape = jax.ShapeDtypeStruct(*out)
        return pl.pallas_call(kernel, shape, interpret=interpret, **options)

    return program


def unary(fn: Callable[[Any], Any], out: Out) -> Callable:
    """A whole-array kernel ``o = fn(x)``."""

    def kernel(x_ref: Any, o_ref: Any) -> None:
        o_ref[...] = fn(x_ref[...])

    return call(kernel, out)


def binary(fn: Callable[[Any, Any], Any], out: Out) -> Callable:
    """A whole-array kernel ``o = fn(x, y)``."""

    def kernel(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
        o_ref[...] = fn(x_ref[...], y_ref[...])

    return call(kernel, out)


def normal(*shape: int, dtype: Any = np.float32, scale: float = 1.0) -> Callable:
    return lambda rng: (rng.standard_normal(shape) * scale).astype(np.float32).astype(dtype)


def positive(*shape: int) -> Callable:
    return lambda rng: (np.abs(rng.standard_normal(shape)) + 0.125).astype(np.float32)


def ints(*shape: int, low: int = -1000, high: int = 1000, dtype: Any = np.int32) -> Callable:
    return lambda rng: rng.integers(low, high, shape).astype(dtype)


def halves(*shape: int) -> Callable:
    """Floats of which half lie at k + 0.5 (the rounding methods differ there)."""
    return lambda rng: np.where(
        rng.integers(0, 2, shape) == 1,
        rng.integers(-20, 20, shape) + 0.5,
        rng.standard_normal(shape) * 8,
    ).astype(np.float32)


def sparse(*shape: int) -> Callable:
    """Floats of which half are zeros."""
    return lambda rng: np.where(
        rng.integers(0, 2, shape) == 1, rng.standard_normal(shape), 0.0
    ).astype(np.float32)


def inputs(*makers: Callable) -> Callable:
    return lambda rng: tuple(make(rng) for make in makers)


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


F32, BF = jnp.float32, jnp.bfloat16
X, XB = normal(8, 128), normal(16, 128, dtype=BF16)
TILE, BTILE = ((8, 128), F32), ((16, 128), BF)
HIGHEST, HIGH, DEFAULT = lax.Precision.HIGHEST, lax.Precision.HIGH, lax.Precision.DEFAULT


# ----- dot_general -----


def dot(dims: Any = (((1,), (0,)), ((), ())), **params: Any) -> Callable[[Any, Any], Any]:
    return lambda x, y: lax.dot_general(x, y, dims, **params)


def ref_dot(dims: Any = (((1,), (0,)), ((), ()))) -> Callable[..., np.ndarray]:
    """numpy's dot in float64 for ``dims`` (no batch dimensions)."""
    (lc, rc), _ = dims
    return lambda x, y: np.tensordot(f64(x), f64(y), axes=(lc, rc))


MM = inputs(normal(8, 128), normal(128, 128))
MM_BF16 = inputs(normal(16, 128, dtype=BF16), normal(128, 128, dtype=BF16))
NT = (((1,), (1,)), ((), ()))  # x @ y.T
TN = (((0,), (0,)), ((), ()))  # x.T @ y
MATVEC = inputs(normal(8, 128, dtype=BF16), normal(1, 128, dtype=BF16))


MATVEC_F32 = (
    "upstream's matrix-vector rule broadcasts the bfloat16 operands to float32 before it converts "
    "them (a vector.broadcast its verifier refuses); minipallas converts, then multiplies and sums"
)


def _batched(x: Any, y: Any) -> Any:
    return lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,))), preferred_element_type=F32)


def _matvec(preferred: Any) -> Callable[[Any, Any], Any]:
    return dot(NT, preferred_element_type=preferred)


DOT = [
    ParamCase("dot_precision_none", "dot_general precision=None", binary(dot(), TILE), MM,
              ref_dot()),
    ParamCase("dot_precision_default", "dot_general precision=DEFAULT",
              binary(dot(precision=DEFAULT), TILE), MM, ref_dot()),
    ParamCase("dot_precision_highest", "dot_general precision=HIGHEST",
              binary(dot(precision=HIGHEST), TILE), MM, ref_dot(),
              shows=("#tpu.contract_precision<fp32>",)),
    ParamCase("dot_precision_highest_pair", "dot_general precision=(HIGHEST, HIGHEST)",
              binary(dot(precision=(HIGHEST, HIGHEST)), TILE), MM, ref_dot(),
              shows=("#tpu.contract_precision<fp32>",)),
    ParamCase("dot_precision_high", "dot_general precision=HIGH",
              binary(dot(precision=HIGH), TILE), MM, ref_dot(),
              refused("Unsupported dot precision: HIGH")),
    ParamCase("dot_precision_mixed", "dot_general precision=(HIGHEST, DEFAULT)",
              binary(dot(precision=(HIGHEST, DEFAULT)), TILE), MM, ref_dot(),
              refused("Per-operand dot precision unsupported")),
    ParamCase("dot_bf16_to_f32", "dot_general preferred_element_type=float32 (bf16 operands)",
              binary(dot(preferred_element_type=F32), ((16, 128), F32)), MM_BF16,
              ref_dot()),
    ParamCase("dot_bf16_to_bf16", "dot_general preferred_element_type=bfloat16",
              binary(dot(preferred_element_type=BF), BTILE), MM_BF16, ref_dot(),
              refused("Expected matmul acc to be 32-bit")),
    ParamCase("dot_int8_to_int32", "dot_general preferred_element_type=int32 (int8 operands)",
              binary(dot(preferred_element_type=jnp.int32), ((32, 128), jnp.int32)),
              inputs(ints(32, 128, low=-128, high=128, dtype=np.int8),
                     ints(128, 128, low=-128, high=128, dtype=np.int8)), ref_dot()),
    ParamCase("dot_transposed_rhs", "dot_general dimension_numbers=x @ y.T",
              binary(dot(NT, preferred_element_type=F32), TILE), MM, ref_dot(NT)),
    ParamCase("dot_transposed_lhs", "dot_general dimension_numbers=x.T @ y",
              binary(dot(TN, preferred_element_type=F32), ((128, 128), F32)),
              inputs(normal(128, 128), normal(128, 128)), ref_dot(TN)),
    ParamCase("dot_batched", "dot_general dimension_numbers=batched (b, m, k) @ (b, k, n)",
              binary(_batched, ((2, 8, 128), F32)), inputs(normal(2, 8, 128), normal(2, 128, 128)),
              lambda x, y: np.einsum("bij,bjk->bik", f64(x), f64(y))),
    ParamCase("dot_matvec_bf16", "dot_general bf16 x bf16 -> bf16 matrix-vector",
              binary(_matvec(None), ((8, 1), BF)), MATVEC, ref_dot(NT)),
    ParamCase("dot_matvec_bf16_to_f32", "dot_general bf16 matrix-vector preferred=float32",
              binary(_matvec(F32), ((8, 1), F32)), MATVEC, ref_dot(NT),
              beyond("source operand and result have same element type", MATVEC_F32)),
]  # fmt: skip


# ----- convert_element_type, round -----


def astype(dtype: Any) -> Callable[[Any], Any]:
    return lambda x: x.astype(dtype)


def _bool_to_int(x: Any) -> Any:
    return (x > 0).astype(jnp.int32)


def _f32_to_bool(x: Any) -> Any:  # bool blocks cross as int32: the bool is the convert's
    return jnp.where(x.astype(jnp.bool_), 1.0, -1.0).astype(F32)


def _int_to_bool(x: Any) -> Any:
    return jnp.where(x.astype(jnp.bool_), x, -7)


def _round_ref(method: int) -> Callable[[np.ndarray], np.ndarray]:
    if method == 1:
        return lambda x: np.round(f64(x))
    return lambda x: np.sign(f64(x)) * np.floor(np.abs(f64(x)) + 0.5)


def _round(method: Any) -> Callable[[Any], Any]:
    return lambda x: lax.round(x, method)


CONVERT = [
    ParamCase("convert_f32_to_bf16", "convert_element_type new_dtype=bfloat16 (from float32)",
              unary(astype(BF), BTILE), inputs(normal(16, 128)), f64),
    ParamCase("convert_bf16_to_f32", "convert_element_type new_dtype=float32 (from bfloat16)",
              unary(astype(F32), ((16, 128), F32)), inputs(XB), f64),
    ParamCase("convert_f32_to_int32", "convert_element_type new_dtype=int32 (from float32)",
              unary(astype(jnp.int32), ((8, 128), jnp.int32)), inputs(normal(8, 128, scale=50)),
              lambda x: np.trunc(f64(x))),
    ParamCase("convert_int32_to_f32", "convert_element_type new_dtype=float32 (from int32)",
              unary(astype(F32), TILE), inputs(ints(8, 128, low=-(2**30), high=2**30)), f64),
    ParamCase("convert_int8_to_f32", "convert_element_type new_dtype=float32 (from int8)",
              unary(astype(F32), ((32, 128), F32)),
              inputs(ints(32, 128, low=-128, high=128, dtype=np.int8)), f64),
    ParamCase("convert_bf16_to_int32", "convert_element_type new_dtype=int32 (from bfloat16)",
              unary(astype(jnp.int32), ((16, 128), jnp.int32)),
              inputs(normal(16, 128, dtype=BF16, scale=50)), lambda x: np.trunc(f64(x))),
    ParamCase("convert_bool_to_int32", "convert_element_type new_dtype=int32 (from bool)",
              unary(_bool_to_int, ((8, 128), jnp.int32)), inputs(X), lambda x: f64(x > 0)),
    ParamCase("convert_f32_to_bool", "convert_element_type new_dtype=bool (from float32)",
              unary(_f32_to_bool, TILE), inputs(sparse(8, 128)),
              lambda x: np.where(x != 0, 1.0, -1.0)),
    ParamCase("convert_int32_to_bool", "convert_element_type new_dtype=bool (from int32)",
              unary(_int_to_bool, ((8, 128), jnp.int32)), inputs(ints(8, 128, low=-2, high=3)),
              lambda x: f64(np.where(x != 0, x, -7))),
    ParamCase("round_away_from_zero", "round rounding_method=AWAY_FROM_ZERO",
              unary(_round(lax.RoundingMethod.AWAY_FROM_ZERO), TILE), inputs(halves(8, 128)),
              _round_ref(0)),
    ParamCase("round_to_nearest_even", "round rounding_method=TO_NEAREST_EVEN",
              unary(_round(lax.RoundingMethod.TO_NEAREST_EVEN), TILE), inputs(halves(8, 128)),
              _round_ref(1)),
]  # fmt: skip


# ----- reductions -----


def _reduce(fn: Callable[..., Any], axis: Any) -> Callable[[Any], Any]:
    return lambda x: fn(x, axis=axis, keepdims=True)


def _np_reduce(fn: Callable[..., Any], axis: Any) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: fn(f64(x), axis=axis, keepdims=True)


def _arg(fn: Callable[..., Any], axis: int, index_dtype: Any) -> Callable[[Any], Any]:
    def reduce(x: Any) -> Any:
        i = fn(x, axis, index_dtype)
        return jnp.expand_dims(i, axis).astype(jnp.int32)

    return reduce


REDUCE = [
    ParamCase("reduce_sum_lanes", "reduce_sum axes=(1,)", unary(_reduce(jnp.sum, 1), ((8, 1), F32)),
              inputs(X), _np_reduce(np.sum, 1)),
    ParamCase("reduce_sum_all", "reduce_sum axes=(0, 1)",
              unary(_reduce(jnp.sum, (0, 1)), ((1, 1), F32)), inputs(X),
              _np_reduce(np.sum, (0, 1))),
    ParamCase("reduce_sum_int32", "reduce_sum axes=(0,) of int32",
              unary(_reduce(jnp.sum, 0), ((1, 128), jnp.int32)), inputs(ints(8, 128)),
              _np_reduce(np.sum, 0)),
    ParamCase("reduce_max_sublanes", "reduce_max axes=(0,)",
              unary(_reduce(jnp.max, 0), ((1, 128), F32)), inputs(X), _np_reduce(np.max, 0)),
    ParamCase("reduce_min_lanes", "reduce_min axes=(1,)",
              unary(_reduce(jnp.min, 1), ((8, 1), F32)), inputs(X), _np_reduce(np.min, 1)),
    ParamCase("argmax_lanes", "argmax axes=(1,) index_dtype=int32",
              unary(_arg(lax.argmax, 1, jnp.int32), ((8, 1), jnp.int32)), inputs(X),
              lambda x: f64(np.argmax(x, axis=1)[:, None])),
    ParamCase("argmin_sublanes", "argmin axes=(0,) index_dtype=int32",
              unary(_arg(lax.argmin, 0, jnp.int32), ((1, 128), jnp.int32)), inputs(X),
              lambda x: f64(np.argmin(x, axis=0)[None])),
    ParamCase("argmax_int16_index", "argmax index_dtype=int16",
              unary(_arg(lax.argmax, 1, jnp.int16), ((8, 1), jnp.int32)), inputs(X),
              lambda x: f64(np.argmax(x, axis=1)[:, None]),
              refused("Only index_dtype=int32 is supported", ours="int32 indices only")),
]  # fmt: skip


# ----- pltpu.roll -----


def _roll(shift: int, axis: int, **params: Any) -> Callable[[Any], Any]:
    return lambda x: pltpu.roll(x, shift, axis, **params)


def _np_roll(shift: int, axis: int, stride: int = 0, stride_axis: int = 0) -> Callable:
    def roll(x: np.ndarray) -> np.ndarray:
        x = f64(x)
        if not stride:
            return np.roll(x, shift, axis)
        parts = [np.roll(np.take(x, [k], stride_axis), shift + k * stride, axis)
                 for k in range(x.shape[stride_axis])]  # fmt: skip
        return np.concatenate(parts, stride_axis)

    return roll


def _dynamic_roll(x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = pltpu.roll(x_ref[...], pl.program_id(0) * 3 + 1, 1)


def _np_dynamic_roll(x: np.ndarray) -> np.ndarray:
    return np.concatenate([np.roll(f64(x[i * 8 : i * 8 + 8]), i * 3 + 1, 1) for i in range(2)])


ROWS = pl.BlockSpec((8, 128), lambda i: (i, 0))
ROLL = [
    ParamCase("roll_lanes", "roll shift=3 axis=1", unary(_roll(3, 1), TILE), inputs(X),
              _np_roll(3, 1)),
    ParamCase("roll_sublanes", "roll shift=5 axis=0", unary(_roll(5, 0), TILE), inputs(X),
              _np_roll(5, 0)),
    ParamCase("roll_dynamic_shift", "roll shift=program_id(0) * 3 + 1 (dynamic)",
              call(_dynamic_roll, ((16, 128), F32), grid=(2,), in_specs=[ROWS], out_specs=ROWS),
              inputs(normal(16, 128)), _np_dynamic_roll),
    ParamCase("roll_stride", "roll stride=1 stride_axis=0",
              unary(_roll(1, 1, stride=1, stride_axis=0), TILE), inputs(X),
              _np_roll(1, 1, stride=1, stride_axis=0)),
    ParamCase("roll_stride_minor", "roll stride=2 stride_axis=1 (the minor dimension)",
              unary(_roll(1, 0, stride=2, stride_axis=1), TILE), inputs(X),
              _np_roll(1, 0, stride=2, stride_axis=1),
              refused("stride dimension is the minor most"),
              cpu="128 rolls, one a lane, on the CPU: 15 s for the two sides of a kernel that "
                  "both refuse on the chip"),
]  # fmt: skip


# ----- transcendentals, with and without accuracy= -----


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(f64(x))


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-f64(x)))


# name, lax function, numpy reference, inputs
FUNCTIONS = {
    "exp": (lax.exp, np.exp, X),
    "exp2": (lax.exp2, np.exp2, X),
    "log": (lax.log, np.log, positive(8, 128)),
    "log1p": (lax.log1p, np.log1p, positive(8, 128)),
    "tanh": (lax.tanh, np.tanh, X),
    "logistic": (lax.logistic, _logistic, X),
    "sqrt": (lax.sqrt, np.sqrt, positive(8, 128)),
    "rsqrt": (lax.rsqrt, lambda x: 1 / np.sqrt(x), positive(8, 128)),
    "sin": (lax.sin, np.sin, X),
    "cos": (lax.cos, np.cos, X),
    "erf": (lax.erf, _erf, X),
}
# name -> (accuracy=, as the parameter reads)
WITH_ACCURACY = {
    "exp": (lax.AccuracyMode.HIGHEST, "AccuracyMode.HIGHEST"),
    "log": (lax.AccuracyMode.DEFAULT, "AccuracyMode.DEFAULT"),
    "tanh": (lax.Tolerance(atol=0.0, rtol=1e-6, ulps=1), "Tolerance(rtol=1e-6, ulps=1)"),
    "logistic": (lax.AccuracyMode.HIGHEST, "AccuracyMode.HIGHEST"),
    "sqrt": (lax.AccuracyMode.HIGHEST, "AccuracyMode.HIGHEST"),
    "rsqrt": (lax.AccuracyMode.HIGHEST, "AccuracyMode.HIGHEST"),
    "sin": (lax.Tolerance(atol=1e-6, rtol=0.0, ulps=0), "Tolerance(atol=1e-6)"),
    "cos": (lax.AccuracyMode.HIGHEST, "AccuracyMode.HIGHEST"),
}


def _with(fn: Callable[..., Any], accuracy: Any) -> Callable[[Any], Any]:
    return lambda x: fn(x, accuracy=accuracy)


def _np(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: fn(f64(x))


TRANSCENDENTAL = [
    ParamCase(name, f"{name} (no parameter)", unary(fn, TILE), inputs(make), _np(ref))
    for name, (fn, ref, make) in FUNCTIONS.items()
] + [
    ParamCase(f"{name}_accuracy", f"{name} accuracy={WITH_ACCURACY[name][1]}",
              unary(_with(fn, WITH_ACCURACY[name][0]), TILE), inputs(make), _np(ref),
              refused(ACCURACY))
    for name, (fn, ref, make) in FUNCTIONS.items() if name in WITH_ACCURACY
]  # fmt: skip


# ----- reciprocal, powers, clamp, select, iota, mul -----


def _reciprocal(**params: Any) -> Callable[[Any], Any]:
    return lambda x: pl.reciprocal(x, **params)


def _iota(dtype: Any, dimension: int) -> Callable[[Any], Any]:
    return lambda x: x + lax.broadcasted_iota(dtype, x.shape, dimension).astype(x.dtype)


def _iota_1d(x: Any) -> Any:
    return x + lax.iota(jnp.int32, 128)[None, :].astype(x.dtype)


def _np_iota(dimension: int) -> Callable[[np.ndarray], np.ndarray]:
    return lambda x: f64(x) + np.indices(x.shape)[dimension]


def _select3(c: Any, x: Any) -> Any:
    return lax.select_n(c, x, x * 2.0, -x)


def _np_select3(c: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.choose(c, [f64(x), f64(x) * 2, -f64(x)])


def _clamp_arrays(x: Any, y: Any) -> Any:
    return lax.clamp(-jnp.abs(y), x, jnp.abs(y))


def _mul(out: Any) -> Callable[[Any, Any], Any]:
    return lambda x, y: lax.mul(x, y, out_dtype=out)


SELECT3 = "upstream's rule selects between two cases only; minipallas chains two selects"
MUL_FAILS = "Too many leaves for PyTreeDef"
MUL = (
    "upstream's rule converts each operand to out_dtype with a helper traced for both operands "
    "and fails (jax 0.10.2); minipallas converts both operands, then multiplies"
)
ELEMENTWISE = [
    ParamCase("reciprocal_exact", "reciprocal approx=False", unary(_reciprocal(), TILE),
              inputs(X), lambda x: 1 / f64(x)),
    ParamCase("reciprocal_approx", "reciprocal approx=True",
              unary(_reciprocal(approx=True), TILE), inputs(X), lambda x: 1 / f64(x),
              shows=("approx = true",)),
    ParamCase("reciprocal_approx_not_full_range", "reciprocal approx=True full_range=False",
              unary(_reciprocal(approx=True, full_range=False), TILE), inputs(X),
              lambda x: 1 / f64(x), shows=("approx = true",)),
    ParamCase("reciprocal_bf16", "reciprocal of bfloat16", unary(_reciprocal(), BTILE),
              inputs(XB), lambda x: 1 / f64(x), refused("Only float32 is supported")),
    ParamCase("integer_pow_3", "integer_pow y=3", unary(lambda x: lax.integer_pow(x, 3), TILE),
              inputs(X), lambda x: f64(x) ** 3),
    ParamCase("integer_pow_neg2", "integer_pow y=-2",
              unary(lambda x: lax.integer_pow(x, -2), TILE), inputs(positive(8, 128)),
              lambda x: f64(x) ** -2),
    ParamCase("integer_pow_int32", "integer_pow y=5 of int32",
              unary(lambda x: lax.integer_pow(x, 5), ((8, 128), jnp.int32)),
              inputs(ints(8, 128, low=-50, high=50)), lambda x: f64(x) ** 5),
    ParamCase("pow_float", "pow (float exponent)", binary(lax.pow, TILE),
              inputs(positive(8, 128), normal(8, 128)), lambda x, y: f64(x) ** f64(y)),
    ParamCase("pow_int_exponent", "pow (int32 exponent: sitofp)", binary(lax.pow, TILE),
              inputs(positive(8, 128), ints(8, 128, low=-3, high=4)),
              lambda x, y: f64(x) ** f64(y)),
    ParamCase("pow_base_two", "pow x=2.0 (a constant base: exp2)",
              unary(lambda y: lax.pow(2.0, y), TILE), inputs(X), lambda y: 2 ** f64(y)),
    ParamCase("clamp_scalars", "clamp min, max scalars",
              unary(lambda x: lax.clamp(-0.5, x, 0.75), TILE), inputs(X),
              lambda x: np.clip(f64(x), -0.5, 0.75)),
    ParamCase("clamp_arrays", "clamp min, max arrays", binary(_clamp_arrays, TILE),
              inputs(X, X), lambda x, y: np.clip(f64(x), -np.abs(f64(y)), np.abs(f64(y)))),
    ParamCase("clamp_int32", "clamp of int32",
              unary(lambda x: lax.clamp(-100, x, 300), ((8, 128), jnp.int32)),
              inputs(ints(8, 128)), lambda x: np.clip(f64(x), -100, 300)),
    ParamCase("select_bool", "select_n bool predicate",
              binary(lambda x, y: jnp.where(x > y, x, y * 0.5), TILE), inputs(X, X),
              lambda x, y: np.where(x > y, f64(x), f64(y) * 0.5)),
    ParamCase("select_n_int32", "select_n int32 predicate, three cases",
              binary(_select3, TILE), inputs(ints(8, 128, low=0, high=3), X), _np_select3,
              beyond("select_n only supported with <= 2 arguments", SELECT3)),
    ParamCase("iota_int32_rows", "iota dtype=int32 dimension=0",
              unary(_iota(jnp.int32, 0), TILE), inputs(X), _np_iota(0)),
    ParamCase("iota_int32_lanes", "iota dtype=int32 dimension=1",
              unary(_iota(jnp.int32, 1), TILE), inputs(X), _np_iota(1)),
    ParamCase("iota_1d", "iota shape=(128,) (1-D)", unary(_iota_1d, TILE), inputs(X),
              _np_iota(1)),
    ParamCase("mul_out_dtype_f32", "mul out_dtype=float32 (bfloat16 operands)",
              binary(_mul(F32), ((16, 128), F32)), inputs(XB, XB),
              lambda x, y: f64(x) * f64(y), beyond(MUL_FAILS, MUL)),
    ParamCase("mul_out_dtype_int32", "mul out_dtype=int32 (int8 operands)",
              binary(_mul(jnp.int32), ((32, 128), jnp.int32)),
              inputs(ints(32, 128, low=-128, high=128, dtype=np.int8),
                     ints(32, 128, low=-128, high=128, dtype=np.int8)),
              lambda x, y: f64(x) * f64(y), beyond(MUL_FAILS, MUL)),
]  # fmt: skip

OP_CASES: list[ParamCase] = [*DOT, *CONVERT, *REDUCE, *ROLL, *TRANSCENDENTAL, *ELEMENTWISE]
