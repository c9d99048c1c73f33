"""The reference interpreter's elementwise math against XLA:CPU (``minipallas.compile``).

For each op (exp, log, tanh, logistic, sqrt, rsqrt, sin, cos, pow, and those jnp programs use
beyond them: floor ... cbrt, atan2, nextafter) and float dtype, the same
inputs go through ``minipallas.interpret`` and ``minipallas.compile``; the table gives how many
results differ in any bit, the largest distance in ulps of the dtype (NaN against a number
counts as infinite) and how many results are NaN on both sides with different bits.

Inputs: bfloat16 and float16 exhaustively (all 65536 bit patterns); float32 ``--f32`` values per
op (default 10**7): zeros, subnormals, infinities, NaN payloads, the values around each
algorithm's range boundaries (clamps, reduction steps, mantissa splits), uniformly random bit
patterns and random values in the range where the op is interesting. ``pow``, ``atan2`` and
``nextafter`` take pairs.

    python -m bench.numerics.transcendental_exactness [--f32 10000000] [--ops exp,log] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

import minipallas as mp
from minipallas.ir import dtypes

OPS = ("exp", "log", "tanh", "logistic", "sqrt", "rsqrt", "sin", "cos", "pow")
OPS += ("floor", "ceil", "round", "round_even", "exp2", "expm1", "log1p", "erf", "erf_inv")
OPS += ("tan", "asin", "atan", "sinh", "cosh", "asinh", "cbrt", "atan2", "nextafter")
PAIRS = ("pow", "atan2", "nextafter")
CHUNK = 1 << 20
U16 = np.arange(2**16, dtype=np.uint16)


def program(op: str, dtype: str, n: int) -> mp.ir.Function:
    t = f"{dtypes.SHORT[dtype]}[{n}]"
    if op in PAIRS:
        return mp.parse(
            f"func @f(%x: {t}, %z: {t}) -> ({t}) {{\n  %y = {op} %x, %z : {t}\n  return %y\n}}"
        )
    return mp.parse(f"func @f(%x: {t}) -> ({t}) {{\n  %y = {op} %x : {t}\n  return %y\n}}")


def _near(values: list[float], spread: int = 64) -> np.ndarray:
    """Float32 values at and within ``spread`` ulps of each of ``values`` (and their negatives)."""
    centre = np.array(values, np.float32).view(np.int32)
    offsets = np.arange(-spread, spread + 1, dtype=np.int32)
    around = (centre[:, None] + offsets[None, :]).ravel().view(np.float32)
    return np.concatenate([around, -around])


def _boundaries(op: str) -> np.ndarray:
    ln2 = float(np.log(2))
    common = [0.0, 1.0, 0.5, 2.0, 2.0**-126, 2.0**-12, 2.0**-24, 3.0e38, float(np.pi)]
    specific = {
        "exp": [-87.8, 88.8, 88.72, -87.33, -103.97, *((k + 0.5) * ln2 for k in range(-127, 128))],
        "logistic": [-88.8, 87.8, 16.6, -16.6, *((k + 0.5) * ln2 for k in range(-127, 128))],
        "log": [float(np.sqrt(0.5)), float(np.sqrt(2)), 2.0**-126, 3.4e38],
        "tanh": [4e-4, 7.99881172180175781, 20.0, 9.0, 0.625],
        "rsqrt": [2.0**k for k in range(-126, 128)],
        "sqrt": [2.0**k for k in range(-126, 128)],
        "sin": [k * float(np.pi) / 4 for k in range(-64, 65)] + [1e4, 1e6, 1e30],
        "cos": [k * float(np.pi) / 4 for k in range(-64, 65)] + [1e4, 1e6, 1e30],
        "pow": [],
        **{r: [k + 0.5 for k in range(-64, 64)] for r in ("floor", "ceil", "round", "round_even")},
        "exp2": [float(k) for k in range(-150, 129)],
        "expm1": [0.5, 1e-3, 88.7, -87.8, 4e-4],
        "log1p": [0.41421356, -0.41421356, 1e-3, -0.999999],
        "erf": [3.8325, 1.0, 0.5],
        "erf_inv": [1.0, 0.999999, 0.99, 0.5, 0.9932621],  # w = 5 near 0.99326
        "tan": [k * float(np.pi) / 4 for k in range(-64, 65)] + [1e4, 1e6, 1e30],
        "asin": [1.0, 0.5, 0.999],
        "atan": [1.0, 1e4, 1e-4],
        "sinh": [1.0, 88.7, 89.4],
        "cosh": [1.0, 88.7, 89.4],
        "asinh": [2.0**64, 1.0, 1e-4],
        "cbrt": [8.0, 27.0, 1e-30],
        "atan2": [1.0],
        "nextafter": [],
    }[op]
    return _near(common + specific)


def _specials() -> np.ndarray:
    subnormal_bits = np.arange(1, 1 << 23, 4099, dtype=np.uint32)
    nan_bits = np.array([0x7FC00000, 0x7F800001, 0x7FA00000, 0x7FFFFFFF], np.uint32)
    bits = np.concatenate([subnormal_bits, nan_bits])
    named = np.array([0.0, np.inf, np.float32(np.finfo(np.float32).max)], np.float32)
    both = np.concatenate([bits.view(np.float32), named])
    return np.concatenate([both, -both])


_SCALE = {"exp": 40.0, "logistic": 30.0, "tanh": 5.0, "sin": 50.0, "cos": 50.0, "tan": 50.0}
_POSITIVE = ("log", "sqrt", "rsqrt", "pow", "log1p")  # random values where these are defined
_UNIT = ("erf_inv", "asin")  # and in [-1, 1]


def _interesting(op: str, rng: np.random.Generator, n: int) -> np.ndarray:
    if op in _UNIT:
        return rng.uniform(-1, 1, n).astype(np.float32)
    if op in _POSITIVE:
        return np.exp(rng.uniform(-87, 88, n)).astype(np.float32)
    return (rng.standard_normal(n) * _SCALE.get(op, 4.0)).astype(np.float32)


def f32_inputs(op: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    fixed = np.concatenate([_specials(), _boundaries(op)])
    rest = max(n - fixed.size, 0)
    random_bits = rng.integers(0, 2**32, rest // 2, dtype=np.uint64).astype(np.uint32)
    out = np.concatenate(
        [fixed, random_bits.view(np.float32), _interesting(op, rng, rest - rest // 2)]
    )
    return out.astype(np.float32)


def _pow_pairs(x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Bases and exponents: random bits, positive bases with moderate exponents, and integer
    exponents of negative bases."""
    n = x.size
    bases = np.abs(x)
    third = n // 3
    exponents = rng.uniform(-30, 30, n).astype(np.float32)
    exponents[:third] = (
        rng.integers(0, 2**32, third, dtype=np.uint64).astype(np.uint32).view(np.float32)
    )
    negative = slice(third, 2 * third)
    bases[negative] = -bases[negative]
    exponents[negative] = np.round(exponents[negative])
    return bases, exponents


