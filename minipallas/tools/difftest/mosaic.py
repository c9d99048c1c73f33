"""Differential check of Mosaic TPU emission against upstream Pallas, on a CPU-only machine.

Upstream lowers a ``pallas_call`` for TPU without needing a TPU: ``jax.jit(f).trace(*specs)
.lower(lowering_platforms=("tpu",))`` runs Pallas's Mosaic lowering, which builds the kernel
module in ``jax._src.pallas.mosaic.lowering.lower_jaxpr_to_pipelined_module``.
``upstream_mosaic`` wraps that function for the duration of one lowering to capture the module
it returns, then canonicalizes it (what ``pallas_call(..., debug=True)`` prints). Known to work
with jax 0.10.2; about 0.1 s per kernel.

``compare(ours, theirs)`` puts two Mosaic modules side by side on what must agree for the TPU
compiler to see the same kernel: the kernel function's signature (argument types), its
attributes (``dimension_semantics``, ``iteration_bounds``, ``scalar_prefetch``,
``scratch_operands``, ``window_params``, ``tpu.core_type``), the multiset of op kinds in the
module, and the multiset of memref types. Function names and source locations are not
compared. The result lists each difference; an empty one means the modules agree. It also
says whether the whole texts are the same once locations, names and ``dimension_semantics``
are set aside (``same_text``): the strongest agreement, op order and operands included.
"""

from __future__ import annotations

import collections
import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jax

from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.compat.jax_private import mosaic_lowering, tpu_info
from minipallas.lowering.compat.jaxlib_shim import canonicalize, ir

KERNEL_ATTRIBUTES = (
    "dimension_semantics",
    "iteration_bounds",
    "scalar_prefetch",
    "scratch_operands",
    "window_params",
    "tpu.core_type",
)
_HOOK = "lower_jaxpr_to_pipelined_module"


class UpstreamError(MiniPallasError):
    """Upstream Pallas did not produce a Mosaic module (it rejected the kernel, or the hook
    this tool relies on moved)."""


def upstream_mosaic(f: Callable[..., Any], *specs: Any, chip: str = "TPU_V5E") -> ir.Module:
    """The canonicalized Mosaic module upstream Pallas builds for the one ``pallas_call`` that
    ``f`` (a function of jax arrays) makes, lowered for TPU on ``specs``
    (``jax.ShapeDtypeStruct``s or arrays). Raises ``UpstreamError`` with upstream's message
    when upstream rejects the kernel.

    Upstream checks rank-1 block shapes against the TPU's lane count, asking the local device;
    on a machine without a TPU, the device answers as ``chip`` (a ``tpu_info.ChipVersion``
    name) for the duration of the lowering."""
    with _capture() as modules, assume_chip(chip):
        try:
            jax.jit(f).trace(*specs).lower(lowering_platforms=("tpu",))
        except Exception as e:  # upstream's own error, whatever its class
            cause = e.__cause__ or e
            raise UpstreamError(
                f"upstream Pallas rejects the kernel: {type(cause).__name__}: {cause}"
            ) from e
    if len(modules) != 1:
        raise UpstreamError(
            f"expected one Mosaic module from upstream, captured {len(modules)}",
            fix=f"f must make exactly one pallas_call; check that jax still calls {_HOOK}",
        )
    canonicalize(modules[0])
    return modules[0]


@contextlib.contextmanager
def _capture() -> Iterator[list[ir.Module]]:
    """Wraps upstream's module builder so every module it returns is also kept here."""
    original = getattr(mosaic_lowering, _HOOK, None)
    if original is None:
        raise UpstreamError(f"jax._src.pallas.mosaic.lowering has no {_HOOK} in this jax")
    modules: list[ir.Module] = []

    def wrapped(*args: Any, **kwargs: Any) -> ir.Module:
        module = original(*args, **kwargs)
        modules.append(module)
        return module

    setattr(mosaic_lowering, _HOOK, wrapped)
    try:
        yield modules
    finally:
        setattr(mosaic_lowering, _HOOK, original)


@contextlib.contextmanager
def assume_chip(chip: str) -> Iterator[None]:
    """Registers ``chip``'s TPU info for the local (non-TPU) device kind, through the registry
    ``jax._src.pallas.mosaic.tpu_info`` has for unknown device kinds."""
    kind = tpu_info.get_device_kind()
    if tpu_info.chip_version_from_device_kind(kind) is not None or kind in tpu_info.registry:
        yield
        return
    version = getattr(tpu_info.ChipVersion, chip)
    tpu_info.registry[kind] = lambda: tpu_info.get_tpu_info_for_chip(version, 1)
    try:
        yield
    finally:
        del tpu_info.registry[kind]
        tpu_info.get_tpu_info.cache_clear()


@dataclass(frozen=True)
class Summary:
    """What ``compare`` looks at in one module, as text (so modules from different MLIR
    contexts compare)."""

    signature: tuple[str, ...]
    attributes: dict[str, str]
    ops: collections.Counter[str]
    memrefs: collections.Counter[str]
    text: str


