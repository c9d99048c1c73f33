"""The traced form of a kernel, shared by every backend (CPU grid loop, Mosaic TPU, Triton).

``pallas_call`` traces the user's Python kernel and index maps into a ``Kernel``; each backend
reads only this object, so the model is defined once.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from minipallas.ir.core import Function
from minipallas.ir.errors import TraceError
from minipallas.ir.location import user_location
from minipallas.ir.types import ANY, ArrayType, MemorySpace, RefType


@dataclass(frozen=True)
class BlockSpec:
    """How one operand is cut into blocks, as ``jax.experimental.pallas.BlockSpec``.

    ``block_shape`` entries of ``None`` (or ``pl.Squeezed``-like) are squeezed: the kernel sees
    the block without that dimension. ``index_map(*grid_indices)`` returns block indices, one per
    dimension of the array (for a squeezed dimension, the element index; for an ``Element``
    one, the block's first element). A missing spec, or one with ``block_shape=None``, means the
    whole array in one block at every grid point.

    ``pipeline_mode=Buffered(n)`` (or upstream's ``pl.Buffered``) asks the TPU pipeline for
    ``n`` buffers of the block: upstream's Mosaic lowering takes 1 (fetched in the step that
    uses it, ``#tpu.pipeline_mode<synchronous>``) or 2 (the next block fetched while this one
    is used, ``double_buffered``) and refuses the rest when lowering for the TPU. Buffering
    changes when a block moves, never which values the kernel computes, so the CPU and the
    reference interpreter ignore it, as upstream's interpret mode does.
    """

    block_shape: tuple[int | Element | None, ...] | None = None
    index_map: Callable[..., Any] | None = None
    memory_space: MemorySpace | None = None
    pipeline_mode: Buffered | None = None


@dataclass(frozen=True)
class Element:
    """A block dimension indexed by element, as ``jax.experimental.pallas.Element``: the index
    map gives the block's first element along it (any offset: blocks may overlap), not a block
    index. ``padding=(low, high)``: the array is seen with ``low`` fill values before it and
    ``high`` after it along that dimension, and the index map's offsets count in that padded
    array (upstream's ``#tpu.element_window<low, high>``; its interpret mode pads the same way)."""

    block_size: int
    padding: tuple[int, int] = (0, 0)


class RevisitMode(enum.Enum):
    """How an output block may be revisited, as ``jax.experimental.pallas.RevisitMode``:
    ``IMMEDIATE`` only at the next grid step (the default for outputs), ``ANY`` at any later
    one (Mosaic adds DMAs to restore it). Input blocks ignore it."""

    IMMEDIATE = "immediate"
    ANY = "any"


@dataclass(frozen=True)
class Buffered:
    """How many buffers the TPU pipeline gives a block, as ``jax.experimental.pallas.Buffered``
    (field for field): ``buffer_count``, whether to fetch ahead into a free buffer
    (``use_lookahead``) and when an output block may be visited again (``revisit``). Which
    values Mosaic takes is checked when a kernel is lowered for the TPU
    (``lowering/tpu/module.py``), where upstream checks them; the fields' types are checked
    here."""

    buffer_count: int
    use_lookahead: bool = False
    revisit: RevisitMode | None = None

    def __post_init__(self) -> None:
        count, lookahead, revisit = self.buffer_count, self.use_lookahead, self.revisit
        if isinstance(count, bool) or not isinstance(count, int):
            raise _field_error(
                f"Buffered's buffer_count must be an int, got {count!r}",
                "give the number of buffers: Buffered(1) or Buffered(2)",
            )
        if not isinstance(lookahead, bool):
            raise _field_error(
                f"Buffered's use_lookahead must be a bool, got {lookahead!r}",
                "leave use_lookahead=False: Mosaic's pipeline has no lookahead",
            )
        if revisit is not None and not isinstance(revisit, RevisitMode):
            raise _field_error(
                f"Buffered's revisit must be a RevisitMode or None, got {revisit!r}",
                "revisit=minipallas.RevisitMode.IMMEDIATE or minipallas.RevisitMode.ANY",
            )

    def __str__(self) -> str:
        extra = ", use_lookahead=True" if self.use_lookahead else ""
        extra += f", revisit={self.revisit.name}" if self.revisit is not None else ""
        return f"Buffered({self.buffer_count}{extra})"


@dataclass(frozen=True)
class CostEstimate:
    """What a kernel costs, as ``jax.experimental.pallas.CostEstimate`` (field for field):
    XLA's scheduler reads it from the ``tpu_custom_call``'s backend config. It changes no
    value; every field must be an int, as upstream's."""

    flops: int
    transcendentals: int
    bytes_accessed: int
    remote_bytes_transferred: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise _field_error(
                    f"All fields in CostEstimate must be ints. {f.name} is not an int: "
                    f"{type(v)}({v})",
                    "give counts as Python ints: CostEstimate(flops=int(n), ...)",
                )


def _field_error(message: str, fix: str) -> TraceError:
    return TraceError(message, loc=user_location(), fix=fix)


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
    # the spec's ``Buffered`` (None: Mosaic's default); anything else is carried as given, for
    # the TPU lowering to refuse as upstream's does (the CPU ignores it, as upstream's does)
    pipeline_mode: Buffered | Any = None

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

    ``cost_estimate`` and ``metadata`` (``(key, value)`` strings, in the order given) go to the
    ``tpu_custom_call`` that runs the kernel on a TPU, as upstream's; no backend's values
    depend on them, nor on ``vmem_limit_bytes``.
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
    cost_estimate: CostEstimate | None = None
    metadata: tuple[tuple[str, str], ...] = ()
    # upstream's ``fuse_transposed_lhs_in_matmul``: a matmul whose left side is contracted over
    # its first dim carries ``transpose_lhs_hint`` (a hint to Mosaic; the values are the same)
    fuse_transposed_lhs: bool = False
    # upstream's ``vmem_limit_bytes``: the VMEM Mosaic may scope for the kernel (None: its
    # default). The user's, or set by ``fuse-grid-steps`` when its windows need more
    vmem_limit_bytes: int | None = None

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
        """The kernel as text: name, grid (and dimension semantics), its cost estimate and
        metadata if given, each block spec's array, block, pipeline mode (if not the default)
        and index map, then the body (what a kernel pass changes, all of it)."""
        semantics = f" {list(self.dimension_semantics)}" if self.dimension_semantics else ""
        lines = [f"kernel {self.name}: grid {self.grid}{semantics}"]
        if self.cost_estimate is not None:
            lines.append(f"  {self.cost_estimate}")
        if self.metadata:
            lines.append(f"  metadata {dict(self.metadata)}")
        if self.vmem_limit_bytes is not None:
            lines.append(f"  vmem limit {self.vmem_limit_bytes} bytes")
        for role, specs in (("input", self.in_specs), ("output", self.out_specs)):
            for k, spec in enumerate(specs):
                block = "x".join("*" if n is None else str(n) for n in spec.block_shape)
                mode = "" if spec.pipeline_mode is None else f" {spec.pipeline_mode}"
                lines.append(f"  {role} {k}: {spec.array} in blocks [{block}]{mode}, index map:")
                lines += [f"    {line}" for line in str(spec.index_map).splitlines()]
        return "\n".join([*lines, str(self.body)])


DEFAULT_MEMORY_SPACE = ANY
