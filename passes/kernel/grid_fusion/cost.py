"""The time a grid takes on a TPU, as grid-step fusion weighs its choices.

A Pallas TPU kernel runs its grid as a pipeline: while a step computes, the blocks of the next
one are copied in and those of the last one out. So the model is

    time = steps * step_s + max(bytes moved / HBM rate, compute)
           + (the first step's inputs + the last step's outputs) / HBM rate
    compute = max(dots, VPU work) + min(dots, VPU work) / unrolled copies of the body

the fixed cost of a step (DMA bookkeeping, waits, the step's prologue) paid on top of the
larger of the copies and the compute, which overlap, plus the pipeline's fill and drain,
which do not. A block is copied only at a step whose block index differs from the step
before's, so a block that stays put along the inner axes is copied once per run of them
(``fetches``). A dot of ``m`` rows runs at ``m / (m + dot_rows)`` of the MXU's rate: the MXU
loads each 128x128 tile of the right side's weights before it streams the rows through it, so
four 128x128x128 dots cost more than one 512x128x128 (``dot_rows``: what a load costs, in rows).

The MXU and the VPU overlap as far as a step holds independent copies of the body (fused
sub-steps, unrolled), while the copies spill at most ``overlap_bytes`` of values all told.
A value larger than ``register_bytes`` lives in VMEM: its elementwise ops also store and load
it (``vmem_traffic_s``), and it takes VMEM room, in every unrolled copy when values carried
across the copies (``carried``) keep them alive together.

VMEM is Mosaic's default scope (``vmem_bytes``) unless the fused kernel asks for more, up to
``vmem_most`` (``vmem_limit``).

Fusion and widening keep the work (the same ops on the same elements) and change the rest:
fewer steps, bigger blocks copied fewer times, fewer and larger dots, more VMEM. ``Plan`` is
what the model reads of a kernel, so that a choice is weighed without building its kernel.
The constants are the v5e's (``V5E``), each with where it was measured.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

from minipallas.ir import dtypes
from minipallas.ir.core import Block, Op, Value
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.types import ArrayType
from minipallas.passes.kernel.grid_fusion.carried import CARRIED_BYTES, threaded
from minipallas.passes.kernel.grid_fusion.index_maps import STAYS, motion
from minipallas.passes.kernel.grid_fusion.looped import INDEX
from minipallas.passes.kernel.grid_fusion.vmem import tiled_bytes

__all__ = [
    "MOSAIC_VMEM",
    "V5E",
    "Chip",
    "Cost",
    "Operand",
    "Plan",
    "body_ops",
    "kernel_cost",
    "plan_of",
    "vmem_limit",
]


LIVE_SPILLED = 1  # the largest spilled value
MOSAIC_VMEM = 2 << 20  # of a scope's VMEM, what Mosaic keeps for its own (internal scratch)


@dataclasses.dataclass(frozen=True)
class Chip:
    """What a grid costs on one chip: the model's constants."""

    name: str
    step_s: float  # the fixed cost of one grid step
    guard_s: float  # a sub-step that may lie past the axis's end, tested at every step
    hbm_bytes_s: float  # blocks copied between HBM and VMEM, streaming
    # by a dot's operand dtype: its flops per second, and what loading the MXU's weights costs
    # in rows streamed through it
    mxu: tuple[tuple[str, float, int], ...]
    vpu_elems_s: float  # elements an elementwise op or a reduction goes through per second
    register_bytes: int  # a body value larger than this lives in VMEM, not in registers
    vmem_traffic_s: float  # bytes per second such values are stored and loaded at
    overlap_bytes: int  # unrolled copies overlap the MXU and the VPU while spilling this, at most
    # the double-buffered windows, the scratch and spilled values: what fits in Mosaic's
    # default scope, and the most a fused kernel asks the custom call for (``vmem_limit``)
    vmem_bytes: int
    vmem_most: int
    unrolled_ops: int  # the most ops the sub-steps of one fused step unroll, all told

    def mxu_rate(self, dtype: str) -> tuple[float, int]:
        rates = {d: (r, rows) for d, r, rows in self.mxu}
        return rates.get(dtype, rates["float32"])

    def __str__(self) -> str:
        rates = ", ".join(f"{d} {r / 1e12:.0f} TFLOP/s less {n} rows" for d, r, n in self.mxu)
        return (
            f"{self.name}: {self.step_s * 1e6:.2f} us a step, {self.guard_s * 1e9:.0f} ns a"
            f" guarded sub-step, {self.hbm_bytes_s / 1e9:.0f} GB/s"
            f" HBM, MXU {rates} a dot,"
            f" VPU {self.vpu_elems_s / 1e12:.1f}e12 elements/s, values over"
            f" {self.register_bytes >> 10} KiB through VMEM at {self.vmem_traffic_s / 1e12:.0f}"
            f" TB/s, VMEM {self.vmem_bytes >> 20} MiB in Mosaic's default scope and at most"
            f" {self.vmem_most >> 20} MiB asked for, at most {self.unrolled_ops} ops unrolled"
        )


