"""The TPU's own float numerics, measured on the chip: what the difftest's TPU envelope is made of.

For each float op a kernel may use, the largest distance (in float32 ulps) between the chip's
result and the correctly rounded one (computed in float64), both inside a Pallas kernel (Mosaic)
and in plain XLA:TPU, on inputs that cover each op's range (and its edges); for ``dot``, the
error at jax's default precision, at HIGHEST, and of a bf16 dot, relative to the sum of
``|a_i b_i|`` (what an error bound scales with); for sums, the error of a lane and a sublane
reduction against float64. Needs only jax (no minipallas): run it on a TPU machine.

    python -m bench.chip.tpu_numerics [--json OUT.json]

Prints one table; ``--json`` also writes the numbers (``difftest/tpu_envelope.py`` reads the
ones docs/numerics.md quotes).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

UNARY = {  # name -> (jnp function, numpy float64 reference, input range)
    "exp": ("exp", np.exp, (-80.0, 80.0)),
    "log": ("log", np.log, (1e-30, 1e30)),
    "tanh": ("tanh", np.tanh, (-10.0, 10.0)),
    "rsqrt": ("rsqrt", lambda x: 1.0 / np.sqrt(x), (1e-30, 1e30)),
    "sqrt": ("sqrt", np.sqrt, (0.0, 1e30)),
    "logistic": ("logistic", lambda x: 1.0 / (1.0 + np.exp(-x)), (-40.0, 40.0)),
    "sin": ("sin", np.sin, (-100.0, 100.0)),
    "cos": ("cos", np.cos, (-100.0, 100.0)),
    "log1p": ("log1p", np.log1p, (-0.9, 1e6)),
    "expm1": ("expm1", np.expm1, (-20.0, 20.0)),
    "erf": ("erf", None, (-4.0, 4.0)),
    "div": ("div", None, (1e-3, 1e3)),
}
ROWS, LANES = 64, 1024
EPS = float(np.finfo(np.float32).eps)


def ulps(got: np.ndarray, want64: np.ndarray) -> np.ndarray:
    """Distance in float32 ulps between ``got`` (float32) and the float64 value, rounded."""
    want = want64.astype(np.float32)
    gi = got.view(np.int32).astype(np.int64)
    wi = want.view(np.int32).astype(np.int64)
    gi = np.where(gi < 0, -(gi & 0x7FFFFFFF), gi)
    wi = np.where(wi < 0, -(wi & 0x7FFFFFFF), wi)
    finite = np.isfinite(want) & np.isfinite(got)
    return np.where(finite, np.abs(gi - wi), np.where(np.isnan(got) == np.isnan(want), 0, 1 << 30))


def inputs(lo: float, hi: float, rng: np.random.Generator) -> np.ndarray:
    n = ROWS * LANES
    if lo > 0:
        x = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    else:
        x = rng.uniform(lo, hi, n)
    return x.astype(np.float32).reshape(ROWS, LANES)


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--json", default=None)
    opts = args.parse_args(argv)

    import jax

    print(f"devices: {jax.devices()}")
    rng = np.random.default_rng(0)
    report = {"device": str(jax.devices()[0].device_kind)}
    report["unary"] = _unary(rng)
    report["dot"] = _dots(rng)
    report["sum"] = _sums(rng)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(report, f, indent=1)
    _print(report)
    return 0


def _unary(rng: np.random.Generator) -> dict:
    """Each op of ``UNARY`` in a kernel and in XLA: its largest and 99th-percentile ulps."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from scipy import special

    report: dict = {}

    def kernel_of(fn):
        def kernel(x_ref, y_ref, o_ref):
            o_ref[...] = fn(x_ref[...], y_ref[...])

        return lambda x, y: pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)
        )(x, y)

    for name, (jname, ref, (lo, hi)) in UNARY.items():
        x = inputs(lo, hi, rng)
        y = inputs(lo, hi, rng)
        if name == "div":
            fn = lambda a, b: a / b  # noqa: E731
            want = x.astype(np.float64) / y.astype(np.float64)
        elif name == "erf":
            fn = lambda a, b: lax.erf(a)  # noqa: E731
            want = special.erf(x.astype(np.float64))
        elif name == "logistic":
            fn = lambda a, b: jax.nn.sigmoid(a)  # noqa: E731
            want = ref(x.astype(np.float64))
        elif name == "rsqrt":
            fn = lambda a, b: lax.rsqrt(a)  # noqa: E731
            want = ref(x.astype(np.float64))
        else:
            fn = (lambda f: lambda a, b: f(a))(getattr(jnp, jname))
            want = ref(x.astype(np.float64))
        row = {}
        for way, run in (("mosaic", kernel_of(fn)), ("xla", jax.jit(fn))):
            try:
                got = np.asarray(run(jnp.asarray(x), jnp.asarray(y)))
                d = ulps(got, want)
                row[way] = {"max_ulps": int(d.max()), "p99_ulps": float(np.percentile(d, 99))}
            except Exception as e:  # noqa: BLE001 - a refusal is a finding, reported
                row[way] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
        report[name] = row

    return report


