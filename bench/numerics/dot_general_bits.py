"""Does the imported ``dot_general`` (transposes and reshapes around one ``dot``) sum in
upstream's order? (issue 11, item 6)

For each ``jnp.einsum`` spec, random float32 operands (and bfloat16 operands with a float32
result) go through upstream (``jax.jit`` of the einsum: XLA:CPU's ``dot_general``), through
``minipallas.compile`` of the import (XLA:CPU's ``dot`` of the transposed, reshaped operands)
and through the reference interpreter (numpy's ``matmul``). Prints, per spec and way, how many
result elements differ from upstream's bits and by at most how many ulps.

Run: ``.venv/bin/python -m bench.numerics.dot_general_bits [--trials 20]``.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

import minipallas as mp
from minipallas.tools.envelope.measure import ulp_distance

SPECS = {
    "ij,jk->ik": ((16, 32), (32, 8)),
    "ij,kj->ik": ((16, 32), (8, 32)),
    "ji,jk->ik": ((32, 16), (32, 8)),
    "bij,bjk->bik": ((4, 16, 32), (4, 32, 8)),
    "bij,bkj->bki": ((4, 16, 32), (4, 8, 32)),
    "bi,bi->b": ((8, 64), (8, 64)),
    "ijk,kl->ijl": ((4, 8, 32), (32, 8)),
    "ibj,jbk->bik": ((16, 4, 32), (32, 4, 8)),
    "ijk,jkl->il": ((8, 8, 16), (8, 16, 8)),
    "abc,cba->b": ((8, 6, 16), (16, 6, 8)),
    "bhqd,bhkd->bhqk": ((2, 4, 16, 64), (2, 4, 16, 64)),
}


def measure(spec: str, shapes: tuple, low: bool, trials: int, seed: int) -> dict[str, list]:
    """{way: [elements differing from upstream, elements in all, max ulps]}."""
    rng = np.random.default_rng(seed)
    dtype = ml_dtypes.bfloat16 if low else np.float32

    def f(a, b):
        return jnp.einsum(spec, a, b, preferred_element_type=jnp.float32)

    operands = [np.zeros(s, dtype) for s in shapes]
    fn = mp.from_jaxpr(jax.make_jaxpr(f)(*operands))
    compiled, upstream = mp.compile(fn), jax.jit(f)
    counts = {"compile": [0, 0, 0], "interpret": [0, 0, 0]}
    for _ in range(trials):
        args = [rng.standard_normal(s).astype(np.float32).astype(dtype) for s in shapes]
        want = np.asarray(upstream(*args))
        ways = {"compile": compiled(*args)[0], "interpret": mp.interpret(fn, *args)[0]}
        for way, got in ways.items():
            ulps = ulp_distance(want, np.asarray(got))
            c = counts[way]
            c[0] += int(np.count_nonzero(ulps))
            c[1] += ulps.size
            c[2] = max(c[2], int(ulps.max(initial=0)))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {args.trials} trials per row; differing / all (max ulps)")
    print(f"{'spec':<18} {'operands':<9} {'compile vs upstream':<24} interpret vs upstream")
    for spec, shapes in SPECS.items():
        for low in (False, True):
            c = measure(spec, shapes, low, args.trials, args.seed)
            cells = [f"{n}/{total} ({m})" for n, total, m in c.values()]
            print(f"{spec:<18} {'bf16' if low else 'f32':<9} {cells[0]:<24} {cells[1]}")


if __name__ == "__main__":
    main()
