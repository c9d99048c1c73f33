"""Random Pallas kernels, one description for minipallas and for upstream Pallas.

A ``KernelSpec`` is plain data: a grid of 1-3 axes; one block shape every operand shares (a
``None`` entry is a squeezed dimension); per operand an index map giving, per dimension, a grid
index, the constant 0, or the computed ``(i + 1) // 2``, and an array shape (whole blocks or a
partial last block) that holds every block its map reaches over the grid; and a body that
combines the input blocks elementwise with one grid index (and, optionally, a row sum or max
over the block's last dimension), then writes or accumulates the output block, optionally
through persistent scratch that is reset at the start of each sweep of one grid axis (or only
at the very first grid point); some bodies also carry the value through a two-step
``fori_loop`` or a ``run_scoped`` buffer, or decrement the output where one grid index is 1.
With ``random_kernel(c, params=d)`` some kernels also take the parameters upstream's ops and
block specs take (a dot's precision, an approximate reciprocal, a transcendental's accuracy,
buffer counts, alignment promises, output dtypes), drawn from ``d`` (``kernel_params``).

The body and the index maps are Python functions over a namespace (``program_id``, ``when``,
``fori_loop``, ``run_scoped``, ``VMEM``, ``zeros``, dtypes, and ``kernel_params``' ops), so the
very same kernel runs in minipallas (``minipallas_call``) and in upstream Pallas
(``minipallas.tools.fuzz.kernels``).
Decisions come from a ``Choices``: hypothesis draws in tests, ``random.Random`` in campaigns.

Arrays are sized after the maps are drawn, by whole blocks, so every grid point's blocks start
inside their arrays: on a TPU a block past the end may halt the chip (``difftest.halts``).
``random_kernel(c, out_of_bounds=p)`` instead makes a kernel out of bounds on purpose with
chance ``p``: one operand dimension one block short of what its map reaches
(``KernelSpec.outside`` says which). With ``p = 0`` nothing more is drawn, so a seed's
kernels that were in bounds before sizing are the same kernels.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.ir.conversions import to_dtype
from minipallas.tools.generate import kernel_params
from minipallas.tools.generate.choices import Choices
from minipallas.tools.generate.kernel_params import Dot
from minipallas.tpu import VMEM

MAP_KINDS = ("axis", "const", "computed")  # simplest first: draws shrink toward the start
SCRATCH = (None, "reset", "running")


@dataclass(frozen=True)
class IndexMap:
    """Per array dimension: ``kind`` (one of ``MAP_KINDS``) on grid axis ``axis``; with
    ``multiple_of``, each block index not constant goes through an alignment promise (``over``
    a namespace: ``kernel_params.block_index``)."""

    kinds: tuple[str, ...]
    axes: tuple[int, ...]
    multiple_of: bool = False

    def __call__(self, *ids: Any, ns: Any = None) -> tuple[Any, ...]:
        out: list[Any] = []
        for kind, axis in zip(self.kinds, self.axes, strict=True):
            if kind == "const":
                out.append(0)
                continue
            b = ids[axis] if kind == "axis" else (ids[axis] + 1) // 2
            out.append(kernel_params.block_index(ns, b) if self.multiple_of else b)
        return tuple(out)

    def over(self, ns: Any) -> Callable[..., tuple[Any, ...]]:  # noqa: ANN401 - a namespace
        """The map as a block spec takes it, its promises made with ``ns``'s ``multiple_of``."""
        return self if not self.multiple_of else lambda *ids: self(*ids, ns=ns)

    def reach(self, grid: tuple[int, ...] | list[int]) -> tuple[int, ...]:
        """Per dimension, the largest block index the map gives over ``grid``."""
        return tuple(
            0 if kind == "const" else grid[axis] - 1 if kind == "axis" else grid[axis] // 2
            for kind, axis in zip(self.kinds, self.axes, strict=True)
        )


@dataclass(frozen=True)
class Operand:
    shape: tuple[int, ...]
    index_map: IndexMap