def summarize(module: ir.Module) -> Summary:
    """The kernel function's signature and attributes, and the module's op kinds and memref
    types. The kernel function is the one with ``dimension_semantics``."""
    kernel = None
    ops: collections.Counter[str] = collections.Counter()
    memrefs: collections.Counter[str] = collections.Counter()
    for op in _walk(module.operation):
        ops[op.name] += 1
        if op.name == "func.func" and "dimension_semantics" in op.attributes:
            kernel = op
        for value in (*op.results, *_block_arguments(op)):
            if isinstance(value.type, ir.MemRefType) or str(value.type).startswith("memref<"):
                memrefs[str(value.type)] += 1
    if kernel is None:
        raise MiniPallasError("the module has no kernel function (none has dimension_semantics)")
    signature = tuple(str(a.type) for a in kernel.regions[0].blocks[0].arguments)
    attributes = {
        name: str(kernel.attributes[name])
        for name in KERNEL_ATTRIBUTES
        if name in kernel.attributes
    }
    return Summary(signature, attributes, ops, memrefs, normalized_text(module))


def normalized_text(module: ir.Module) -> str:
    """The module's text without locations, with the kernel function named ``@kernel``,
    without ``dimension_semantics`` or attributes of minipallas's own (``minipallas.*``), and
    with each ``arith.constant`` written at its uses instead of hoisted (so the order the
    canonicalizer hoists constants in does not matter): two modules with the same normalized
    text are the same kernel up to its grid semantics."""
    copy = ir.Module.parse(module.operation.get_asm(enable_debug_info=False), module.context)
    for op in _walk(copy.operation):
        if op.name == "func.func" and "dimension_semantics" in op.attributes:
            name = op.attributes["sym_name"].value
            for attr in list(op.attributes):
                if attr == "dimension_semantics" or attr.startswith("minipallas."):
                    del op.attributes[attr]
    text = copy.operation.get_asm(enable_debug_info=False).replace(f"@{name}(", "@kernel(")
    functions = re.split(r"(?m)^(?=  func\.func )", text)
    return "".join(_inline_constants(f) for f in functions)


_CONSTANT = re.compile(r"(?m)^\s*(%[\w]+) = arith\.constant (.*)\n")


def _inline_constants(text: str) -> str:
    """``text`` (one function) with constant definitions removed and their uses spelled out."""
    constants = dict(_CONSTANT.findall(text))
    text = _CONSTANT.sub("", text)
    if not constants:
        return text
    names = "|".join(re.escape(n) for n in sorted(constants, key=len, reverse=True))
    return re.sub(rf"({names})(?!\w)", lambda m: f"<{constants[m.group(1)]}>", text)


def _walk(op: ir.Operation) -> Iterator[ir.Operation]:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _walk(inner.operation)


def _block_arguments(op: ir.Operation) -> Iterator[ir.Value]:
    for region in op.regions:
        for block in region.blocks:
            yield from block.arguments


@dataclass(frozen=True)
class MosaicDiff:
    """How two Mosaic modules differ; each field is empty when they agree on it.

    ``signature`` and ``attributes`` map to ``(ours, theirs)``; ``ops`` and ``memrefs`` map a
    kind to ``ours - theirs`` counts (positive: we have more).
    """

    signature: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    attributes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    ops: dict[str, int] = field(default_factory=dict)
    memrefs: dict[str, int] = field(default_factory=dict)
    same_text: bool = True

    def __bool__(self) -> bool:
        return bool(self.signature or self.attributes or self.ops or self.memrefs)

    def __str__(self) -> str:
        if not self:
            return "the modules agree"
        lines = []
        if self.signature:
            lines.append(f"signature: ours {self.signature[0]}, upstream {self.signature[1]}")
        for name, (a, b) in self.attributes.items():
            lines.append(f"attribute {name}: ours {a}, upstream {b}")
        for what, counts in (("op", self.ops), ("memref", self.memrefs)):
            for kind, n in sorted(counts.items()):
                lines.append(f"{what} {kind}: {n:+d} in ours")
        return "\n".join(lines)


def compare(ours: ir.Module, theirs: ir.Module) -> MosaicDiff:
    """The differences between our module and upstream's (see the module doc)."""
    a, b = summarize(ours), summarize(theirs)
    attributes = {
        name: (a.attributes.get(name), b.attributes.get(name))
        for name in KERNEL_ATTRIBUTES
        if a.attributes.get(name) != b.attributes.get(name)
    }
    return MosaicDiff(
        signature=None if a.signature == b.signature else (a.signature, b.signature),
        attributes=attributes,
        ops=_difference(a.ops, b.ops),
        memrefs=_difference(a.memrefs, b.memrefs),
        same_text=a.text == b.text,
    )


def _difference(a: collections.Counter[str], b: collections.Counter[str]) -> dict[str, int]:
    return {k: a[k] - b[k] for k in sorted(set(a) | set(b)) if a[k] != b[k]}
