"""How tight and how safe the numerics envelope is (issue 11, item 2): false positives on XLA's
legal float differences, and the smallest planted scale it catches.

For each program (a 12-element f32 sum, a 3x5 mat-vec dot, layer norm and softmax over 64-256
elements, ``minipallas/tools/corpora/float_programs.py``) and N random inputs: the interpreter's
outputs, ``minipallas.compile``'s (XLA:CPU), and the spread of each of 8 perturbed samples.
Then, for K samples (2..24) and SAFETY (1..4): how many inputs land outside the envelope
(``ulps > SAFETY * spread + 1``) — false positives, since XLA is right — and, under the
harness's rule (8 samples, 8 more while outside, up to 24), the count outside and the
distribution of the envelope fraction. Then the planted bug: the compiled
result times ``1 + 2**-k`` (rounded once, as XLA's multiply), caught on what share of inputs.
Also the cost: the envelope's time per case against a plain ``difftest.run``.

Run: ``.venv/bin/python -m bench.numerics.envelope_rates [--inputs 200]``.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

import minipallas
from minipallas.tools.corpora.float_programs import PROGRAMS, inputs
from minipallas.tools.difftest import Case, run
from minipallas.tools.difftest.harness import abstract
from minipallas.tools.difftest.outputs import initial, interpret_outputs
from minipallas.tools.envelope.measure import (
    MOST_SAMPLES,
    SAFETY,
    SAMPLES,
    distance,
    envelope,
)

MOST = MOST_SAMPLES  # samples measured; the first K of them make each envelope below

F32 = np.float32


def measure(name: str, rng: np.random.Generator) -> dict:
    args = inputs(name, rng)
    fn = minipallas.from_jaxpr(jax.make_jaxpr(PROGRAMS[name])(*abstract(args)))
    base = interpret_outputs(fn, args)
    got = list(minipallas.compile(fn)(*initial(args)))
    start = time.perf_counter()
    samples = [envelope(fn, args, base, samples=1, seed=s) for s in range(MOST)]
    seconds = time.perf_counter() - start
    return {
        "base": base[0],
        "got": got[0],
        "spreads": [e.spreads[0] for e in samples],
        "floor": samples[0].floor,
        "seconds": seconds,
    }


def fraction(m: dict, k: int, safety: int, got: np.ndarray | None = None) -> float:
    spread = np.max(m["spreads"][:k], axis=0)
    allowed = safety * spread + m["floor"]
    return distance(m["base"], m["got"] if got is None else got, allowed).fraction


def adaptive(m: dict, got: np.ndarray | None = None) -> float:
    """The harness's rule: SAMPLES runs, SAMPLES more while outside, up to MOST_SAMPLES."""
    k = SAMPLES
    while True:
        f = fraction(m, k, SAFETY, got)
        if f <= 1 or k >= MOST_SAMPLES:
            return f
        k += SAMPLES


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--inputs", type=int, default=200)
    n = parser.parse_args().inputs
    rng = np.random.default_rng(2024)
    for name in sorted(PROGRAMS):
        ms = [measure(name, rng) for _ in range(n)]
        differ = sum(not np.array_equal(m["base"], m["got"]) for m in ms)
        print(
            f"\n{name}: {n} inputs, XLA differs in bits on {differ}; "
            f"envelope ({MOST} samples) {np.mean([m['seconds'] for m in ms]) * 1e3:.1f} ms"
        )
        print("  outside the envelope (false positives), K samples x SAFETY:")
        for k in (2, 4, 8, 16, 24):
            row = [sum(fraction(m, k, s) > 1 for m in ms) for s in (1, 2, 3, 4)]
            print(
                f"    K={k}: "
                + "  ".join(f"S={s}: {c:3d}" for s, c in zip((1, 2, 3, 4), row, strict=True))
            )
        fr = np.array([adaptive(m) for m in ms])
        q = np.quantile(fr, [0.5, 0.9, 0.99, 1.0])
        print(
            f"  harness rule (K={SAMPLES}..{MOST_SAMPLES}, SAFETY={SAFETY}): outside "
            f"{np.count_nonzero(fr > 1)}; fraction median {q[0]:.3f}, 90% {q[1]:.3f}, "
            f"99% {q[2]:.3f}, max {q[3]:.3f}; exactly 0: {np.count_nonzero(fr == 0)}"
        )
        caught = []
        for e in range(10, 25):
            factor = F32(1 + 2.0**-e)
            hit = sum(adaptive(m, (m["got"] * factor).astype(F32)) > 1 for m in ms)
            caught.append(f"2^-{e}: {hit}")
        print("  planted scale 1 + 2^-e caught on:", ", ".join(caught))
    timing(rng)


def timing(rng: np.random.Generator) -> None:
    """A difftest.run of each program, with and without the envelope (bits equal or not)."""
    print("\ndifftest.run, ms (median of 10):")
    for name in sorted(PROGRAMS):
        times = {"agree": [], "within-envelope": []}
        for _ in range(30):
            start = time.perf_counter()
            r = run(Case(name, PROGRAMS[name], inputs(name, rng)))
            times.setdefault(r.finding.kind, []).append(time.perf_counter() - start)
        print(
            f"  {name}: "
            + ", ".join(
                f"{k} {np.median(v[:10]) * 1e3:.0f} ({len(v)} of 30)" for k, v in times.items() if v
            )
        )


if __name__ == "__main__":
    main()
