"""The parameters upstream's ops and block specs take, drawn for random kernels (issue 46).

A compiler that reads some of an op's parameters and drops the rest changes what a kernel
means without a word; a fuzzer that never draws a parameter never sees it dropped. So a random
kernel (``kernels.random_kernel(c, params=...)``) may also carry, each with modest chance
(``CHANCES``):

- ``dot``: a step ``value + max(dot(value, x.T, precision=..., preferred_element_type=...),
  axis=-1) / 16`` (``x`` the first input's block), ``precision`` one of ``PRECISIONS`` (None,
  DEFAULT, HIGHEST, HIGH, or HIGHEST for the left operand and DEFAULT for the right), the
  product's dtype None (the operands'), float32 or bfloat16; only on 2-D blocks;
- ``reciprocal``: ``value + reciprocal(abs(value) + 1, approx=...)`` in float32 (the only
  dtype upstream's Mosaic rule takes), "exact" or "approx";
- ``accuracy``: ``value + exp(value / 8, accuracy=HIGHEST)`` (or ``tanh``), which upstream's
  Mosaic rules refuse ("Not implemented: accuracy"), and minipallas everywhere;
- ``buffered``: ``pipeline_mode=Buffered(n)`` on one block spec (an input's or, ``-1``, the
  output's), ``n`` in 1, 2, 3 (upstream's Mosaic lowering takes 1 and 2);
- ``multiple_of``: the grid index the body adds computed as ``multiple_of(i * 8, 8) // 8``;
  ``IndexMap.multiple_of``: an index map's block indices as ``multiple_of(b * 2, 2) // 2``;
- ``mul_out``: ``value = (mul(value, x, out_dtype=...) * 3).astype(dtype)`` (``x`` the last
  input's block), ``lax.mul``'s ``out_dtype``: the other float dtype (a float32 kernel's
  bfloat16, a bfloat16 kernel's float32) or, for bfloat16 kernels, bfloat16; the ``* 3``
  rounds in ``out_dtype``, so a dropped one changes bits.

No step feeds an inexact float32 product to an add: XLA:CPU may contract such a pair into a
fused multiply-add in one program and not in another (``envelope.perturb``, rule 2), which
would be all the fuzzers found. (A float32 ``mul`` with ``out_dtype=float32`` is therefore not
drawn: its product would meet the kernel's adds.)

Each step is a function over the kernel's namespace (``dot``, ``precision``, ``reciprocal``,
``accurate``, ``multiple_of``, ``mul``, ``Buffered``, ``float32``), so minipallas and upstream
run the same step. The draws come from their own ``Choices``: a campaign draws them from a
second generator, so each seed's kernels are the kernels it drew before, with parameters on
some of them (``parameters`` says which, for the fuzzers' coverage tables).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minipallas.tools.generate.choices import Choices

if TYPE_CHECKING:
    from minipallas.tools.generate.kernels import KernelSpec

# lax.Precision names, one for both operands or a pair; None: no precision given
PRECISIONS: tuple[tuple[str, ...] | None, ...] = (
    None,
    ("DEFAULT",),
    ("HIGHEST",),
    ("HIGH",),
    ("HIGHEST", "DEFAULT"),
)
CHANCES = {  # per kernel, each drawn apart
    "dot": 0.5,  # of kernels with 2-D blocks (about a quarter of them)
    "reciprocal": 0.15,
    "accuracy": 0.04,
    "buffered": 0.15,
    "multiple_of": 0.1,  # the body's index, and apart from it an index map's
    "mul_out": 0.1,
}


def generator(seed: int) -> random.Random:
    """Where a campaign of seed ``seed`` draws its kernels' parameters: a generator apart from
    the kernels' own, so the kernels are those the seed drew before parameters were drawn."""
    return random.Random(f"kernel parameters {seed}")


@dataclass(frozen=True)
class Dot:
    """The dot step's parameters: ``precision`` (an entry of ``PRECISIONS``) and the
    product's dtype (``preferred_element_type``; None: the operands')."""

    precision: tuple[str, ...] | None = None
    out: str | None = None

    def __str__(self) -> str:
        precision = "None" if self.precision is None else ",".join(self.precision)
        return f"{precision}/{self.out}"


def draw(spec: KernelSpec, c: Choices) -> KernelSpec:
    """``spec`` with parameters drawn from ``c`` (module doc). A dot's blocks are at most 2 a
    side (``_halved``): on the TPU a side is then 128 or 256 (``kernels.tpu_sized``)."""
    changes: dict[str, Any] = {}
    if len(spec.block) == 2 and None not in spec.block and c.chance(CHANCES["dot"]):
        precision = c.weighted(list(zip((2, 2, 3, 1, 1), PRECISIONS, strict=True)))
        out = c.weighted([(2, None), (2, "float32"), (1, "bfloat16")])
        spec = dataclasses.replace(_halved(spec), dot=Dot(precision, out))
    if c.chance(CHANCES["reciprocal"]):
        changes["reciprocal"] = c.weighted([(1, "exact"), (2, "approx")])
    if c.chance(CHANCES["accuracy"]):
        changes["accuracy"] = c.pick(("exp", "tanh"))
    if c.chance(CHANCES["buffered"]):
        operand = c.integer(-1, len(spec.inputs) - 1)  # -1: the output
        changes["buffered"] = (operand, c.weighted([(2, 1), (2, 2), (1, 3)]))
    if c.chance(CHANCES["multiple_of"]):
        changes["multiple_of"] = True
    operands = [*spec.inputs, spec.output]
    mapped = [k for k, o in enumerate(operands) if set(o.index_map.kinds) != {"const"}]
    if mapped and c.chance(CHANCES["multiple_of"]):
        k = c.pick(mapped)
        o = operands[k]
        operands[k] = dataclasses.replace(
            o, index_map=dataclasses.replace(o.index_map, multiple_of=True)
        )
        changes["inputs"], changes["output"] = tuple(operands[:-1]), operands[-1]
    if c.chance(CHANCES["mul_out"]):
        f32 = spec.dtype == "float32"
        changes["mul_out"] = "bfloat16" if f32 else c.weighted([(3, "float32"), (1, "bfloat16")])
    return dataclasses.replace(spec, **changes)


