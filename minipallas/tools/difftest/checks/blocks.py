"""Static checks of a kernel's blocks, exact because they look at every grid point.

1. Every windowed operand's index map, at every grid point, with the scalar-prefetch tables as
   given: a table read past its end, or int32 arithmetic that wraps, is reported at the map's
   op; a block that starts before its array or past its end is ``out-of-bounds`` (the DMA
   faults and halts the core, or moves other memory). A partial last block is legal.
2. Points of a "parallel" axis (the axes a multi-core chip splits among its cores) that write
   the same output block: each core writes back its own copy, so the last to finish wins and
   an accumulation loses the others' part. A one-core v5e runs them in order and hides it: a
   ``race``, latent.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from minipallas.ir.errors import MiniPallasError
from minipallas.ir.interpret.engine import Interpreter, Ref
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.types import ANY
from minipallas.tools.difftest.checks.bug import KernelBug
from minipallas.tools.difftest.checks.rules import checked_rules

PARALLEL = ("parallel", "core_parallel")


@dataclass(frozen=True)
class Operands:
    """A kernel's operands as its programs take them: dynamic grid sizes, scalar-prefetch
    tables, inputs."""

    grid: tuple[int, ...]
    prefetch: tuple[np.ndarray, ...]
    inputs: tuple[np.ndarray, ...]

    @staticmethod
    def of(kernel: Kernel, operands: Sequence[Any]) -> Operands:
        n_dyn, n_pre = len(kernel.dynamic_axes), len(kernel.scalar_prefetch)
        sizes = iter(int(np.asarray(s)) for s in operands[:n_dyn])
        grid = tuple(next(sizes) if n is None else n for n in kernel.grid)
        prefetch = tuple(np.array(p, copy=True) for p in operands[n_dyn : n_dyn + n_pre])
        return Operands(grid, prefetch, tuple(np.asarray(x) for x in operands[n_dyn + n_pre :]))

    def points(self) -> Iterator[tuple[int, ...]]:
        """The grid points in the order the chip runs them (row-major)."""
        return itertools.product(*(range(n) for n in self.grid))


def windowed(kernel: Kernel) -> list[tuple[str, TracedBlockSpec]]:
    """The operands the pipeline copies block by block, named ("input 0", "output 1")."""
    specs = [(f"input {k}", s) for k, s in enumerate(kernel.in_specs)]
    specs += [(f"output {k}", s) for k, s in enumerate(kernel.out_specs)]
    return [(name, s) for name, s in specs if s.memory_space != ANY]


def starts(spec: TracedBlockSpec, index: Sequence[int]) -> list[int]:
    """Where the block begins in each dimension (in the padded array's elements)."""
    return [
        i if b is None or d in spec.element_dims else i * b
        for d, (i, b) in enumerate(zip(index, spec.block_shape, strict=True))
    ]


class IndexMaps:
    """Evaluates index maps at grid points with the checks' rules (scalar-prefetch tables read
    in range, no int32 wrap); an error becomes a ``KernelBug``."""

    def __init__(self, kernel: Kernel, operands: Operands) -> None:
        self.kernel = kernel
        self.grid = operands.grid
        self.tables = [Ref(t, np.ones(t.shape, np.bool_)) for t in operands.prefetch]
        names = {t.__array_interface__["data"][0]: f"scalar prefetch {k}"
                 for k, t in enumerate(operands.prefetch)}  # fmt: skip
        self.rules = checked_rules(
            lambda a: names.get(a.__array_interface__["data"][0], ""), lambda a: True
        )

    def index(self, spec: TracedBlockSpec, point: tuple[int, ...]) -> tuple[int, ...]:
        interp = Interpreter(checks=True, program_ids=point, grid=self.grid)
        interp.rules = self.rules
        ids = [np.int32(i) for i in point]
        with np.errstate(all="ignore"):
            return tuple(int(v) for v in interp.run(spec.index_map.body, [*ids, *self.tables]))


def block_bugs(kernel: Kernel, operands: Operands) -> list[KernelBug]:
    """The blocks' bugs (module docstring), the first of each operand."""
    maps, bugs = IndexMaps(kernel, operands), []
    outputs: dict[str, list[tuple[tuple[int, ...], tuple[int, ...]]]] = {}
    for name, spec in windowed(kernel):
        indices = []  # (point, block index), each map evaluated once per point
        bug = _bounds(kernel, name, spec, maps, operands, indices)
        if bug is not None:
            bugs.append(bug)
        elif name.startswith("output"):
            outputs[name] = indices
    if not bugs:
        bugs += _parallel_writes(kernel, outputs)
    return bugs


def _bounds(
    kernel: Kernel,
    name: str,
    spec: TracedBlockSpec,
    maps: IndexMaps,
    operands: Operands,
    indices: list[tuple[tuple[int, ...], tuple[int, ...]]],
) -> KernelBug | None:
    """The first block of ``spec`` outside its array; each point's block index is added to
    ``indices`` on the way."""
    for point in operands.points():
        try:
            index = maps.index(spec, point)
        except MiniPallasError as e:
            return from_error(e, kernel, point, f"index map of {name}")
        indices.append((point, index))
        for d, start in enumerate(starts(spec, index)):
            extent = spec.array.shape[d] + sum(spec.pads[d])
            if 0 <= start < extent:
                continue
            side = "before its start" if start < 0 else f"past its {extent} elements"
            return KernelBug(
                "out-of-bounds",
                f"block index {list(index)} starts at element {start} of dimension {d}, {side}",
                kernel=kernel.name,
                point=point,
                buffer=name,
                fix="make the index map stay within the array (a grid of "
                "ceil(size / block) along that axis, indices from 0)",
            )
    return None


def _parallel_writes(
    kernel: Kernel, outputs: dict[str, list[tuple[tuple[int, ...], tuple[int, ...]]]]
) -> list[KernelBug]:
    """Per output (its points' block indices), two points apart on a parallel axis that
    write one block."""
    semantics = kernel.dimension_semantics or ()
    axes = [a for a, s in enumerate(semantics) if s in PARALLEL]
    bugs = []
    for name, indices in outputs.items() if axes else ():
        owner: dict[tuple[int, ...], tuple[int, ...]] = {}
        for point, index in indices:
            first = owner.setdefault(index, point)
            if any(first[a] != point[a] for a in axes):
                bugs.append(
                    KernelBug(
                        "race",
                        f"grid points {list(first)} and {list(point)} differ on parallel "
                        f"axes {axes} but write the same block {list(index)}",
                        kernel=kernel.name,
                        point=point,
                        buffer=name,
                        fix="give each point of a parallel axis its own output block, or mark "
                        "the axis 'arbitrary' (dimension_semantics)",
                        latent=True,
                    )
                )
                break
    return bugs


# which error class means which kind of bug; the first match wins
_KINDS = (
    ("Overflow", "overflow"),
    ("DeadlockError", "semaphore"),
    ("never written", "undefined-read"),
    ("async copy", "dma"),
    ("out of range", "out-of-bounds"),
)


def from_error(
    e: MiniPallasError, kernel: Kernel, point: tuple[int, ...] | None, buffer: str = ""
) -> KernelBug:
    """The ``KernelBug`` an interpreter error at ``point`` means (its class and message); an
    error that means none is re-raised: the checks cannot judge that kernel."""
    text = f"{type(e).__name__} {e.message}"
    kind = next((k for key, k in _KINDS if key in text), None)
    if kind is None:
        raise e
    named = getattr(e, "buffer", "") or ""
    return KernelBug(
        kind,
        e.message,
        kernel=kernel.name,
        where=str(e.loc) if e.loc else "",
        point=point,
        buffer=named or buffer,
        fix=e.fix or "",
    )
