"""Differential check of the GPU path against upstream Pallas's Triton backend.

``upstream_triton(f, *specs)`` obtains the Triton module upstream Pallas emits for a jax
function that calls ``pl.pallas_call(..., compiler_params=plgpu.CompilerParams())``, on a
machine without a GPU: it lowers ``jax.jit(f)`` for ``"cuda"`` and captures what
``jax._src.pallas.triton.lowering.lower_jaxpr_to_triton_module`` returns (known to work with
jax 0.10.2). ``summarize`` reads a module (either side's) into what the comparison looks at:

- ``signature``: the kernel's argument types and attributes;
- ``tt_ops``: how many of each ``tt`` op kind;
- ``traffic``: every ``tt.load`` / ``tt.store`` as (kind, operand, shape, masked), the operand
  found by following the pointer back through ``tt.addptr`` / ``tt.splat`` / ``tt.broadcast``
  / ``tt.bitcast``...;
- ``dead_loads``: loads whose value nothing observable uses (upstream lowers every store as a
  swap);
- ``unfolded``: integer ``arith`` ops with a neutral constant operand (``x * 1``, ``x + 0``).

``compare`` lines the two up; upstream's known weaknesses are reported as such, not as
differences: minipallas emits no dead loads, masks blocks that overhang the array, and folds
index arithmetic.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jax

from minipallas.lowering.compat.jax_private import triton_lowering
from minipallas.lowering.compat.jaxlib_shim import ir, make_triton_context

_POINTER_OPS = (
    "tt.addptr",
    "tt.splat",
    "tt.broadcast",
    "tt.expand_dims",
    "tt.reshape",
    "tt.bitcast",
)
_INDEX_ARITH = ("arith.addi", "arith.subi", "arith.muli")


@dataclass(frozen=True)
class Access:
    kind: str  # "load" or "store"
    operand: int  # which kernel argument
    shape: tuple[int, ...]
    masked: bool


@dataclass
class TritonSummary:
    """What ``compare`` reads from one Triton module."""

    name: str
    signature: tuple[str, ...]
    tt_ops: Counter = field(default_factory=Counter)
    traffic: Counter = field(default_factory=Counter)
    dead_loads: Counter = field(default_factory=Counter)
    unfolded: int = 0
    op_count: int = 0

    def live_traffic(self) -> Counter:
        """The traffic without the dead loads."""
        return self.traffic - self.dead_loads


def upstream_triton(f: Callable[..., Any], *specs: Any) -> str:
    """The text of the Triton module upstream Pallas emits for ``f`` on ``specs``
    (``jax.ShapeDtypeStruct``s). ``f`` must call ``pallas_call`` with Triton compiler params.
    Raises whatever upstream raises for a kernel it does not support."""
    captured: list[str] = []
    original = triton_lowering.lower_jaxpr_to_triton_module

    @functools.wraps(original)
    def capture(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        captured.append(result.module.operation.get_asm(enable_debug_info=False))
        return result

    triton_lowering.lower_jaxpr_to_triton_module = capture
    try:
        jax.jit(f).trace(*specs).lower(lowering_platforms=("cuda",))
    finally:
        triton_lowering.lower_jaxpr_to_triton_module = original
    if len(captured) != 1:
        raise RuntimeError(f"expected one Triton kernel, upstream emitted {len(captured)}")
    return captured[0]


def summarize(module: str | ir.Module) -> TritonSummary:
    """Reads a Triton module (text, or a module of any context) into a ``TritonSummary``."""
    text = module if isinstance(module, str) else module.operation.get_asm(enable_debug_info=False)
    with make_triton_context():
        parsed = ir.Module.parse(text)
        (func,) = [op for op in parsed.body.operations if op.operation.name == "tt.func"]
        func = func.operation
        args = list(func.regions[0].blocks[0].arguments)
        attrs = func.attributes["arg_attrs"] if "arg_attrs" in func.attributes else None
        signature = tuple(
            f"{a.type} {attrs[i] if attrs is not None else ''}".strip() for i, a in enumerate(args)
        )
        summary = TritonSummary(ir.StringAttr(func.attributes["sym_name"]).value, signature)
        for op in _walk(func):
            name = op.name
            summary.op_count += 1
            if name.startswith("tt."):
                summary.tt_ops[name] += 1
            if name in ("tt.load", "tt.store"):
                access = _access(op, args)
                summary.traffic[access] += 1
                if name == "tt.load" and _dead(op.results[0]):
                    summary.dead_loads[access] += 1
            if name in _INDEX_ARITH and any(_neutral(name, v) for v in op.operands):
                summary.unfolded += 1
    return summary


def _walk(op: Any) -> Iterator[Any]:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _walk(inner.operation)


def _dead(value: Any) -> bool:
    """Nothing observable uses ``value``: it has no uses, or only pure ops whose results are
    dead (upstream converts a bool's dead load before storing it)."""
    for use in value.uses:
        user = use.owner
        pure = user.name.startswith(("arith.", "math.")) or user.name in _POINTER_OPS
        if not pure or user.regions or not all(_dead(r) for r in user.results):
            return False
    return True


def _access(op: Any, args: list[Any]) -> Access:
    pointer = op.operands[0]
    while isinstance(pointer.owner, ir.Operation | ir.OpView) and (
        pointer.owner.name in _POINTER_OPS
    ):
        pointer = pointer.owner.operands[0]
    operand = next((i for i, a in enumerate(args) if a == pointer), -1)
    ptr_type = op.operands[0].type
    shape = tuple(ptr_type.shape) if isinstance(ptr_type, ir.RankedTensorType) else ()
    n_plain = 1 if op.name == "tt.load" else 2  # ptr (, value); a mask follows
    kind = "load" if op.name == "tt.load" else "store"
    return Access(kind, operand, shape, len(op.operands) > n_plain)


def _neutral(name: str, value: Any) -> bool:
    """Whether ``value`` is a constant (or splat of one) that makes ``name`` a no-op."""
    owner = value.owner
    if not isinstance(owner, ir.Operation | ir.OpView):
        return False
    if owner.name == "tt.splat":
        return _neutral(name, owner.operands[0])
    if owner.name != "arith.constant":
        return False
    attr = owner.attributes["value"]
    if not isinstance(attr, ir.IntegerAttr):
        return False
    return attr.value == (1 if name == "arith.muli" else 0)


@dataclass(frozen=True)
class Comparison:
    """``ours`` against ``upstream``; the ``same_*`` flags are the checks, the rest the known
    differences, counted."""

    ours: TritonSummary
    upstream: TritonSummary

    @property
    def same_signature(self) -> bool:
        return self.ours.signature == self.upstream.signature

    @property
    def tt_kinds_only_ours(self) -> set[str]:
        return set(self.ours.tt_ops) - set(self.upstream.tt_ops)

    @property
    def tt_kinds_only_upstream(self) -> set[str]:
        return set(self.upstream.tt_ops) - set(self.ours.tt_ops)

    @property
    def same_traffic(self) -> bool:
        """Same loads and stores, once upstream's dead loads are dropped and masks ignored."""
        return _unmasked(self.ours.live_traffic()) == _unmasked(self.upstream.live_traffic())

    @property
    def upstream_dead_loads(self) -> int:
        return sum(self.upstream.dead_loads.values())

    @property
    def masks_only_ours(self) -> int:
        """Accesses minipallas masks (overhanging blocks) that upstream leaves unmasked."""
        ours = sum(n for a, n in self.ours.traffic.items() if a.masked)
        theirs = sum(n for a, n in self.upstream.live_traffic().items() if a.masked)
        return ours - theirs

    def report(self) -> str:
        lines = [
            f"{self.ours.name}: signature {'same' if self.same_signature else 'DIFFERS'}; "
            f"traffic {'same' if self.same_traffic else 'DIFFERS'}",
            f"  tt ops only here: {sorted(self.tt_kinds_only_ours) or '-'}; "
            f"only upstream: {sorted(self.tt_kinds_only_upstream) or '-'}",
            f"  upstream dead loads: {self.upstream_dead_loads}; masked accesses only here: "
            f"{self.masks_only_ours}; unfolded index ops: {self.ours.unfolded} here, "
            f"{self.upstream.unfolded} upstream; ops: {self.ours.op_count} here, "
            f"{self.upstream.op_count} upstream",
        ]
        return "\n".join(lines)


def compare(ours: str | ir.Module, upstream: str | ir.Module) -> Comparison:
    return Comparison(summarize(ours), summarize(upstream))


def _unmasked(traffic: Counter) -> Counter:
    out: Counter = Counter()
    for access, n in traffic.items():
        out[Access(access.kind, access.operand, access.shape, False)] += n
    return out
