"""What the TPU's compiler says of a case, on a machine without a TPU: libtpu compiles each
side's program for a v5e ahead of time (minipallas's kernels after the case's pipeline).

Upstream's program (every ``pallas_call`` through upstream's Mosaic lowering) refused is the
kernel's bug, of kind ``compile``: a block shape the TPU cannot tile, scratch past VMEM's
size, an op Mosaic lacks. minipallas's program (its own Mosaic modules) refused where
upstream's compiles is minipallas's. Without libtpu nothing is compiled, and the report says
so.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from minipallas.difftest.checks.bug import KernelBug
from minipallas.difftest.outputs import initial
from minipallas.difftest.report import Report
from minipallas.difftest.tpu import evaluate, minipallas_kernel, upstream_kernel
from minipallas.lowering.jax_private import state_discharge
from minipallas.lowering.libtpu import libtpu_available, tpu_device, tpu_sharding

SIDES = {"upstream": upstream_kernel, "minipallas": minipallas_kernel}


def compile_ahead(report: Report) -> dict[str, str | None] | None:
    """Per side, libtpu's refusal (its first line) or None when it compiles; None when libtpu
    is not installed."""
    if not libtpu_available() or report.jaxpr is None:
        return None
    closed = state_discharge.discharge_state(report.jaxpr)
    sharding = tpu_sharding()
    specs = [
        jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype, sharding=sharding)
        for a in initial(report.case.args)
    ]
    refusals: dict[str, str | None] = {}
    for side, kernel_rule in SIDES.items():
        if side == "minipallas":  # its kernels after the case's pipeline
            kernel_rule = functools.partial(kernel_rule, passes=report.case.passes)
        fn = functools.partial(evaluate, closed.jaxpr, closed.consts, kernel=kernel_rule)
        try:
            with jax.default_device(tpu_device()):  # upstream's lowering asks the device kind
                jax.jit(lambda *xs, fn=fn: fn(xs), out_shardings=sharding).lower(*specs).compile()
            refusals[side] = None
        except Exception as e:  # a refusal, whatever its class
            refusals[side] = f"{type(e).__name__}: {_first_line(e)}"
    return refusals


def compile_bug(refusals: dict[str, str | None] | None) -> KernelBug | None:
    """Upstream's refusal as the kernel's bug."""
    if not refusals or refusals.get("upstream") is None:
        return None
    return KernelBug(
        "compile",
        f"the TPU compiler refuses upstream's own lowering of the kernel: {refusals['upstream']}",
        fix="follow the TPU's block rules (the last two block dimensions divisible by 8 and "
        "128, or equal to the array's), keep blocks and scratch within VMEM "
        "(pltpu.CompilerParams(vmem_limit_bytes=...) raises the limit), use ops Mosaic has",
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    for line in text.splitlines():
        if "Mosaic failed to compile" in line or "error" in line.lower():
            return line.strip()[:300]
    return text.splitlines()[0][:300] if text else ""
