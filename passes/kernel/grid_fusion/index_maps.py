"""How a block spec's index map moves along one grid axis, and the index map of a fused window.

Grid-step fusion runs ``c`` consecutive steps of an axis as one. An operand can take part when,
along that axis, its block index either stays put in every dimension (the window is the block)
or advances by exactly one block in one dimension: then ``c`` consecutive blocks are one
contiguous window ``c`` blocks long, and its index, counted in windows, is the old index map's
at the window's first step divided by ``c``. Anything else (a stride other than one, two moving
dimensions, a data-dependent or non-affine index, an element-indexed or squeezed dimension that
moves) keeps the axis from being fused.

The analysis reads the index map's IR: each value is an affine form of the grid indices
(``Affine``) when it is built from them by integer ``constant``, ``add``, ``sub``, ``mul`` by a
constant and ``convert``; and "depends on the axis" is plain dataflow, so an index read from a
scalar-prefetch table that does not use the axis still counts as staying put.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from minipallas.ir import dtypes
from minipallas.ir.builder import Builder, params
from minipallas.ir.core import Function, Value
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.literal import Literal
from minipallas.ir.types import ArrayType, RefType


@dataclass(frozen=True)
class Affine:
    """``const + sum(coeffs[i] * grid_index[i])``."""

    coeffs: tuple[int, ...]
    const: int

    def plus(self, other: Affine, sign: int = 1) -> Affine:
        coeffs = tuple(a + sign * b for a, b in zip(self.coeffs, other.coeffs, strict=True))
        return Affine(coeffs, self.const + sign * other.const)

    def times(self, k: int) -> Affine:
        return Affine(tuple(a * k for a in self.coeffs), self.const * k)

    def divided(self, k: int) -> Affine | None:
        """``self / k`` when every term is a multiple of ``k`` (so no rounding); else None."""
        if any(a % k for a in (*self.coeffs, self.const)):
            return None
        return Affine(tuple(a // k for a in self.coeffs), self.const // k)

    @property
    def constant(self) -> bool:
        return not any(self.coeffs)


@dataclass(frozen=True)
class Motion:
    """How one operand's block moves along the fused axis. ``dim``: the array dimension that
    advances one block a step (None: the block stays put); ``ref_dim``: that dimension in the
    kernel's view of the block (squeezed dimensions left out); ``modulus``: what the rest of
    that dimension's index is a multiple of (0: it is always 0), which the factor must divide."""

    dim: int | None = None
    ref_dim: int | None = None
    modulus: int = 0

    def allows(self, factor: int) -> bool:
        return self.modulus % factor == 0


STAYS = Motion()


def motion(spec: TracedBlockSpec, axis: int) -> Motion | None:
    """How ``spec``'s block moves along grid ``axis``; None when fusion cannot follow it."""
    fn = spec.index_map
    forms = _affine_forms(fn)
    moving = [d for d, r in enumerate(fn.body.results) if _depends(fn, r, fn.params[axis])]
    if not moving:
        return STAYS
    if len(moving) > 1:
        return None
    (dim,) = moving
    form = forms.get(fn.body.results[dim])
    if form is None or form.coeffs[axis] != 1:
        return None
    if dim in spec.element_dims or spec.block_shape[dim] is None or any(spec.pads[dim]):
        return None
    rest = [c for i, c in enumerate(form.coeffs) if i != axis]
    modulus = math.gcd(form.const, *rest)
    return Motion(dim, dim - sum(spec.squeezed[:dim]), modulus)


def window_spec(spec: TracedBlockSpec, move: Motion, axis: int, factor: int) -> TracedBlockSpec:
    """``spec`` for a step that runs ``factor`` of the old ones: the block ``factor`` times
    longer along the moving dimension, indexed in windows. A block that stays put is kept."""
    if move.dim is None:
        return spec
    shape = list(spec.block_shape)
    shape[move.dim] *= factor
    ref_shape = list(spec.ref_type.shape)
    ref_shape[move.ref_dim] *= factor
    old = spec.ref_type
    return replace(  # every other field (Element dims, padding, pipeline mode) as it was
        spec,
        block_shape=tuple(shape),
        index_map=_window_map(spec.index_map, move.dim, axis, factor),
        ref_type=RefType(tuple(ref_shape), old.dtype, old.memory_space),
    )


def _window_map(old: Function, dim: int, axis: int, factor: int) -> Function:
    """``(g...) -> old(g with g[axis] * factor)``, dimension ``dim`` divided by ``factor``:
    the old map's ops copied in (not called), so the window map is as plain to analyse."""
    b = Builder()
    args = params(old.param_types)
    scale = b.create("constant", attrs={"value": Literal.of(factor, "int32")}).result
    env: dict[Value, Value] = dict(zip(old.params, args, strict=True))
    env[old.params[axis]] = b.create("mul", [args[axis], scale]).result
    for op in old.body.ops:
        new = op.renamed(tuple(env.get(v, v) for v in op.operands))
        env.update(zip(op.results, new.results, strict=True))
        b.add(new)
    results = [env.get(v, v) for v in old.body.results]
    if results[dim].type != ArrayType((), "int32"):
        results[dim] = b.create("convert", [results[dim]], {"dtype": "int32"}).result
    results[dim] = b.create("div", [results[dim], scale]).result
    return b.function(old.name, args, results)


def _affine_forms(fn: Function) -> dict[Value, Affine]:
    """The values of ``fn``'s top level that are affine in its grid parameters (the ones of
    integer scalar type; scalar-prefetch refs are not)."""
    grid = [p for p in fn.params if _int_scalar(p)]
    n = len(grid)
    forms = {p: Affine(tuple(int(i == k) for i in range(n)), 0) for k, p in enumerate(grid)}
    for op in fn.body.ops:
        got = [forms.get(v) for v in op.operands]
        form = None
        if op.name == "constant" and _int_scalar(op.result):
            form = Affine((0,) * n, int(op.attrs["value"].array()))
        elif None in got or len(op.results) != 1 or not _int_scalar(op.result):
            continue
        elif op.name in ("add", "sub"):
            form = got[0].plus(got[1], 1 if op.name == "add" else -1)
        elif op.name == "mul" and (got[0].constant or got[1].constant):
            k, other = (got[0], got[1]) if got[0].constant else (got[1], got[0])
            form = other.times(k.const)
        elif op.name == "convert":
            form = got[0]
        elif op.name == "div" and got[1].constant and got[1].const:
            form = got[0].divided(got[1].const)
        if form is not None:
            forms[op.result] = form
    return forms


def _depends(fn: Function, value: Value, on: Value) -> bool:
    """Whether ``value`` is computed from ``on`` (through any op of ``fn``'s top level)."""
    tainted = {on}
    for op in fn.body.ops:
        if any(v in tainted for v in op.operands):
            tainted.update(op.results)
    return value in tainted


def _int_scalar(value: Value) -> bool:
    t = value.type
    return isinstance(t, ArrayType) and t.shape == () and dtypes.is_int(t.dtype)


def rebuilt(
    kernel: Kernel, body: Function, axis: int, steps: int, specs: list[TracedBlockSpec], **more
) -> Kernel:
    """``kernel`` with ``body``, ``steps`` steps along grid ``axis``, and ``specs`` (its
    inputs', then its outputs') in place of its own: a fused or widened kernel."""
    grid = list(kernel.grid)
    grid[axis] = steps
    ins, outs = specs[: kernel.num_inputs], specs[kernel.num_inputs :]
    return replace(
        kernel, body=body, grid=tuple(grid), in_specs=tuple(ins), out_specs=tuple(outs), **more
    )
