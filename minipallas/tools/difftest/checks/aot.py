"""What the TPU's compiler says of a case, on a machine without a TPU: libtpu compiles each
side's program for a v5e ahead of time (minipallas's kernels after the case's pipeline).

Upstream's program (every ``pallas_call`` through upstream's Mosaic lowering) refused is the
kernel's bug, of kind ``compile``: a block shape the TPU cannot tile, scratch past VMEM's
size, an op Mosaic lacks. minipallas's program (its own Mosaic modules) refused where
upstream's compiles is minipallas's: by libtpu, or, before libtpu sees it, by one of
minipallas's own checks of a TPU kernel (a ``MiniPallasError``, named after the check that
raised it, e.g. ``check_output_reads``). Without libtpu nothing is compiled, and the report says
so.
"""

from __future__ import annotations

import functools
from pathlib import Path

import jax
import numpy as np

from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.compat.jax_private import state_discharge
from minipallas.lowering.runtime.libtpu import libtpu_available, tpu_device, tpu_sharding
from minipallas.tools.difftest.checks.bug import KernelBug
from minipallas.tools.difftest.outputs import initial
from minipallas.tools.difftest.report import Report
from minipallas.tools.difftest.tpu import evaluate, minipallas_kernel, upstream_kernel

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
            refusals[side] = refusal(e)
    return refusals


def refusal(e: BaseException) -> str:
    """Who refused and why, in a line: libtpu, or minipallas's own check (``own_check``)."""
    text = f"{type(e).__name__}: {_first_line(e)}"
    if isinstance(e, MiniPallasError):
        return f"minipallas's own check {own_check(e)} refuses it before libtpu: {text}"
    return f"libtpu refuses it: {text}"


def own_check(e: BaseException) -> str:
    """The minipallas function that raised ``e``, as ``name (file)``: the innermost frame named
    ``check_*``, else the innermost frame."""
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    if not frames:
        return "(unknown)"
    code = next((c for c in reversed(frames) if c.co_name.startswith("check_")), frames[-1])
    return f"{code.co_name} ({Path(code.co_filename).name})"


def compile_bug(refusals: dict[str, str | None] | None) -> KernelBug | None:
    """Upstream's refusal as the kernel's bug."""
    if not refusals or refusals.get("upstream") is None:
        return None
    return KernelBug(
        "compile",
        "the TPU compiler refuses upstream's own lowering of the kernel: "
        + refusals["upstream"].removeprefix("libtpu refuses it: "),
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
