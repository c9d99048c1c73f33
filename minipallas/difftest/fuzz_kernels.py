"""``python -m minipallas.difftest.fuzz_kernels``: random kernels, minipallas against upstream.

Each kernel is drawn by ``minipallas.generate.kernels.random_kernel`` and run three ways on
the same inputs: minipallas's CPU program (independent grid points batched where the plan
allows), minipallas's loop program (``kernels.grid``), and upstream
``pallas_call(..., interpret=True)``. All three must agree bit for bit (the kernels use no
transcendental functions, and upstream's interpret mode is the reference). A disagreement is
printed with the kernel's description and the first differing element.

The campaign runs until ``--count`` kernels or ``--seconds`` have passed and ends with a
summary: kernels checked, how many ran batched, disagreements, kernels/second. The exit code
is 1 if any kernel disagreed.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minipallas.generate.check import same_bits
from minipallas.generate.choices import RandomChoices
from minipallas.generate.kernels import KernelSpec, kernel_inputs, minipallas_call, random_kernel


@dataclass
class Summary:
    kernels: int = 0
    batched: int = 0
    disagreements: list[str] = field(default_factory=list)


def upstream_call(spec: KernelSpec) -> Any:  # noqa: ANN401 - a jitted function
    """The kernel as upstream ``pl.pallas_call(..., interpret=True)``, jitted."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    ns = types.SimpleNamespace(
        program_id=pl.program_id,
        when=pl.when,
        fori_loop=jax.lax.fori_loop,
        run_scoped=pl.run_scoped,
        VMEM=pltpu.VMEM,
        zeros=lambda shape: jnp.zeros(shape, jnp.float32),
        float32=jnp.float32,
    )
    call = pl.pallas_call(
        spec.body(ns),
        out_shape=jax.ShapeDtypeStruct(spec.output.shape, jnp.float32),
        grid=spec.grid,
        in_specs=[pl.BlockSpec(spec.block, o.index_map) for o in spec.inputs],
        out_specs=pl.BlockSpec(spec.block, spec.output.index_map),
        scratch_shapes=[pltpu.VMEM(spec.ref_shape, jnp.float32)] if spec.scratch else [],
        interpret=True,
    )
    return jax.jit(call)


def check(spec: KernelSpec, seed: int) -> tuple[bool, str | None]:
    """(whether minipallas ran it batched, the disagreement if any) for one kernel."""
    from minipallas.compiled import compile
    from minipallas.kernels.grid import grid_program
    from minipallas.kernels.vectorized_grid import vectorized_grid_plan

    args = kernel_inputs(spec, seed)
    call = minipallas_call(spec)
    kernel = call.trace(*args)
    batched = vectorized_grid_plan(kernel) is not None
    expected = np.asarray(upstream_call(spec)(*args))
    ways = {"cpu program": call(*args), "loop program": compile(grid_program(kernel))(*args)[0]}
    for way, got in ways.items():
        if not same_bits(got, expected):
            bad = np.flatnonzero(~np.isclose(got, expected, rtol=0, atol=0, equal_nan=True))
            first = int(bad[0]) if bad.size else 0
            return batched, (
                f"{way} differs from upstream at flat index {first}: "
                f"{np.ravel(got)[first]} vs {np.ravel(expected)[first]}\n  {spec.describe()}"
            )
    return batched, None


def campaign(count: int, seconds: float, seed: int, out: Any = sys.stdout) -> Summary:  # noqa: ANN401
    rng = random.Random(seed)
    summary = Summary()
    deadline = time.monotonic() + seconds
    while summary.kernels < count and time.monotonic() < deadline:
        spec = random_kernel(RandomChoices(rng))
        batched, problem = check(spec, rng.randrange(2**16))
        summary.kernels += 1
        summary.batched += batched
        if problem:
            summary.disagreements.append(problem)
            print(f"DISAGREEMENT: {problem}", file=out)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="kernels to check")
    parser.add_argument("--seconds", type=float, default=600, help="stop after this long")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.monotonic()
    s = campaign(args.count, args.seconds, args.seed)
    elapsed = time.monotonic() - start
    print(
        f"{s.kernels} kernels ({s.batched} ran batched), {len(s.disagreements)} disagreements, "
        f"{s.kernels / elapsed:.1f} kernels/s"
    )
    return 1 if s.disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
