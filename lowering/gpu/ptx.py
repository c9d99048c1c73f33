"""Compiling an emitted Triton module to PTX and a cubin with the real Triton compiler.

No GPU is needed: the ``triton`` package (3.9, a test dependency; its wheel ships ``ptxas``)
compiles a ``.ttir`` file for a ``GPUTarget("cuda", arch, 32)`` through TTGIR, LLVM IR and PTX
to a cubin on the CPU, and it reads the text jaxlib's Triton bindings print. So every module
minipallas emits is checked by the compiler that would run it, not only by the verifier.

Floating-point contraction is off (``fp_fusion=False``): ``a * b + c`` stays two roundings, as
the reference interpreter computes it.
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from minipallas.ir.core import Function
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Kernel
from minipallas.lowering import gpu
from minipallas.lowering.lowered import Lowered
from minipallas.lowering.runtime.triton_call import CUDA


@dataclass(frozen=True)
class CompiledKernel:
    """What Triton made of a module: ``ptx`` text, ``cubin`` bytes, the intermediate ``ttgir``
    and ``llir`` text, and the launch facts (``name``, ``num_warps``, ``shared`` memory bytes)."""

    name: str
    ptx: str
    cubin: bytes
    ttgir: str
    llir: str
    num_warps: int
    shared: int

    def as_text(self, debug_info: bool = True) -> str:
        """The PTX, as ``Lowered.as_text`` gives a module's text (PTX keeps no locations)."""
        return self.ptx


def emit_ptx(
    kernel: Kernel,
    body: Function,
    *,
    num_warps: int = CUDA.num_warps,
    num_stages: int = CUDA.num_stages,
) -> CompiledKernel:
    """The target table's ``ptx`` emitter: the Triton module of ``body``, compiled (the
    options are ``pallas_call``'s Triton ``compiler_params``; by default upstream's CUDA launch,
    ``triton_call.LAUNCH``)."""
    return compile_ptx(gpu.emit_triton(kernel, body), num_warps=num_warps, num_stages=num_stages)


def compile_ptx(
    lowered: Lowered | str,
    *,
    arch: int = 90,
    num_warps: int = CUDA.num_warps,
    num_stages: int = CUDA.num_stages,
) -> CompiledKernel:
    """Compiles a lowered kernel (or Triton IR text) for ``sm_<arch>``; raises ``PassError``
    with Triton's message when it does not compile."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
    except ImportError:
        raise PassError(
            "compiling to PTX needs the 'triton' package",
            fix="pip install 'triton==3.9.0' (it is in minipallas's test extra)",
        ) from None
    text = lowered if isinstance(lowered, str) else lowered.as_text(debug_info=True)
    options = {"num_warps": num_warps, "num_stages": num_stages, "fp_fusion": False}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.ttir"
        path.write_text(text)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the FP-fusion default notice
                kernel = triton.compile(
                    str(path), target=GPUTarget("cuda", arch, 32), options=options
                )
        except Exception as e:  # Triton raises plain RuntimeErrors (and others) from C++
            raise PassError(
                f"Triton could not compile the module to PTX: {type(e).__name__}: {e}",
                fix="this is a bug in minipallas's Triton rules, or a Triton limitation",
            ) from None
    return CompiledKernel(
        name=kernel.name,
        ptx=kernel.asm["ptx"],
        cubin=kernel.asm["cubin"],
        ttgir=kernel.asm["ttgir"],
        llir=kernel.asm["llir"],
        num_warps=kernel.metadata.num_warps,
        shared=kernel.metadata.shared,
    )