# Calibrated on one TPU v5e (v5 lite) chip; the runs are in bench/results/ (tpu_bench*_v5e.txt,
# fusion_cost_v5e.txt, made by bench/chip/fusion_cost.py) and the sweep's table in
# docs/guides/optimizations.md.
V5E = Chip(
    name="TPU v5e",
    # the time of the same bytes in more steps: tanh of 1.6e7 floats 3.265 ms in 15625 steps,
    # 0.221 in 125 (0.20 us a step); layer norm 32768x1024 0.904 ms in 2048, 0.420 in 128
    # (0.25 us); matmul f32 2048^3 in 128-blocks 1.661 ms in 4096 steps (0.22 us)
    step_s=0.22e-6,
    # tanh of 1.6e7 floats: 0.221 ms in 125 steps of 125 sub-steps, 0.233 in 115 of 136 (15 of
    # them guarded, as 15625 is no multiple of 136): 1725 guards cost 14 us
    guard_s=8e-9,
    # softmax and layer norm over 32768x1024, 256 MiB, in 0.420 ms of which 0.02 are steps;
    # tanh's 128 MB in 0.209 ms in 25 steps (the HBM's peak is 819 GB/s)
    hbm_bytes_s=680e9,
    # bf16: the chip's peak, less 128 rows a dot (matmul bf16 4096^3 in 2048x2048x512 blocks:
    # 0.804 ms, of which fill 0.031 and steps 0.028, 184 TFLOP/s). f32: matmul f32 2048^3 in
    # 1024x2048x512 blocks 0.137 ms (fill 0.022, 151 TFLOP/s), 2048x2048x512 0.145 (fill 0.037,
    # 160 TFLOP/s); at 512x512x512 (0.222 ms) and 1024x512x512 (0.183) it is bound by HBM
    mxu=(("bfloat16", 197e12, 128), ("float32", 170e12, 128)),
    # (8, 128) lanes, 4 VALU slots at 1.5 GHz: the chip's figure, not measured (no kernel of
    # the bench is bound by it)
    vpu_elems_s=6.1e12,
    # a quarter of the 64 vector registers of 4 KiB. Flash attention at d=64, its key axis's
    # 64 sub-steps unrolled and its running max, sum and output in values (fusion_cost_v5e.txt):
    # 0.858 ms in 128 query rows (scores of 64 KiB), out of VMEM at 256 rows (128 KiB), where
    # the sub-steps run in a loop took 1.073 ms; in a loop at 512, 1024 and 2048 rows 1.641,
    # 1.158 and 1.145 ms: the spilled values' ops move 6.4 GB more through VMEM, 16 TB/s
    register_bytes=64 << 10,
    vmem_traffic_s=16e12,
    # matmul bf16 4096^3 in 4096x512 blocks: 0.823 ms a dot a step, 0.939 as 4 unrolled sub-steps
    # spilling 8 MiB of f32 results each; matmul f32 2048^3 in 1024x512 blocks, 4 sub-steps of
    # 2 MiB each, gained (0.135 ms, against 0.150 in 1024x1024 blocks a dot a step)
    overlap_bytes=16 << 20,
    # of the 16 MiB of VMEM Mosaic scopes by default, 2 left to Mosaic's own (MOSAIC_VMEM):
    # matmul f32 2048^3 ran 0.231 ms in 8 MiB, 0.189 in 14; bf16 4096^3 0.966 and 0.862; 24 MiB
    # ran out of VMEM. Asked for more (the v5e has 128 MiB), matmul f32 2048^3 ran 0.137 ms in
    # 36 MiB of blocks and bf16 4096^3 0.804 in 56 (upstream's kernel, limits 100, 120 MiB)
    vmem_bytes=14 << 20,
    vmem_most=96 << 20,
    # tanh of 1.6e7 floats (15 ops a step): 0.342 ms at 25 sub-steps a step, 0.221 at 125
    # (1875 ops), 0.209 at 625; the sum of 2^24 floats (14 ops) held 2.25 ms at 32, 128 and 512
    # sub-steps (bound by its chain of sums, its output then stored and loaded every sub-step);
    # with the output threaded in values, 0.140 ms at 145 sub-steps and 0.122 at 512
    unrolled_ops=7168,
)


