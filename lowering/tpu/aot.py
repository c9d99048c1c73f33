"""Ahead-of-time compilation of a kernel's Mosaic module by libtpu, on a machine with no TPU.

The MLIR verifier checks that a module is well formed; only Mosaic's own compiler says whether
a chip can run it (layouts, supported ops and types). libtpu (the ``libtpu`` package, a test
extra) holds that compiler and compiles for a TPU topology without opening a chip, so
``compile_check(kernel)`` gives, on any machine, the verdict the chip would give:

1. the kernel's Mosaic module (``lower_to_mosaic``, or the ``Lowered`` given);
2. the operands and results of the ``tpu_custom_call`` upstream Pallas would wrap it in:
   dynamic grid sizes (``int32`` scalars) first, then the scalar-prefetch arrays, then the
   inputs; ``bool`` arrays travel as ``int32``, as upstream's; aliases counted over them;
3. jax's ``as_tpu_kernel`` with upstream ``pallas_call``'s compiler defaults, compiled for one
   v5e chip (``libtpu.mosaic_compile``); a refusal is a ``MosaicCompileError`` naming
   Mosaic's message, its op and the user's line.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Kernel
from minipallas.lowering import TARGETS
from minipallas.lowering.lowered import Lowered
from minipallas.lowering.runtime.libtpu import MosaicRefusal, libtpu_available, mosaic_compile

__all__ = ["MosaicCompileError", "compile_check", "custom_call_types", "libtpu_available"]

Types = list[tuple[tuple[int, ...], np.dtype]]
# Mosaic names the failing op's location as the emitter wrote it: loc("op"("file":line:col)).
_LOCATION = re.compile(r'at location: loc\("([^"]+)"\("([^"]+)":(\d+):\d+\)\)')
_PREFIX = re.compile(r"^([A-Z_]+: )?Mosaic failed to compile TPU kernel: ")
_REPORT = "Please report a bug at"


class MosaicCompileError(PassError):
    """libtpu's Mosaic compiler refused a module that the MLIR verifier accepted."""


def compile_check(
    kernel: Kernel, lowered: Lowered | None = None, params: dict[str, Any] | None = None
) -> Any:
    """Compiles ``kernel``'s Mosaic module (``lowered``, else lowered now) with libtpu for a v5e
    chip; returns jax's ``Compiled``. ``params``: the custom call's compiler parameters, as
    ``as_tpu_kernel`` takes them (``platforms.mosaic.as_tpu_kernel_fields`` of a call's
    ``compiler_params``; upstream's defaults otherwise). A ``MosaicCompileError`` when Mosaic
    refuses it, a ``PassError`` when libtpu is not installed."""
    if not libtpu_available():
        raise PassError(
            "compiling a Mosaic module ahead of time needs libtpu, which is not installed",
            fix="pip install libtpu==0.0.42.1 (minipallas's test extra pins it)",
        )
    if lowered is None:
        lowered = TARGETS["tpu"].lower(kernel)
    limit = lowered.info.get("vmem_limit_bytes")
    if limit is not None and (params or {}).get("vmem_limit_bytes") is None:
        params = {**(params or {}), "vmem_limit_bytes": limit}  # as the custom call asks
    operands, results = custom_call_types(kernel)
    offset = len(kernel.dynamic_axes) + len(kernel.scalar_prefetch)
    aliases = [(offset + i, o) for i, o in kernel.input_output_aliases]
    try:
        return mosaic_compile(
            lowered.module, operands, results, name=kernel.name, aliases=aliases, params=params
        )
    except MosaicRefusal as e:
        raise _refusal(kernel, str(e)) from None


def custom_call_types(kernel: Kernel) -> tuple[Types, Types]:
    """The ``tpu_custom_call``'s operand and result (shape, dtype) pairs (step 2)."""
    operands = [((), np.dtype(np.int32))] * len(kernel.dynamic_axes)
    operands += [_memory(t.shape, t.dtype) for t in kernel.scalar_prefetch]
    operands += [_memory(s.array.shape, s.array.dtype) for s in kernel.in_specs]
    return operands, [_memory(t.shape, t.dtype) for t in kernel.out_types]


def _memory(shape: tuple[int, ...], dtype: str) -> tuple[tuple[int, ...], np.dtype]:
    return tuple(shape), np.dtype(np.int32) if dtype == "bool" else dtypes.to_numpy(dtype)


def _refusal(kernel: Kernel, message: str) -> MosaicCompileError:
    message = _PREFIX.sub("", message.split(_REPORT)[0].strip())
    where = _LOCATION.search(message)
    op, loc = (where.group(1), f"{where.group(2)}:{where.group(3)}") if where else (None, None)
    return MosaicCompileError(
        f"Mosaic's compiler (libtpu) refuses kernel '{kernel.name}': {message}",
        op=op,
        loc=loc,
        fix="this module passes the MLIR verifier, so this is a gap in minipallas's TPU "
        "lowering rules (or a form Mosaic cannot run); please report it",
    )
