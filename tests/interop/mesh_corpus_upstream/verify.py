"""Checks the port: every case builds and traces here; ``--run`` / ``--interpret`` also run them."""

from __future__ import annotations

import contextlib
import re

import jax
import jax.ad_checkpoint
import numpy as np
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import CASES, NOT_PORTED, MeshCase
from mesh_corpus_upstream.interpret import _INTERP

# --------------------------------------------------------------------------------------------
# Verification: build and trace every case on this machine
# --------------------------------------------------------------------------------------------


def _raised(e: BaseException, exc_name: str) -> bool:
    return any(c.__name__ == exc_name for c in type(e).__mro__)


def check(case: MeshCase) -> str:
    """Builds ``case``, traces ``f`` with ``jax.make_jaxpr`` and checks the reference's shapes
    and dtypes against the traced outputs (or, for ``raises_at_trace``, the error)."""
    f, args = case.build()
    assert isinstance(args, tuple) and all(isinstance(a, np.ndarray) for a in args), case.name
    if case.expect.startswith("raises_at_trace:"):
        _, exc_name, regex = case.expect.split(":", 2)
        try:
            jax.make_jaxpr(f)(*args)
        except Exception as e:  # upstream's own error, whatever its class
            if not _raised(e, exc_name) or not re.search(regex, str(e)):
                raise AssertionError(f"{case.name}: wrong error {type(e).__name__}: {e}") from e
            return f"raised {type(e).__name__}"
        raise AssertionError(f"{case.name}: traced, expected {case.expect}")
    closed = jax.make_jaxpr(f)(*args)
    if case.reference is None:
        return "traced"
    want = case.reference(*args)
    assert isinstance(want, tuple), case.name
    got = [(tuple(a.shape), np.dtype(a.dtype)) for a in closed.out_avals]
    ref = [(tuple(np.shape(r)), np.asarray(r).dtype) for r in want]
    assert got == ref, f"{case.name}: traced outputs {got}, reference {ref}"
    return "traced, reference matches"


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal bits, except that any NaN matches any NaN (upstream asserts isnan only)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if got.dtype.kind in "biu":
        return bool(np.array_equal(got, want))
    nan_got, nan_want = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
    bits = f"u{got.dtype.itemsize}"
    return bool(
        np.array_equal(nan_got, nan_want)
        and np.array_equal(got.view(bits)[~nan_got], want.view(bits)[~nan_want])
    )


def run(case: MeshCase, interpret: bool) -> str:
    """Builds and runs ``case`` on the default device (under TPU interpret mode with
    ``interpret``, except the cases that set their own InterpretParams) and checks the outcome
    against ``expect``. ``pl.kernel`` reads the interpret-mode context when it is defined, so the
    build runs inside it too."""
    forced = interpret and _INTERP not in case.what
    ctx = pltpu.force_tpu_interpret_mode() if forced else contextlib.nullcontext()
    with ctx:
        f, args = case.build()
        if case.expect == "lower_only":
            jax.jit(f).lower(*args)
            return "lowered"
        kind, _, rest = case.expect.partition(":")
        try:
            out = jax.block_until_ready(f(*args))
        except Exception as e:  # upstream's own error, whatever its class
            if kind.startswith("raises"):
                exc_name, _, regex = rest.partition(":")
                if _raised(e, exc_name) and re.search(regex, str(e)):
                    return f"raised {type(e).__name__} as expected"
            raise
    if kind != "ok":
        raise AssertionError(f"ran, expected {case.expect}")
    got, want = jax.tree.leaves(out), case.reference(*args)
    if len(got) != len(want) or not all(_same_bits(g, w) for g, w in zip(got, want, strict=True)):
        raise AssertionError("outputs differ from the reference")
    return "ran, outputs equal the reference"


def main(argv: list[str]) -> int:
    """``python -m mesh_corpus_upstream`` (from tests/interop) traces every case (any machine);
    ``--run [REGEX]`` also runs the matching cases on the default device (a TPU: cases with
    more cores than the chip has are skipped), ``--interpret`` in TPU interpret mode."""
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names), "duplicate case names"
    interpret = "--interpret" in argv
    to_run = "--run" in argv or interpret
    positional = [a for a in argv if not a.startswith("--")]
    pattern = re.compile(positional[0] if positional else "")
    chip_cores = jax.devices()[0].num_cores if jax.default_backend() == "tpu" else None
    failures = 0
    cases = [c for c in CASES if pattern.search(c.name)]
    for case in cases:
        try:
            status = check(case)
            if to_run and not case.expect.startswith("raises_at_trace"):
                if chip_cores is not None and not interpret and case.cores > chip_cores:
                    status += f"; not run (the chip has {chip_cores} core(s))"
                else:
                    status += "; " + run(case, interpret)
        except Exception as e:
            failures += 1
            status = f"FAILED {type(e).__name__}: {str(e)[:500]}"
        print(f"{case.name} (cores={case.cores}, expect={case.expect.split(':')[0]}): {status}")
    print(f"{len(cases)} cases, {failures} failed; {len(NOT_PORTED)} NOT_PORTED entries")
    return 1 if failures else 0