@dataclasses.dataclass(frozen=True)
class Cost:
    """The model's time, by term (seconds)."""

    steps_s: float
    hbm_s: float
    compute_s: float
    fill_s: float

    @property
    def seconds(self) -> float:
        return self.steps_s + max(self.hbm_s, self.compute_s) + self.fill_s

    def __str__(self) -> str:
        ms = [f"{x * 1e3:.3f}" for x in (self.seconds, self.steps_s, self.hbm_s)]
        rest = f"{self.compute_s * 1e3:.3f}) + fill {self.fill_s * 1e3:.3f}"
        return f"{ms[0]} ms (steps {ms[1]} + max(HBM {ms[2]}, compute {rest})"


@dataclasses.dataclass(frozen=True)
class Operand:
    """One block spec as the model sees it: its block's bytes, the axes its index reads, and
    whether it is written back (an output)."""

    nbytes: int
    axes: frozenset[int]
    output: bool = False


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the model reads of a kernel; ``mxu_s`` and ``vpu_s`` are the whole grid's
    (widening makes bigger dots: a kernel is widened before it is read)."""

    grid: tuple[int, ...]
    operands: tuple[Operand, ...]
    scratch_bytes: int
    mxu_s: float
    vpu_s: float
    guarded: int = 0  # sub-steps tested against the axis's end, over the whole grid
    spilled_bytes: int = 0  # the body's largest value, when it overflows the registers
    copies: int = 1  # the body's copies one step unrolls (fused sub-steps)
    threads: bool = False  # scratch carried in values across the copies (``carried``)

    @property
    def vmem(self) -> int:
        """Bytes of VMEM: every window double-buffered, the scratch, and room for the
        values that overflow the registers (``LIVE_SPILLED`` of the largest); in every
        unrolled copy of the body when values carried across the copies tie them together
        (flash attention at d=64 ran out of VMEM so; blocked matmuls never did)."""
        windows = 2 * sum(o.nbytes for o in self.operands)
        spilled = LIVE_SPILLED * self.spilled_bytes * (self.copies if self.threads else 1)
        return windows + self.scratch_bytes + spilled

    def fused(self, axis: int, factor: int) -> Plan:
        """``factor`` steps of ``axis`` run as sub-steps of one (the last may skip some)."""
        grid = _shorter(self.grid, axis, factor)
        past = -self.grid[axis] % factor  # the sub-steps of the last step past the end
        guarded = math.prod(grid) * (past and factor - self.grid[axis] % factor)
        return dataclasses.replace(
            self,
            grid=grid,
            operands=_grown(self.operands, axis, factor),
            guarded=self.guarded + guarded,
            copies=self.copies * factor,
        )

    def cost(self, chip: Chip) -> Cost:
        spilled = self.spilled_bytes * self.copies  # the copies' spilled values, all told
        overlap = self.copies if spilled <= chip.overlap_bytes else 1
        moved = sum(o.nbytes * fetches(self.grid, o.axes) for o in self.operands)
        ends = sum(o.nbytes for o in self.operands)  # in at the start, out at the end
        return Cost(
            steps_s=math.prod(self.grid) * chip.step_s + self.guarded * chip.guard_s,
            hbm_s=moved / chip.hbm_bytes_s,
            compute_s=max(self.mxu_s, self.vpu_s) + min(self.mxu_s, self.vpu_s) / overlap,
            fill_s=ends / chip.hbm_bytes_s,
        )


def _shorter(grid: tuple[int, ...], axis: int, factor: int) -> tuple[int, ...]:
    return tuple(-(-n // factor) if a == axis else n for a, n in enumerate(grid))


def _grown(operands: tuple[Operand, ...], axis: int, factor: int) -> tuple[Operand, ...]:
    return tuple(
        dataclasses.replace(o, nbytes=o.nbytes * factor) if axis in o.axes else o for o in operands
    )


def fetches(grid: tuple[int, ...], axes: frozenset[int]) -> int:
    """How many times a block whose index reads grid ``axes`` is copied: once, then at every
    step where one of those axes changes. When axis ``a`` advances (``prod(grid[:a]) *
    (grid[a] - 1)`` times), every later axis wraps to 0, so it changes the block when ``a``
    or a later axis longer than one is among ``axes``."""
    count = 1
    for a, n in enumerate(grid):
        if a in axes or any(b in axes and grid[b] > 1 for b in range(a + 1, len(grid))):
            count += math.prod(grid[:a]) * (n - 1)
    return count


def plan_of(kernel: Kernel, chip: Chip, carried_bytes: int = CARRIED_BYTES) -> Plan:
    """``kernel`` as the model reads it; ``carried_bytes``: the most a scratch buffer kept in
    values holds (``carried``; 0: none is)."""
    specs = (*kernel.in_specs, *kernel.out_specs)
    operands = tuple(
        Operand(
            _nbytes(s.ref_type.shape, s.ref_type.dtype),
            frozenset(a for a in range(len(kernel.grid)) if motion(s, a) != STAYS),
            i >= kernel.num_inputs,
        )
        for i, s in enumerate(specs)
    )
    steps = math.prod(kernel.grid)
    mxu_s = vpu_s = 0.0
    spilled = 0
    dots: set[Value] = set()  # the MXU's results, stored as its tiles come out
    for op, times in _runs(kernel.body.body):
        if op.name == "dot":
            mxu_s += _dot_s(op, chip) * times
            dots.add(op.result)
        elif op.name not in ("get", "swap") and _arrays(op):
            elements = max(math.prod(v.type.shape) for v in _arrays(op))
            sizes = [tiled_bytes(v.type.shape, v.type.dtype) for v in _arrays(op) if v not in dots]
            over = [n for n in sizes if n > chip.register_bytes]
            vpu_s += (elements / chip.vpu_elems_s + sum(over) / chip.vmem_traffic_s) * times
            spilled = max([spilled, *over])
    scratch = sum(tiled_bytes(t.shape, t.dtype) for t in kernel.scratch_types)
    threads = any(threaded(kernel, carried_bytes))
    grid, copies = kernel.grid, _copies(kernel.body.body)
    return Plan(grid, operands, scratch, mxu_s * steps, vpu_s * steps, 0, spilled, copies, threads)


def vmem_limit(kernel: Kernel, fused: Kernel, plan: Plan, chip: Chip) -> int | None:
    """The scoped VMEM ``fused`` (of ``kernel``) asks for: the user's limit, when set; else
    None while its ``plan`` fits in Mosaic's default scope, or its VMEM and Mosaic's own, in
    whole MiB, when it does not."""
    if kernel.vmem_limit_bytes is not None or fused is kernel or plan.vmem <= chip.vmem_bytes:
        return kernel.vmem_limit_bytes
    return -(-(plan.vmem + MOSAIC_VMEM) // (1 << 20)) << 20


def _copies(block: Block) -> int:
    """The copies of the written body ``block`` runs unrolled: one per sub-step (a ``call``, or
    a ``cond`` skipping one), times the sub-steps inside it when fused again."""
    found = 0
    for op in block.ops:
        if op.name == "call":
            found += _copies(op.attrs["callee"].body)
        elif op.name == "cond" and any(o.name == "call" for r in op.regions for o in r.ops):
            found += max(_copies(r) for r in op.regions)
    return max(1, found)


def body_ops(kernel: Kernel) -> int:
    """The ops one step of ``kernel`` runs (a fused step unrolls them once per sub-step)."""
    return sum(1 for _ in _ops(kernel.body.body))


def kernel_cost(kernel: Kernel, chip: Chip = V5E) -> Cost:
    """The model's time for ``kernel`` as it is."""
    return plan_of(kernel, chip).cost(chip)


