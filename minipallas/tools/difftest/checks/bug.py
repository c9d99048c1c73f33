"""A bug in the user's kernel, as the checks report it: what the TPU would do, where, and a fix.

``KernelBug.kind`` is one of ``BUG_KINDS``, each named for what goes wrong in the kernel and
glossed with what the chip shows for it (measured on a v5e with ``bench/chip/tpu_bugs.py``). A bug
is ``latent`` when a one-core v5e hides it (a race among the cores of a multi-core chip).
"""

from __future__ import annotations

from dataclasses import dataclass

BUG_KINDS: dict[str, str] = {
    "out-of-bounds": "a block or index outside its buffer: the DMA may halt the core, or read "
    "and write other memory",
    "undefined-read": "reads memory nothing wrote (scratch, an output block, a partial "
    "block's padding): values that change from run to run",
    "unwritten-output": "output elements nothing writes: the chip returns whatever HBM held",
    "dma": "an async copy's buffer used before its wait, or a copy never waited for: values "
    "that vary",
    "semaphore": "a wait nothing can satisfy: the kernel hangs",
    "race": "points of a 'parallel' grid axis share an output block or scratch: wrong on a "
    "chip that splits the axis among its cores",
    "compile": "the TPU compiler refuses the kernel",
    "overflow": "int32 arithmetic wraps: an index or address lands elsewhere",
}


@dataclass(frozen=True)
class KernelBug:
    """One bug: its ``kind``, a sentence, the op's ``where`` (file:line), the grid ``point``,
    the ``buffer`` ("input 0", "output 1", "scratch 0", "scalar prefetch 0") and a ``fix``."""

    kind: str
    message: str
    kernel: str = ""
    where: str = ""
    point: tuple[int, ...] | None = None
    buffer: str = ""
    fix: str = ""
    latent: bool = False

    def __str__(self) -> str:
        parts = [f"{self.kind}: {self.message}"]
        context = [
            f"kernel {self.kernel}" if self.kernel else "",
            f"grid point {list(self.point)}" if self.point is not None else "",
            self.buffer,
            f"at {self.where}" if self.where else "",
        ]
        if any(context):
            parts.append("(" + ", ".join(c for c in context if c) + ")")
        if self.latent:
            parts.append("[latent on a one-core chip]")
        if self.fix:
            parts.append(f"fix: {self.fix}")
        return " ".join(parts)
