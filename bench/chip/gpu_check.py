"""GPU check: run every suite kernel's emitted Triton module on a real NVIDIA GPU and compare
with numpy (the reference interpreter's run of the same kernel, ``simulate``).

Each module goes through jaxlib's Triton call path, the one upstream Pallas takes with jaxlib
0.10.2: a ``__gpu$xla.gpu.triton`` custom call carrying the module as bytecode, compiled by
XLA's Triton and launched over the module's launch grid (``triton_call.gpu_triton_call``).
One run, about a second per kernel; prints one line per kernel and exits 1 if any differs.

With ``--jit`` each suite kernel instead runs as a JAX program: ``jax.jit`` of the
``pallas_call`` on arrays on the GPU, which lowers its ``minipallas_call`` primitive to the
same Triton custom call (``minipallas/platforms/primitive.py``), compared with the eager CPU
call on the same inputs (the compiled CPU program).

    python -m bench.chip.gpu_check [--jit] [--kernels add,matmul,...]

Needs jax with CUDA (``jax[cuda12]==0.10.2``). Without a visible CUDA GPU it says so and exits
with status 2 without running anything.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from minipallas.lowering.gpu.simulate import simulate
from minipallas.lowering.runtime.triton_call import gpu_available, gpu_triton_call

# Kernels whose GPU result is not defined by their inputs alone
SKIP = {
    "input_written": "writes its input block: XLA's custom call may not write its operands",
}
# ... and under --jit, kernels jax.jit does not stage out
JIT_SKIP = {
    "grid_ids": "takes no arrays, so jax.jit runs it on the CPU when traced (a constant)",
}
RTOL = ATOL = 2e-5  # libdevice transcendentals and reduction order: a few ulps


def check(case: object) -> tuple[bool, str]:
    """Runs one suite case's Triton module on the GPU; returns (agrees, detail)."""
    args = case.inputs()
    lowered = case.minipallas().lower(*args, target="gpu")
    want = simulate(lowered, *args)
    outs = [
        (s.array.shape, np.dtype(o.dtype))
        for s, o in zip(lowered.kernel.out_specs, want, strict=True)
    ]
    start = time.perf_counter()
    got = gpu_triton_call(lowered.module, case.name, lowered.launch_grid, args, outs)
    return compare(got, want, time.perf_counter() - start)


def check_jit(case: object) -> tuple[bool, str]:
    """Runs one suite case as ``jax.jit`` of its call on GPU arrays (the Triton custom call
    of ``triton_call``); compares with its eager CPU call."""
    import jax

    call, args = case.minipallas(), case.inputs()
    want = call(*args)
    want = list(want) if isinstance(want, tuple | list) else [want]
    device = jax.devices("cuda")[0]
    on_gpu = [jax.device_put(a, device) for a in args]
    start = time.perf_counter()
    lowered = jax.jit(call).trace(*on_gpu).lower()
    if "__gpu$xla.gpu.triton" not in lowered.as_text():
        return False, "the jitted module holds no Triton custom call"
    got = jax.block_until_ready(lowered.compile()(*on_gpu))
    seconds = time.perf_counter() - start
    got = list(got) if isinstance(got, tuple | list) else [got]
    return compare([np.asarray(g) for g in got], want, seconds)


def compare(got: list[np.ndarray], want: list[np.ndarray], seconds: float) -> tuple[bool, str]:
    """Whether ``got`` equals ``want`` within RTOL/ATOL, NaNs alike; the detail line."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g64, w64 = np.asarray(g).astype(np.float64), w.astype(np.float64)
        if not np.allclose(g64, w64, rtol=RTOL, atol=ATOL, equal_nan=True):
            return False, f"max abs diff {np.nanmax(np.abs(g64 - w64)):.3g}"
        finite = np.isfinite(w64)
        if finite.any():
            worst = max(worst, float(np.max(np.abs(g64 - w64)[finite])))
    return True, f"max abs diff {worst:.3g}, {seconds * 1e3:.0f} ms (compile + run)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", help="comma-separated suite kernel names (default: all)")
    parser.add_argument(
        "--jit", action="store_true", help="run each call under jax.jit (the JAX primitive)"
    )
    options = parser.parse_args(argv)
    if not gpu_available():
        print("gpu_check: no CUDA GPU is visible to jax; nothing was run.", file=sys.stderr)
        print("  Run it on a machine with an NVIDIA GPU and jax[cuda12]==0.10.2.", file=sys.stderr)
        return 2
    from minipallas.tools.corpora.gpu_kernels import EXTRA
    from minipallas.tools.corpora.suite import KERNELS

    cases = [*KERNELS, *EXTRA]
    if options.kernels:
        wanted = set(options.kernels.split(","))
        cases = [c for c in cases if c.name in wanted]
    failures = skipped = 0
    for case in cases:
        skip = SKIP | (JIT_SKIP if options.jit else {})
        if case.name in skip:
            print(f"SKIP {case.name}: {skip[case.name]}")
            skipped += 1
            continue
        try:
            ok, detail = (check_jit if options.jit else check)(case)
        except Exception as e:  # report and go on: one kernel's failure is one line
            ok, detail = False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {case.name}: {detail}")
    print(f"{len(cases) - failures - skipped} passed, {failures} failed, {skipped} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