def _ops(block: Block) -> Iterator[Op]:
    """Every op of one step's code: into regions and the functions ``call`` names."""
    for op, _ in _runs(block):
        yield op


def _runs(block: Block, times: int = 1) -> Iterator[tuple[Op, int]]:
    """Every op one step runs and how many times: a ``for`` of constant bounds (fused
    sub-steps in a loop, ``looped``) runs its body once per trip."""
    constants: dict[Value, int] = {}
    for op in block.ops:
        yield op, times
        if op.name == "constant" and op.result.type == INDEX:
            constants[op.result] = int(op.attrs["value"].array())
        trips = 1
        if op.name == "for" and all(v in constants for v in op.operands[:2]):
            trips = max(0, constants[op.operands[1]] - constants[op.operands[0]])
        if op.name == "call":
            yield from _runs(op.attrs["callee"].body, times)
        for region in op.regions:
            yield from _runs(region, times * trips)


def _arrays(op: Op) -> list[Value]:
    """The array operands and results of a computing op (not a ref's, not a constant's)."""
    if op.name in ("constant", "call") or op.regions:
        return []
    return [v for v in (*op.operands, *op.results) if isinstance(v.type, ArrayType)]


def _dot_s(op: Op, chip: Chip) -> float:
    out = op.result.type.shape
    flops = 2.0 * math.prod(out) * op.operands[0].type.shape[-1]
    rate, load = chip.mxu_rate(op.operands[0].type.dtype)
    return flops / rate * (out[-2] + load) / out[-2]


def _nbytes(shape: tuple[int, ...], dtype: str) -> int:
    return math.prod(shape) * dtypes.itemsize(dtype)