def _blocks(dim: int, block: int | None) -> int:
    """How many blocks (elements, for a squeezed ``None``) a dimension holds."""
    return -(-dim // (block or 1))


def _fitted(o: Operand, grid: list[int], block: tuple[int | None, ...], short: int = -1) -> Operand:
    """``o`` with each dimension grown by whole blocks (a partial last block stays partial) to
    hold every block its map reaches over ``grid``; dimension ``short`` one block short of that."""
    dims = []
    for d, (n, b, r) in enumerate(zip(o.shape, block, o.index_map.reach(grid), strict=True)):
        count = r if d == short else max(r + 1, _blocks(n, b))
        dims.append(n + (count - _blocks(n, b)) * (b or 1))
    return Operand(tuple(dims), o.index_map)


@dataclass(frozen=True)
class KernelSpec:
    grid: tuple[int, ...]
    block: tuple[int | None, ...]
    inputs: tuple[Operand, ...]
    output: Operand
    accumulate: bool  # ``o += value`` rather than ``o = value``
    scratch: str | None  # None, "reset" (at reset_axis == 0) or "running" (at the first point)
    reset_axis: int
    scale_axis: int  # whose grid index the body adds
    reduce: str | None = None  # None, "sum" or "max": subtract half the last axis's reduction
    inner_loop: bool = False  # two steps of a ``fori_loop`` carrying the value
    staged: bool = False  # a round trip through ``run_scoped`` scratch
    branch_axis: int | None = None  # where that grid index is 1, the output is then decremented
    dtype: str = "float32"  # of the inputs and the output: "float32" or "bfloat16"
    # the parameters of ``kernel_params`` (None/False: not drawn)
    dot: Dot | None = None  # a dot step's precision and product dtype
    reciprocal: str | None = None  # "exact" or "approx"
    accuracy: str | None = None  # "exp" or "tanh", with accuracy=HIGHEST
    buffered: tuple[int, int] | None = None  # (operand, n): Buffered(n); operand -1: the output
    multiple_of: bool = False  # the body's grid index through multiple_of
    mul_out: str | None = None  # a lax.mul step's out_dtype

    @property
    def ref_shape(self) -> tuple[int, ...]:
        return tuple(b for b in self.block if b is not None)

    def body(self, ns: Any) -> Callable[..., None]:  # noqa: ANN401 - a namespace
        """The kernel body over ``ns``: refs ``(*inputs, output, [scratch])``."""
        n_in, last = len(self.inputs), len(self.grid) - 1

        # scratch in the kernel's dtype too: XLA folds a bf16 op's rounding into a later f32
        # convert even with excess precision off (see fuzz.kernels), which would be all we found
        dtype = getattr(ns, self.dtype)

        def kernel(*refs: Any) -> None:
            x_refs, o_ref = refs[:n_in], refs[n_in]
            value = x_refs[0][...] * 2.0
            for x_ref in x_refs[1:]:
                value = value + x_ref[...]
            value = value + kernel_params.grid_index(self, ns, self.scale_axis, dtype)
            value = kernel_params.steps(self, ns, value, x_refs, dtype)
            if self.reduce == "sum":
                value = value - value.sum(axis=-1, keepdims=True) * 0.5
            elif self.reduce == "max":
                value = value - value.max(axis=-1, keepdims=True) * 0.5
            if self.inner_loop:
                value = ns.fori_loop(0, 2, lambda i, v: v * 0.5 + 1.0, value)
            if self.staged:

                def staged(t_ref: Any) -> Any:  # noqa: ANN401
                    t_ref[...] = value * 3.0
                    return t_ref[...] - value

                value = ns.run_scoped(staged, ns.VMEM(self.ref_shape, dtype))
            if self.scratch:
                s_ref = refs[-1]
                if self.scratch == "reset":
                    first = ns.program_id(self.reset_axis) == 0
                else:
                    first = ns.program_id(0) + ns.program_id(last) == 0

                @ns.when(first)
                def _() -> None:
                    s_ref[...] = ns.zeros(s_ref.shape, dtype)

                s_ref[...] += value
                value = s_ref[...]
            if self.accumulate:
                o_ref[...] += value
            else:
                o_ref[...] = value
            if self.branch_axis is not None:

                @ns.when(ns.program_id(self.branch_axis) == 1)
                def _() -> None:
                    o_ref[...] = o_ref[...] - 1.0

        kernel.__name__ = "random_kernel"
        return kernel

    def outside(self) -> str | None:
        """The first operand dimension whose map reaches a block past its array's end over the
        grid (the spec's own arithmetic; ``difftest.halts`` finds it by running the maps), or
        None when every block starts inside its array."""
        named = [(f"input {k}", o) for k, o in enumerate(self.inputs)] + [("output", self.output)]
        for name, o in named:
            reach = o.index_map.reach(self.grid)
            for d, (n, b, r) in enumerate(zip(o.shape, self.block, reach, strict=True)):
                if r >= _blocks(n, b):
                    return f"{name} dimension {d}: block {r} of a {_blocks(n, b)}-block array"
        return None

    def describe(self) -> str:
        def operand(o: Operand) -> str:
            maps = ",".join(
                f"{k[0]}{a}" for k, a in zip(o.index_map.kinds, o.index_map.axes, strict=True)
            )
            return f"{list(o.shape)}@({maps}{', multiple_of' if o.index_map.multiple_of else ''})"

        return (
            f"grid={self.grid} block={self.block} in={[operand(o) for o in self.inputs]} "
            f"out={operand(self.output)} accumulate={self.accumulate} scratch={self.scratch}"
            f"@{self.reset_axis} scale_axis={self.scale_axis} reduce={self.reduce} "
            f"inner_loop={self.inner_loop} staged={self.staged} branch_axis={self.branch_axis} "
            f"dtype={self.dtype}"
            + "".join(f" {k}={v}" for k, v in kernel_params.parameters(self).items())
        )


def random_kernel(
    c: Choices, out_of_bounds: float = 0.0, params: Choices | None = None
) -> KernelSpec:
    """One random kernel (module doc), in bounds but with chance ``out_of_bounds``; outputs
    mostly take distinct grid indices, which is what lets a grid axis run batched on the
    CPU. With ``params``, the parameters of ``kernel_params`` are drawn from it, after the
    kernel (so ``c``'s draws, and the kernel they make, are the same with or without)."""
    grid = [c.integer(1, 3) for _ in range(c.integer(1, 3))]
    rank = c.integer(1, 2)
    block: tuple[int | None, ...] = tuple(c.pick((2, 1, 4, None)) for _ in range(rank))
    if all(b is None for b in block):
        block = (*block[:-1], 2)

    def index_map(output: bool) -> IndexMap:
        weights = (6 if output else 4, 1, 1)
        kinds = tuple(c.weighted(list(zip(weights, MAP_KINDS, strict=True))) for _ in block)
        order = list(range(len(grid)))
        for i in range(len(order) - 1):  # a random permutation of the grid axes
            j = c.integer(i, len(order) - 1)
            order[i], order[j] = order[j], order[i]
        return IndexMap(kinds, tuple(order[d % len(grid)] for d in range(rank)))

    def shape() -> tuple[int, ...]:
        dims = []
        for b in block:
            count = c.weighted([(1, 1), (1, 2), (2, 3), (2, 4)])  # grown to the map's reach
            partial = b not in (None, 1) and c.chance(0.3)
            dims.append(count if b is None else count * b - partial)
        return tuple(dims)

    operands = [Operand(shape(), index_map(False)) for _ in range(c.integer(1, 2))]
    operands.append(Operand(shape(), index_map(True)))
    short_op, short_dim = -1, -1  # the operand dimension made one block short, if any
    if out_of_bounds and c.chance(out_of_bounds):
        short_op, short_dim = c.integer(0, len(operands) - 1), c.integer(0, rank - 1)
        m = operands[short_op].index_map
        if m.reach(grid)[short_dim] == 0:  # a map that stays at block 0 walks an axis of 2+
            kinds = tuple("axis" if d == short_dim else k for d, k in enumerate(m.kinds))
            operands[short_op] = Operand(operands[short_op].shape, IndexMap(kinds, m.axes))
            grid[m.axes[short_dim]] = max(grid[m.axes[short_dim]], 2)
    operands = [
        _fitted(o, grid, block, short_dim if k == short_op else -1) for k, o in enumerate(operands)
    ]
    spec = KernelSpec(
        tuple(grid), block, tuple(operands[:-1]), operands[-1],
        accumulate=c.chance(0.5),
        scratch=c.weighted([(2, None), (2, "reset"), (1, "running")]),
        reset_axis=c.integer(0, len(grid) - 1),
        scale_axis=c.integer(0, len(grid) - 1),
        reduce=c.weighted([(3, None), (1, "sum"), (1, "max")]),
        inner_loop=c.chance(0.25),
        staged=c.chance(0.25),
        branch_axis=c.integer(0, len(grid) - 1) if c.chance(0.3) else None,
        dtype="bfloat16" if c.chance(0.3) else "float32",
    )  # fmt: skip
    return spec if params is None else kernel_params.draw(spec, params)


def tpu_sized(spec: KernelSpec) -> KernelSpec:
    """``spec`` with blocks Mosaic tiles: the last two block dimensions (the only one of a
    rank-1 block) scaled to (16, 128) multiples (1024), the arrays with them; the body reads
    any shape. A kernel with a dot step scales both by 128: Mosaic's matmul takes a
    contraction and an output width of 128 multiples. It writes its output rather than
    accumulating into it: a TPU never loads an output block, so adding to one nothing wrote is
    undefined there (and refused ahead of time, ``lowering/tpu/output_reads.py``)."""
    rows = 128 if spec.dot is not None else 16
    scale = [1024] if len(spec.block) == 1 else [1] * (len(spec.block) - 2) + [rows, 128]
    scale = [1 if b is None else k for b, k in zip(spec.block, scale, strict=True)]

    def operand(o: Operand) -> Operand:
        return dataclasses.replace(
            o, shape=tuple(d * k for d, k in zip(o.shape, scale, strict=True))
        )

    return dataclasses.replace(
        spec,
        accumulate=False,
        block=tuple(None if b is None else b * k for b, k in zip(spec.block, scale, strict=True)),
        inputs=tuple(map(operand, spec.inputs)),
        output=operand(spec.output),
    )


def kernel_inputs(spec: KernelSpec, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [to_dtype(rng.standard_normal(o.shape), spec.dtype) for o in spec.inputs]


def _accurate(name: str, x: Any) -> Any:  # noqa: ANN401
    """``lax.exp(x, accuracy=HIGHEST)`` and the like: minipallas's transcendentals compute one
    way and take no accuracy, so this refuses as upstream's Mosaic rules do."""
    raise mp.MiniPallasError(
        f"Not implemented: accuracy (minipallas.numpy.{name} takes no accuracy=; upstream's "
        "Mosaic lowering refuses it too)",
        fix=f"drop accuracy= from lax.{name}",
    )


def minipallas_call(spec: KernelSpec, **options: Any) -> Any:  # noqa: ANN401 - a PallasCall
    """The kernel as ``minipallas.pallas_call`` (``options`` go to it)."""

    ns = types.SimpleNamespace(
        program_id=mp.program_id,
        when=mp.when,
        fori_loop=mp.fori_loop,
        run_scoped=mp.run_scoped,
        VMEM=VMEM,
        zeros=mnp.zeros,
        float32=mnp.float32,
        bfloat16=mnp.bfloat16,
        dot=mnp.dot,
        precision=str.lower,  # "HIGHEST" -> the dot op's "highest"
        reciprocal=mp.reciprocal,
        multiple_of=mp.multiple_of,
        mul=lambda x, y, out: x.astype(out) * y.astype(out),  # lax.mul's out_dtype
        accurate=_accurate,
        Buffered=mp.Buffered,
    )

    def block_spec(o: Operand, k: int) -> Any:  # noqa: ANN401
        mode = kernel_params.pipeline_mode(spec, ns, k)
        return mp.BlockSpec(spec.block, o.index_map.over(ns), **mode)

    return mp.pallas_call(
        spec.body(ns),
        mp.ArrayType(spec.output.shape, spec.dtype),
        grid=spec.grid,
        in_specs=[block_spec(o, k) for k, o in enumerate(spec.inputs)],
        out_specs=block_spec(spec.output, -1),
        scratch_shapes=[VMEM(spec.ref_shape, spec.dtype)] if spec.scratch else [],
        **options,
    )
