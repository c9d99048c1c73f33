"""Is XLA:CPU's float32 summation order fixed and knowable for small sums? (issue 11, item 2)

For n = 2..64, random float32 inputs (wide exponent range, so orders give other bits), compute
XLA:CPU's sums under ``jax.jit`` in several contexts: ``x.sum()`` alone, ``(x + y).sum()``
(the add fused into the reduction), a row sum of ``(4, n)``, a column sum of ``(n, 4)``, and a
mat-vec ``a @ v`` of ``(4, n) x (n,)``. Each is compared with candidate orders computed in
numpy float32: sequential, numpy's pairwise, and ``k`` strided lanes (k = 2..16) added as a tree.
Prints, per context, for how many n one fixed candidate matches every trial, and which.

Run: ``.venv/bin/python -m bench.numerics.xla_sum_order [--trials 20]``.
"""

from __future__ import annotations

import argparse
from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np

F32 = np.float32


def sequential(x: np.ndarray) -> np.float32:
    acc = F32(0)
    for v in x:
        acc = F32(acc + v)
    return acc


def lanes(k: int):
    def order(x: np.ndarray) -> np.float32:
        acc = [F32(0)] * k
        for i, v in enumerate(x):
            acc[i % k] = F32(acc[i % k] + v)
        while len(acc) > 1:
            acc = [F32(a + b) for a, b in zip(acc[::2], acc[1::2], strict=False)] + (
                acc[-1:] if len(acc) % 2 else []
            )
        return acc[0]

    return order


CANDIDATES = {
    "sequential": sequential,
    "pairwise": lambda x: np.add.reduce(x),
    **{f"lanes{k}": lanes(k) for k in (2, 4, 8, 16)},
}


def contexts(n: int, rng: np.random.Generator):
    """(name, XLA's sums, the float32 rows being summed) for one random input."""
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-12, 12, n))).astype(F32)
    y = (rng.standard_normal(n) * np.exp2(rng.integers(-12, 12, n))).astype(F32)
    m = (rng.standard_normal((4, n)) * np.exp2(rng.integers(-12, 12, (4, n)))).astype(F32)
    v = rng.standard_normal(n).astype(F32)
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        yield "sum alone", [np.asarray(jax.jit(jnp.sum)(x))], [x]
        yield "sum of x+y", [np.asarray(jax.jit(lambda a, b: jnp.sum(a + b))(x, y))], [x + y]
        yield "row sum (4,n)", list(np.asarray(jax.jit(lambda a: a.sum(1))(m))), list(m)
        yield "col sum (n,4)", list(np.asarray(jax.jit(lambda a: a.sum(0))(m.T))), list(m)
        products = [(m[i] * v).astype(F32) for i in range(4)]  # products rounded, no FMA
        yield "mat-vec (4,n)", list(np.asarray(jax.jit(jnp.matmul)(m, v))), products


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    fixed: dict[str, Counter] = {}
    differ: dict[str, int] = {}
    for n in range(2, 65):
        alive: dict[str, set[str]] = {}
        for _ in range(args.trials):
            for name, got, rows in contexts(n, rng):
                ok = alive.setdefault(name, set(CANDIDATES))
                for cand in list(ok):
                    if any(CANDIDATES[cand](r) != g for r, g in zip(rows, got, strict=True)):
                        ok.discard(cand)
                differ[name] = differ.get(name, 0) + any(
                    sequential(r) != g for r, g in zip(rows, got, strict=True)
                )
        for name, ok in alive.items():
            fixed.setdefault(name, Counter())[min(ok) if ok else "none"] += 1
    for name, counts in fixed.items():
        print(
            f"{name:15s} n=2..64: {dict(counts)}; trials differing from sequential: "
            f"{differ[name]}/{63 * args.trials}"
        )


if __name__ == "__main__":
    main()