def _dots(rng: np.random.Generator) -> dict:
    """A 512-cube float32 dot at two precisions, in a kernel and in XLA."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl

    report: dict = {}
    # dot: error relative to sum |a_i b_i| * eps32, per precision
    m = k = n = 512
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)

    def dot_kernel(precision):
        def kernel(x_ref, y_ref, o_ref):
            o_ref[...] = jnp.dot(
                x_ref[...], y_ref[...], precision=precision, preferred_element_type=jnp.float32
            )

        return lambda x, y: pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32)
        )(x, y)

    for label, precision in (("default", None), ("highest", lax.Precision.HIGHEST)):
        for way, run in (
            ("mosaic", dot_kernel(precision)),
            ("xla", jax.jit(lambda x, y, p=precision: jnp.dot(x, y, precision=p))),
        ):
            try:
                got = np.asarray(run(jnp.asarray(a), jnp.asarray(b))).astype(np.float64)
                rel = np.abs(got - exact) / (scale * EPS)
                report[f"{label}/{way}"] = {
                    "max_err_in_eps_sum_abs": float(rel.max()),
                    "median": float(np.median(rel)),
                }
            except Exception as e:  # noqa: BLE001
                report[f"{label}/{way}"] = {"error": f"{type(e).__name__}: {e}"[:160]}

    return report


def _sums(rng: np.random.Generator) -> dict:
    """Sums along lanes and along sublanes, in a kernel and in XLA."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    report: dict = {}
    # sums: along lanes and along sublanes, in a kernel and in XLA
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    for axis in (0, 1):
        exact_sum = x.astype(np.float64).sum(axis=axis)
        abs_sum = np.abs(x).astype(np.float64).sum(axis=axis)
        shape = exact_sum.shape

        def sum_kernel(x_ref, o_ref, axis=axis):
            o_ref[...] = jnp.sum(x_ref[...], axis=axis, keepdims=True)

        keep = (1, 1024) if axis == 0 else (256, 1)
        runs = {
            "mosaic": lambda v, sk=sum_kernel, keep=keep, shape=shape: pl.pallas_call(
                sk, out_shape=jax.ShapeDtypeStruct(keep, jnp.float32)
            )(v).reshape(shape),
            "xla": jax.jit(lambda v, axis=axis: jnp.sum(v, axis=axis)),
        }
        for way, run in runs.items():
            try:
                got = np.asarray(run(jnp.asarray(x))).astype(np.float64)
                rel = np.abs(got - exact_sum) / (abs_sum * EPS)
                report[f"axis{axis}/{way}"] = {"max_err_in_eps_sum_abs": float(rel.max())}
            except Exception as e:  # noqa: BLE001
                report[f"axis{axis}/{way}"] = {"error": f"{type(e).__name__}: {e}"[:160]}

    return report


def _print(report: dict) -> None:
    print(f"{'op':<10} {'mosaic max ulps':>16} {'xla max ulps':>13}")
    for name, row in report["unary"].items():
        cells = [
            str(row[w].get("max_ulps", row[w].get("error", "?")))[:40] for w in ("mosaic", "xla")
        ]
        print(f"{name:<10} {cells[0]:>16} {cells[1]:>13}")
    for section in ("dot", "sum"):
        for key, value in report[section].items():
            print(f"{section} {key}: {value}")


if __name__ == "__main__":
    sys.exit(main())
