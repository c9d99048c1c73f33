"""The machine facts a verdict rests on: which CPU ran XLA's side, and what the envelope
assumed about it.

XLA:CPU picks its dot and reduction kernels per CPU (AVX-512 or AVX2, FMA, YNNPACK's size
thresholds), so a value ``compile`` computed belongs to the machine that computed it. The envelope
assumes none of that: sum and dot orders are bounded from the terms' magnitudes for every order
(``minipallas/tools/envelope/reorder.py``), FMAs are taken or not at random. A report names the CPU
anyway, so a verdict read on another machine says where it came from.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

import jax

# the instruction sets that change which kernels XLA:CPU picks, as /proc/cpuinfo spells them
FLAGS = ("avx512f", "avx512_bf16", "amx_tile", "avx2", "fma")
ASSUMED = "any sum or dot order within min(2 sqrt n, 2(n-1)) u sum|x_i|, FMA or not"


@dataclass(frozen=True)
class Machine:
    """A CPU as the verdict saw it: model name, architecture, which of ``FLAGS`` it has."""

    model: str
    arch: str
    flags: tuple[str, ...]
    jaxlib: str

    def __str__(self) -> str:
        has = " ".join(f for f in FLAGS if f in self.flags) or "none of " + " ".join(FLAGS)
        return (
            f"{self.model} ({self.arch}: {has}), jaxlib {self.jaxlib}; "
            f"the envelope assumes no CPU: {ASSUMED}"
        )


def here(cpuinfo: Path = Path("/proc/cpuinfo")) -> Machine:
    """This machine (``platform``'s answer where there is no ``/proc/cpuinfo``)."""
    fields: dict[str, str] = {}
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    model = fields.get("model name") or platform.processor() or "unknown CPU"
    flags = tuple(f for f in fields.get("flags", "").split() if f in FLAGS)
    return Machine(model, platform.machine(), flags, jax.lib.__version__)
