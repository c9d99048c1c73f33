"""Does minipallas sum bfloat16 dots into float32 as XLA:CPU does? (issue 39)

Three measurements against ``jax.jit`` of ``lax.dot_general`` on this CPU:

1. every layout of a batched dot (batch, free and contracted dims in any order on each side,
   36 pairs): what XLA does (``pair``: YNNPACK's bfloat16 kernel, ``ir/interpret/xla/dot_order``;
   ``f32``: numpy's order after converting; ``crash``: XLA fails to run it) and how many
   elements minipallas's import differs in, compiled and interpreted (``c/i``; against the
   other way where upstream crashes);
2. ``dot_order.native`` against XLA's compiled program (a conversion or none) on 900 shapes;
3. ``dot_order.pairwise_dot`` against XLA on deep, odd and extreme-valued dots.

Run: ``.venv/bin/python -m bench.numerics.bf16_dot_bits``.
"""

from __future__ import annotations

import itertools

import jax
import ml_dtypes
import numpy as np
from jax import lax

import minipallas as mp
from minipallas.ir.interpret.xla import dot_order

BF16, F32 = ml_dtypes.bfloat16, np.float32
SIZES = {"b": 4, "i": 16, "k": 32, "j": 24}


def product(dims: tuple):
    """Upstream's bfloat16 ``dot_general`` into float32 with these dimension numbers."""
    return lambda a, b: lax.dot_general(a, b, dims, preferred_element_type=F32)


def xla(a: np.ndarray, b: np.ndarray, dims: tuple) -> np.ndarray | None:
    try:
        return np.asarray(jax.jit(product(dims))(a, b))
    except Exception:  # noqa: BLE001 - XLA's own failure is what is measured
        return None


def layouts(rng: np.random.Generator) -> None:
    cols = ["".join(p) for p in itertools.permutations("bkj")]
    print("lhs \\ rhs  " + " ".join(f"{c:>12}" for c in cols))
    for lhs in itertools.permutations("bik"):
        row = []
        for rhs in itertools.permutations("bkj"):
            a = rng.standard_normal([SIZES[c] for c in lhs]).astype(BF16)
            b = rng.standard_normal([SIZES[c] for c in rhs]).astype(BF16)
            dims = (((lhs.index("k"),), (rhs.index("k"),)), ((lhs.index("b"),), (rhs.index("b"),)))
            want = xla(a, b, dims)
            fn = mp.from_jaxpr(jax.make_jaxpr(product(dims))(a, b))
            got = np.asarray(mp.compile(fn)(a, b)[0]), np.asarray(mp.interpret(fn, a, b)[0])
            ref = got[1] if want is None else want
            kind = "crash" if want is None else _kind(want, a, b, lhs, rhs)
            row.append(f"{kind}:{int((got[0] != ref).sum())}/{int((got[1] != ref).sum())}")
        print(f"{''.join(lhs):<10} " + " ".join(f"{c:>12}" for c in row))


def _kind(want: np.ndarray, a: np.ndarray, b: np.ndarray, lhs: tuple, rhs: tuple) -> str:
    x = np.transpose(a.astype(F32), [lhs.index(c) for c in "bik"])
    y = np.transpose(b.astype(F32), [rhs.index(c) for c in "bkj"])
    if (dot_order.pairwise_dot(x, y) == want).all():
        return "pair"
    return "f32" if (np.matmul(x, y) == want).all() else "other"


def shapes() -> None:
    sizes, wrong = (1, 2, 3, 4, 5, 7, 8, 9, 16, 33), []
    for m, n, k in itertools.product(sizes, sizes, (2, 3, 4, 5, 6, 7, 8, 9, 16)):
        a, b = np.zeros((m, k), BF16), np.zeros((k, n), BF16)
        f = jax.jit(product((((1,), (0,)), ((), ()))))
        converts = "convert" in f.lower(a, b).compile().as_text()
        if dot_order.native(m, k, n) == converts:
            wrong.append((m, k, n))
    print(f"native: {900 - len(wrong)} of 900 shapes as XLA decides; wrong: {wrong[:10]}")


def sums(rng: np.random.Generator) -> None:
    for m, k, n, scale in [
        (128, 256, 128, 1.0),
        (32, 255, 40, 1.0),
        (64, 8192, 64, 1.0),
        (16, 8192, 16, 1.0),
        (128, 8192, 8, 1.0),
        (64, 16384, 16, 1.0),
        (64, 64, 64, 1e-19),
        (64, 64, 64, 1e19),
    ]:
        a, b = ((rng.standard_normal(s) * scale).astype(BF16) for s in ((m, k), (k, n)))
        want = xla(a, b, (((1,), (0,)), ((), ())))
        got = dot_order.pairwise_dot(a.astype(F32), b.astype(F32))
        with np.errstate(all="ignore"):
            plain = np.matmul(a.astype(F32), b.astype(F32))
        model, numpy = (
            int((x.view(np.uint32) != want.view(np.uint32)).sum()) for x in (got, plain)
        )
        print(
            f"{m}x{k}x{n} x{scale:g}: model differs in {model}, numpy's matmul in {numpy}, "
            f"of {want.size} (k_block {dot_order.k_block(n)})"
        )


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"jax {jax.__version__}; bfloat16 dots into float32 on this CPU")
    layouts(rng)
    shapes()
    sums(rng)


if __name__ == "__main__":
    main()
