"""The TPU's pipeline, run on the CPU: a kernel's grid as the chip moves its blocks.

Upstream's interpret mode and minipallas's CPU path view each block as a window of a whole
array, so a kernel sees what every earlier grid point wrote and a partial block reads a
defined fill. The chip does neither, and that is where kernels go wrong. ``run_pipeline``:

1. gives each windowed operand one VMEM buffer of its block's shape. At each grid point
   (row-major), an input whose block index changed is copied in: the array's elements, and
   past its end the ``padding`` fill (the chip's padding is whatever VMEM held). An output
   whose block index changed has its previous block written back, whole, and its buffer
   starts undefined: Pallas TPU never loads an output block;
2. allocates scratch once, undefined, kept from point to point (semaphores start at 0);
3. hands ANY-space operands over whole: the body copies what it wants;
4. runs the body with the reference interpreter under ``uninitialized="error"`` and
   ``checks=True`` (``checks.rules``: no int32 wrap, every error names its buffer), tracking
   async copies across grid points; the first error is the ``KernelBug``;
5. with ``split``, makes scratch undefined whenever a "parallel" coordinate changes: what a
   core that did not run the earlier points would see.

``padding`` gives each input's fill; with ``strict=k`` reading input k's padding is an error
instead, which names the op where the padding enters the computation.

It returns the outputs and, per output, the elements the kernel defined (written back from
what the body wrote, or an aliased output's input where no block landed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.interpret.engine import Interpreter, Ref
from minipallas.ir.interpret.rules.dma import InFlight
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.types import ANY, TPU_SMEM, initial_value, is_semaphore
from minipallas.tools.difftest.checks.blocks import (
    PARALLEL,
    IndexMaps,
    Operands,
    from_error,
    starts,
)
from minipallas.tools.difftest.checks.bug import KernelBug
from minipallas.tools.difftest.checks.rules import checked_rules

Fill = Callable[[str], np.generic]  # a dtype's fill value (``undefined.high_fill``)


@dataclass
class Result:
    """The outputs, what of them is defined, and the bug that stopped the run (or None)."""

    outputs: list[np.ndarray] = field(default_factory=list)
    defined: list[np.ndarray] = field(default_factory=list)
    bug: KernelBug | None = None


class _Block:
    """One operand's VMEM buffer: its data and written mask, shaped as the body's ref, over
    storage of the whole block shape (squeezed dimensions 1), and the block it holds."""

    def __init__(self, spec: TracedBlockSpec, dtype: np.dtype) -> None:
        self.spec = spec
        self.full = tuple(1 if b is None else b for b in spec.block_shape)
        self.data = np.zeros(self.full, dtype)
        self.written = np.zeros(self.full, np.bool_)
        self.index: tuple[int, ...] | None = None

    def ref(self) -> Ref:
        shape = self.spec.ref_type.shape
        return Ref(self.data.reshape(shape), self.written.reshape(shape))

    def region(self) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """The part of the block inside the array: (in the block, in the array)."""
        inside, there = [], []
        for d, s in enumerate(starts(self.spec, self.index)):
            low, n = self.spec.pads[d][0], self.spec.array.shape[d]
            first, last = max(low - s, 0), min(self.full[d], low + n - s)
            last = max(last, first)
            inside.append(slice(first, last))
            there.append(slice(s + first - low, s + last - low))
        return tuple(inside), tuple(there)


class _Run:
    """One pipelined run (module docstring)."""

    def __init__(
        self, kernel: Kernel, ops: Operands, padding: list[Fill], split: bool, strict: int | None
    ) -> None:
        # a run of its own of the scalar-prefetch tables: they live in SMEM for the whole grid,
        # so what the body writes there the later points and index maps see
        ops = dataclasses.replace(ops, prefetch=tuple(t.copy() for t in ops.prefetch))
        self.kernel, self.ops, self.padding, self.split = kernel, ops, padding, split
        self.strict = strict
        self.maps = IndexMaps(kernel, ops)
        aliased = {o: i for i, o in kernel.input_output_aliases}
        self.outputs, self.defined = [], []
        for k, spec in enumerate(kernel.out_specs):
            dtype = dtypes.to_numpy(spec.array.dtype)
            if k in aliased:
                self.outputs.append(np.array(ops.inputs[aliased[k]], dtype, copy=True))
                self.defined.append(np.ones(spec.array.shape, np.bool_))
            else:
                self.outputs.append(np.full(spec.array.shape, initial_value(spec.array), dtype))
                self.defined.append(np.zeros(spec.array.shape, np.bool_))
        self.names: list[tuple[np.ndarray, str]] = []
        self.prefetch = [self._named(Ref(t, np.ones(t.shape, np.bool_)), f"scalar prefetch {k}")
                         for k, t in enumerate(ops.prefetch)]  # fmt: skip
        self.blocks: dict[str, _Block] = {}
        self.inputs = [self._operand(f"input {k}", s, x) for k, (s, x) in
                       enumerate(zip(kernel.in_specs, ops.inputs, strict=True))]  # fmt: skip
        self.outs = [self._operand(f"output {k}", s, None) for k, s in enumerate(kernel.out_specs)]
        self.scratch = [self._named(self._allocate(t), f"scratch {k}")
                        for k, t in enumerate(kernel.scratch_types)]  # fmt: skip
        smem = [ref.data for ref in self.prefetch]
        smem += [r.data for r, t in zip(self.scratch, kernel.scratch_types, strict=True)
                 if t.memory_space == TPU_SMEM]  # fmt: skip
        self.rules = checked_rules(
            self._name_of, lambda a: any(np.may_share_memory(a, b) for b in smem)
        )
        self.copies = InFlight()
        self.visited: dict[str, set[tuple[int, ...]]] = {}

    def _named(self, ref: Ref, name: str) -> Ref:
        self.names.append((ref.data, name))
        return ref

    def _name_of(self, data: np.ndarray) -> str:
        return next((n for base, n in self.names if np.may_share_memory(data, base)), "")

    def _allocate(self, t: Any) -> Ref:
        data = np.full(t.shape, initial_value(t), dtypes.to_numpy(t.dtype))
        return Ref(data, np.full(t.shape, is_semaphore(t)))  # a count is always there to read

    def _operand(self, name: str, spec: TracedBlockSpec, value: np.ndarray | None) -> Ref | None:
        if spec.memory_space == ANY:  # whole: an input as given, an output as it stands
            if value is not None:
                return self._named(
                    Ref(np.array(value, copy=True), np.ones(value.shape, bool)), name
                )
            k = int(name.split()[1])
            return self._named(Ref(self.outputs[k], self.defined[k]), name)
        block = self.blocks[name] = _Block(spec, dtypes.to_numpy(spec.array.dtype))
        self.names.append((block.data, name))
        return None

    # -- the grid -------------------------------------------------------------------------

    def run(self) -> Result:
        previous: tuple[int, ...] | None = None
        semantics = self.kernel.dimension_semantics or ()
        axes = [a for a, s in enumerate(semantics) if s in PARALLEL]
        point: tuple[int, ...] | None = None
        try:
            for point in self.ops.points():
                if (
                    self.split
                    and previous is not None
                    and any(point[a] != previous[a] for a in axes)
                ):
                    for ref, t in zip(self.scratch, self.kernel.scratch_types, strict=True):
                        if not is_semaphore(t):
                            ref.written[...] = False
                self._step(point)
                previous = point
            self._write_back()
            point = None  # a copy never waited for is the whole kernel's
            probe = Interpreter(checks=True)
            probe.copies = self.copies
            self.copies.finish(probe)
        except MiniPallasError as e:
            return Result(
                self.outputs, self.defined, self._explained(from_error(e, self.kernel, point))
            )
        return Result(self.outputs, self.defined, self._semaphores_left())

    def _semaphores_left(self) -> KernelBug | None:
        """A semaphore not back at 0 when the kernel ends: the chip checks them there."""
        for k, (ref, t) in enumerate(zip(self.scratch, self.kernel.scratch_types, strict=True)):
            if is_semaphore(t) and np.any(ref.data != 0):
                at = [int(i) for i in np.argwhere(ref.data != 0)[0]]
                return KernelBug(
                    "semaphore",
                    f"the kernel ends with semaphore {at} at {int(ref.data[tuple(at)])}, not 0: "
                    "a signal or copy nothing waited for (the TPU checks its semaphores when a "
                    "kernel ends)",
                    kernel=self.kernel.name,
                    buffer=f"scratch {k}",
                    fix="wait once for every signal and every copy (with the amount signalled)",
                )
        return None

    def _explained(self, bug: KernelBug) -> KernelBug:
        """An undefined read says what the memory was, and how a kernel defines it first."""
        if bug.kind != "undefined-read":
            return bug
        kind = bug.buffer.split(" ")[0]
        block = self.blocks.get(bug.buffer)
        if kind == "scratch":
            what, fix = (
                "scratch starts as whatever VMEM held",
                (
                    "write it before reading, e.g. initialize it under "
                    "pl.when(pl.program_id(axis) == 0) of the axis it accumulates over"
                ),
            )
        elif block is not None and block.index in self.visited.get(bug.buffer, ()):
            what = (
                f"block {list(block.index)} was written back at an earlier grid point, and "
                "the TPU never loads an output block"
            )
            fix = (
                "visit each output block in one run of consecutive grid points (the "
                "reduction axis last), or accumulate in scratch"
            )
        elif kind == "output":
            what = ("an output block starts as whatever VMEM held (the TPU never loads it, even "
                    "an aliased one)")  # fmt: skip
            fix = ("write the block before reading it, e.g. under pl.when(k == 0); read an "
                   "aliased output's old values from its input")  # fmt: skip
        else:
            return bug
        return dataclasses.replace(bug, message=f"{bug.message}: {what}", fix=fix)

    def _step(self, point: tuple[int, ...]) -> None:
        args = [ref if ref is not None else self._load(f"input {k}", k, point)
                for k, ref in enumerate(self.inputs)]  # fmt: skip
        args += [ref if ref is not None else self._output(f"output {k}", point)
                 for k, ref in enumerate(self.outs)]  # fmt: skip
        interp = Interpreter("error", True, point, self.ops.grid)
        interp.rules, interp.copies = self.rules, self.copies
        with np.errstate(all="ignore"):
            interp.run(self.kernel.body.body, [*self.prefetch, *args, *self.scratch])

    def _load(self, name: str, k: int, point: tuple[int, ...]) -> Ref:
        block = self.blocks[name]
        index = self.maps.index(block.spec, point)
        if index != block.index:
            block.index = index
            block.data[...] = self.padding[k](block.spec.array.dtype)
            inside, there = block.region()
            block.data[inside] = self.ops.inputs[k][there]
            block.written[...] = k != self.strict  # the padding reads as garbage, not an error
            block.written[inside] = True
        return block.ref()

    def _output(self, name: str, point: tuple[int, ...]) -> Ref:
        block, k = self.blocks[name], int(name.split()[1])
        index = self.maps.index(block.spec, point)
        if index != block.index:
            if block.index is not None:
                self._store(k, block)
            block.index = index
            block.written[...] = False
        return block.ref()

    def _store(self, k: int, block: _Block) -> None:
        inside, there = block.region()
        self.outputs[k][there] = block.data[inside]
        self.defined[k][there] = block.written[inside]
        self.visited.setdefault(f"output {k}", set()).add(block.index)

    def _write_back(self) -> None:
        for k in range(len(self.kernel.out_specs)):
            block = self.blocks.get(f"output {k}")
            if block is not None and block.index is not None:
                self._store(k, block)


def run_pipeline(
    kernel: Kernel,
    operands: Operands,
    padding: list[Fill],
    split: bool = False,
    strict: int | None = None,
) -> Result:
    """The kernel run as the TPU's pipeline runs it (module docstring)."""
    return _Run(kernel, operands, padding, split, strict).run()