def _halved(spec: KernelSpec) -> KernelSpec:
    """``spec`` with blocks of 4 halved, each array dimension keeping its count of blocks (a
    partial last block stays partial), so every map reaches what it reached: the same blocks in
    bounds, the same one short."""

    def operand(o: Any) -> Any:  # noqa: ANN401 - an Operand
        shape = [
            n if b != 4 else -(-n // 4) * 2 - (n % 4 != 0)
            for n, b in zip(o.shape, spec.block, strict=True)
        ]
        return dataclasses.replace(o, shape=tuple(shape))

    return dataclasses.replace(
        spec,
        block=tuple(2 if b == 4 else b for b in spec.block),
        inputs=tuple(map(operand, spec.inputs)),
        output=operand(spec.output),
    )


def parameters(spec: KernelSpec) -> dict[str, str]:
    """The parameters ``spec`` draws, by name, each value as a coverage table shows it
    (``dot precision``: ``HIGHEST``...; parameters not drawn are absent)."""
    out: dict[str, str] = {}
    if spec.dot is not None:
        p = spec.dot.precision
        out["dot precision"] = "None" if p is None else ",".join(p)
        out["preferred_element_type"] = str(spec.dot.out)
    if spec.reciprocal is not None:
        out["reciprocal"] = spec.reciprocal
    if spec.accuracy is not None:
        out["accuracy"] = spec.accuracy
    if spec.buffered is not None:
        out["pipeline_mode"] = f"Buffered({spec.buffered[1]})"
    aligned = [o.index_map.multiple_of for o in (*spec.inputs, spec.output)]
    if spec.multiple_of or any(aligned):
        out["multiple_of"] = "+".join(
            w for w, on in (("body", spec.multiple_of), ("map", any(aligned))) if on
        )
    if spec.mul_out is not None:
        out["mul out_dtype"] = spec.mul_out
    return out


def plain(spec: KernelSpec) -> KernelSpec:
    """``spec`` with no parameter drawn (its block as the dot left it)."""

    def unaligned(o: Any) -> Any:  # noqa: ANN401 - an Operand
        return dataclasses.replace(o, index_map=dataclasses.replace(o.index_map, multiple_of=False))

    return dataclasses.replace(
        spec, dot=None, reciprocal=None, accuracy=None, buffered=None, multiple_of=False,
        mul_out=None, inputs=tuple(map(unaligned, spec.inputs)), output=unaligned(spec.output),
    )  # fmt: skip


# -- the steps, over a kernel's namespace ----------------------------------------------------


def grid_index(spec: KernelSpec, ns: Any, axis: int, dtype: Any) -> Any:  # noqa: ANN401
    """The grid index the body adds, as a float of the kernel's dtype."""
    i = ns.program_id(axis)
    if not spec.multiple_of:
        return i.astype(dtype)
    return (ns.multiple_of(i * 8, 8) // 8).astype(dtype)  # the same value


def steps(spec: KernelSpec, ns: Any, value: Any, x_refs: Any, dtype: Any) -> Any:  # noqa: ANN401
    """``value`` after the parameter steps ``spec`` draws (module doc), in a fixed order."""
    if spec.dot is not None:
        p = spec.dot.precision
        precision = None if p is None else tuple(ns.precision(n) for n in p)
        if precision is not None and len(precision) == 1:
            precision = precision[0]
        out = None if spec.dot.out is None else getattr(ns, spec.dot.out)
        x = x_refs[0][...]
        g = ns.dot(value, x.T, precision=precision, preferred_element_type=out)
        value = value + g.max(axis=-1, keepdims=True).astype(dtype) * 0.0625
    if spec.reciprocal is not None:
        wide = (abs(value) + 1.0).astype(ns.float32)
        r = ns.reciprocal(wide, approx=spec.reciprocal == "approx")
        value = value + r.astype(dtype)
    if spec.accuracy is not None:
        value = value + ns.accurate(spec.accuracy, value * 0.125)
    if spec.mul_out is not None:
        product = ns.mul(value, x_refs[-1][...], getattr(ns, spec.mul_out))
        value = (product * 3.0).astype(dtype)
    return value


def block_index(ns: Any, b: Any) -> Any:  # noqa: ANN401
    """A block index ``b`` computed through an alignment promise: the same value."""
    return ns.multiple_of(b * 2, 2) // 2


def pipeline_mode(spec: KernelSpec, ns: Any, operand: int) -> dict[str, Any]:
    """The block spec's ``pipeline_mode`` keyword for ``operand`` (-1: the output), if any."""
    if spec.buffered is None or spec.buffered[0] != operand:
        return {}
    return {"pipeline_mode": ns.Buffered(spec.buffered[1])}