def _ordered(bits: np.ndarray, width: int) -> np.ndarray:
    """Float bit patterns as integers ordered like the values (ulp distance = difference)."""
    b = bits.astype(np.int64)
    sign = np.int64(1) << (width - 1)
    return np.where(b & sign, sign - b, b)


def compare(ours: np.ndarray, xla: np.ndarray) -> tuple[int, float, int]:
    """(results differing in any bit, max ulp distance, NaN results with different bits)."""
    unsigned = {2: np.uint16, 4: np.uint32}[ours.dtype.itemsize]
    a, b = ours.view(unsigned), xla.view(unsigned)
    differ = a != b
    a_nan, b_nan = np.isnan(ours.astype(np.float32)), np.isnan(xla.astype(np.float32))
    nan_bits = int((differ & a_nan & b_nan).sum())
    if (a_nan != b_nan).any():
        return int(differ.sum()), float("inf"), nan_bits
    numbers = differ & ~a_nan
    width = ours.dtype.itemsize * 8
    distance = np.abs(_ordered(a[numbers], width) - _ordered(b[numbers], width))
    return int(differ.sum()), float(distance.max(initial=0)), nan_bits


def measure(op: str, dtype: str, args: tuple[np.ndarray, ...]) -> tuple[int, float, int]:
    n = args[0].size
    totals = [0, 0.0, 0]
    fn = program(op, dtype, min(n, CHUNK))
    for start in range(0, n, CHUNK):
        chunk = tuple(a[start : start + CHUNK] for a in args)
        f = fn if chunk[0].size == CHUNK or n <= CHUNK else program(op, dtype, chunk[0].size)
        found = compare(mp.interpret(f, *chunk)[0], mp.compile(f)(*chunk)[0])
        totals = [totals[0] + found[0], max(totals[1], found[1]), totals[2] + found[2]]
    return totals[0], totals[1], totals[2]


def inputs(op: str, dtype: str, f32: int, seed: int) -> tuple[np.ndarray, ...]:
    if dtype == "float32":
        x = f32_inputs(op, f32, seed)
    else:
        x = U16.view(ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16)
    if op not in PAIRS:
        return (x,)
    if dtype == "float32" and op == "pow":
        return _pow_pairs(x, np.random.default_rng(seed + 1))
    rng = np.random.default_rng(seed + 1)  # every base, against a random exponent each
    return x, rng.permutation(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--f32", type=int, default=10**7, help="float32 values per op")
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated ops")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{'op':10} {'dtype':9} {'values':>9} {'differ':>8} {'max ulp':>8} {'NaN bits':>8}")
    for op in args.ops.split(","):
        for dtype in ("bfloat16", "float16", "float32"):
            start = time.perf_counter()
            xs = inputs(op, dtype, args.f32, args.seed)
            differ, ulps, nan_bits = measure(op, dtype, xs)
            took = time.perf_counter() - start
            print(
                f"{op:10} {dtype:9} {xs[0].size:9d} {differ:8d} {ulps:8g} {nan_bits:8d}"
                f"   ({took:.1f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
