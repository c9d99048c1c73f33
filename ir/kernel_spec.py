"""The traced form of a kernel, shared by every backend (CPU grid loop, Mosaic TPU, Triton).

``pallas_call`` traces the user's Python kernel and index maps into a ``Kernel``; each backend
reads only this object, so the model is defined once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from minipallas.ir.core import Function
from minipallas.ir.types import ANY, ArrayType, MemorySpace, RefType


@dataclass(frozen=True)
class BlockSpec:
    """How one operand is cut into blocks, as ``jax.experimental.pallas.BlockSpec``.

    ``block_shape`` entries of ``None`` (or ``pl.Squeezed``-like) are squeezed: the kernel sees
    the block without that dimension. ``index_map(*grid_indices)`` returns block indices, one per
    dimension of the array (for a squeezed dimension, the element index; for an ``Element``
    one, the block's first element). A missing spec, or one with ``block_shape=None``, means the
    whole array in one block at every grid point.
    """

    block_shape: tuple[int | Element | None, ...] | None = None
    index_map: Callable[..., Any] | None = None
    memory_space: MemorySpace | None = None


@dataclass(frozen=True)
class Element:
    """A block dimension indexed by element, as ``jax.experimental.pallas.Element``: the index
    map gives the block's first element along it (any offset: blocks may overlap), not a block
    index. ``padding=(low, high)``: the array is seen with ``low`` fill values before it and
    ``high`` after it along that dimension, and the index map's offsets count in that padded
    array (upstream's ``#tpu.element_window<low, high>``; its interpret mode pads the same way)."""

    block_size: int
    padding: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class TracedBlockSpec:
    """A block spec after tracing: the full array, the block, and the index map as IR.

    ``index_map`` is a Function taking one ``i32[]`` per grid axis and returning one ``i32[]``
    block index per array dimension. ``block_shape`` has ``None`` for squeezed dimensions;
    ``ref_type`` is the kernel's view of the block (squeezed dimensions removed).
    """

    array: ArrayType
    block_shape: tuple[int | None, ...]
    index_map: Function
    ref_type: RefType
    # the dimensions whose index is the block's first element (``Element``), not a block index
    element_dims: frozenset[int] = frozenset()
    # (low, high) per dimension: an ``Element`` dimension's padding, (0, 0) elsewhere; () when
    # no dimension is padded
    padding: tuple[tuple[int, int], ...] = ()

    @property
    def memory_space(self) -> MemorySpace:
        return self.ref_type.memory_space

    @property
    def squeezed(self) -> tuple[bool, ...]:
        return tuple(b is None for b in self.block_shape)

    @property
    def pads(self) -> tuple[tuple[int, int], ...]:
        """``padding`` with one ``(low, high)`` per dimension, also when none is padded."""
        return self.padding or ((0, 0),) * self.array.ndim


@dataclass(frozen=True)
class Kernel:
    """A traced ``pallas_call``.

    ``body`` takes refs ``[*scalar_prefetch, *inputs, *outputs, *scratch]`` (block-shaped, in
    the specs' memory spaces; the default is ``ANY`` for the generic path and VMEM for TPU
    emission) and may use ``program_id`` / ``num_programs``. It returns nothing.
    ``in_specs``/``out_specs`` line up with the inputs and outputs.

    ``scalar_prefetch`` are the whole-array (SMEM) ref types of the call's first operands
    (upstream's ``PrefetchScalarGridSpec``): every index map takes them after its grid
    indices. A ``None`` grid size is a dynamic one (upstream's ``dynamic_grid_dim``), given
    at run time before all other operands.
    """

    name: str
    body: Function
    grid: tuple[int | None, ...]
    in_specs: tuple[TracedBlockSpec, ...]
    out_specs: tuple[TracedBlockSpec, ...]
    scratch_types: tuple[RefType, ...] = ()
    dimension_semantics: tuple[str, ...] | None = None
    # (input, output) pairs: the output starts as the input's contents (kernels/spec/aliases.py)
    input_output_aliases: tuple[tuple[int, int], ...] = ()
    scalar_prefetch: tuple[RefType, ...] = ()

    @property
    def dynamic_axes(self) -> tuple[int, ...]:
        """The grid axes whose size is given at run time."""
        return tuple(a for a, n in enumerate(self.grid) if n is None)

    @property
    def num_inputs(self) -> int:
        return len(self.in_specs)

    @property
    def num_outputs(self) -> int:
        return len(self.out_specs)

    @property
    def out_types(self) -> tuple[ArrayType, ...]:
        return tuple(s.array for s in self.out_specs)

    def __str__(self) -> str:
        """The kernel as text: name, grid (and dimension semantics), each block spec's array,
        block and index map, then the body (what a kernel pass changes, all of it)."""
        semantics = f" {list(self.dimension_semantics)}" if self.dimension_semantics else ""
        lines = [f"kernel {self.name}: grid {self.grid}{semantics}"]
        for role, specs in (("input", self.in_specs), ("output", self.out_specs)):
            for k, spec in enumerate(specs):
                block = "x".join("*" if n is None else str(n) for n in spec.block_shape)
                lines.append(f"  {role} {k}: {spec.array} in blocks [{block}], index map:")
                lines += [f"    {line}" for line in str(spec.index_map).splitlines()]
        return "\n".join([*lines, str(self.body)])


DEFAULT_MEMORY_SPACE = ANY
