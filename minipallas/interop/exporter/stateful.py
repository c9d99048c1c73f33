"""The exporter's second output: a minipallas program over refs as upstream JAX, ``emit(fn)``.

``to_jax`` (``engine``) discharges first and gives a function of arrays that means what the
interpreter means on every backend, spelling that meaning out in ``jax.lax`` (integer division
by zero, saturating float-to-int ``convert``, float32 transcendentals for bfloat16...). ``emit``
keeps the refs and writes upstream's own primitives: ``ref[idx]`` reads, ``ref.at[...]`` views,
``pl.load``/``pl.store``, ``lax.fori_loop``/``while_loop``/``switch``, ``pl.run_scoped``,
``jax.jit`` for calls, ``lax.div`` as it is. That is its purpose: the differential tester
(``minipallas.tools.difftest``) traces it (``trace(fn)``, ``AbstractRef`` inputs),
discharges it with upstream's ``discharge_state`` and compares, so upstream's discharge and
primitives are what is
tested, and spelling minipallas's meaning into them would test nothing. The two outputs share
the rules whose ``to_jax`` form is already one upstream primitive (``AS_TO_JAX`` in
``rules/emit.py``, where emit's rules are: elementwise ops, shapes, the structural ops,
``debug_print``); the rest differ on purpose.

The emitter is an interpreter over the IR whose values are JAX tracers (autodidax's shape): an
environment from ``Value`` to tracer, one rule per op. Regions are emitted as Python closures,
so a body sees its parameters bound to the outer tracers its region op passes in; only loop
carries and branch indices go through the ``lax`` control-flow calls, as in hand-written JAX.

Where upstream's defined behaviour differs from minipallas's, the emitted code states
minipallas's meaning explicitly, so the two programs compute the same thing:

- negative dynamic indices: minipallas clamps them to 0, upstream first adds the dimension
  once, so signed indices pass through ``max(i, 0)`` (and a negative integer-array index
  that a write must drop becomes the largest ``int32``, which upstream's scatter drops too);
- Pallas ``load``/``store`` windows (upstream pads past the end instead of clamping) and
  indexers upstream discharges as a gather or scatter (it clamps or drops each position
  separately instead of shifting the window back inside): their dynamic starts and integers
  are clamped into range first, as minipallas clamps them. A 0-d integer array in a Pallas
  ``load`` window is a scalar index to upstream (its padded window, not a gather), so it is
  clamped too: an index past the end would read the fill value where minipallas's gather
  clamps (a write drops it on both sides already).

Everything else (upstream's clamping of plain dynamic windows, its views, loops, scratch and
calls) is left to upstream, which is what the fuzzer tests. A ``for`` with constant bounds
becomes a ``fori_loop`` with Python-int bounds (so a ``scan``), any other a ``while_loop``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax import lax
from jax.experimental import pallas as pl

from minipallas.ir import dtypes, indexing
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType, RefType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_types


class EmitError(MiniPallasError):
    """The program uses an op the emitter cannot express as upstream JAX."""


Rule = Callable[["Emitter", Op, list], Sequence[Any]]
_INDEX_SCALARS = {ArrayType((), d) for d in dtypes.NAMES if dtypes.is_int(d)}
RULES: RuleTable[Rule] = RuleTable("JAX emission rule")
rule = RULES.register


class Emitter:
    """Runs IR blocks on JAX tracers; callees are emitted once and shared between calls."""

    def __init__(self) -> None:
        self.callees: dict[int, Callable[..., Any]] = {}
        self.constants: dict[Value, int] = {}  # integer scalar constants, by value

    def block(self, block: Block, args: Sequence[Any]) -> list[Any]:
        env = dict(zip(block.params, args, strict=True))
        for op in block.ops:
            rule = RULES.get(op.name)
            if rule is None:
                raise EmitError(
                    f"no JAX emission rule for '{op.name}'",
                    op=op.name,
                    loc=op.loc,
                    fix="emit programs before discharge (the generator's programs)",
                )
            outs = rule(self, op, [env[v] for v in op.operands])
            if op.name == "constant" and op.attrs["value"].type in _INDEX_SCALARS:
                self.constants[op.results[0]] = int(op.attrs["value"].array())
            env.update(zip(op.results, outs, strict=True))
        return [env[r] for r in block.results]

    def function(self, fn: Function) -> Callable[..., tuple]:
        def upstream(*args: Any) -> tuple:  # noqa: ANN401
            return tuple(self.block(fn.body, args))

        upstream.__name__ = upstream.__qualname__ = fn.name
        return upstream


def emit(fn: Function) -> Callable[..., tuple]:
    """``fn`` as a JAX function over refs (for ``Ref`` parameters) and arrays; returns a tuple
    of ``fn``'s results. Refs are written in place, as ``fn`` writes them."""
    return Emitter().function(fn)


def abstract_args(fn: Function) -> list[Any]:
    """The abstract inputs to trace ``emit(fn)`` with: ``AbstractRef`` s and shape structs."""
    out: list[Any] = []
    for t in fn.param_types:
        if isinstance(t, RefType):
            out.append(
                state_types.AbstractRef(jax_core.ShapedArray(t.shape, dtypes.to_numpy(t.dtype)))
            )
        else:
            out.append(jax.ShapeDtypeStruct(t.shape, dtypes.to_numpy(t.dtype)))
    return out


def trace(fn: Function) -> Any:  # noqa: ANN401 - a jax ClosedJaxpr
    """The upstream jaxpr of ``emit(fn)``."""
    return jax.make_jaxpr(emit(fn))(*abstract_args(fn))


# -- indices -------------------------------------------------------------------------------


def _nonneg(x: Any) -> Any:  # noqa: ANN401
    """``max(x, 0)``: upstream would add the dimension to a negative index. (For unsigned
    indices it keeps a constant index dynamic: upstream reads a literal one as static and
    rejects it at trace time when it is out of range.)"""
    return lax.max(x, np.zeros((), x.dtype))


def _dropped_if_negative(x: Any) -> Any:  # noqa: ANN401
    """Write positions: negatives become the largest int32, which a scatter drops."""
    if not dtypes.is_signed(dtypes.canonicalize(x.dtype)):
        return x
    x = lax.convert_element_type(x, np.int32)
    big = np.iinfo(np.int32).max
    return lax.select(x < 0, lax.full_like(x, big), x)


def _clamped(x: Any, hi: int) -> Any:  # noqa: ANN401
    """``x`` clamped into ``[0, hi]`` (in int32 if ``hi`` does not fit ``x``'s dtype)."""
    if hi > np.iinfo(x.dtype).max:
        x = lax.convert_element_type(x, np.int32)
    return lax.clamp(np.zeros((), x.dtype), x, np.asarray(hi, x.dtype))


def gathers(indexer: tuple) -> bool:
    """Whether upstream's discharge indexes with a gather/scatter: an integer array or a
    strided slice in the indexer. Its dynamic slices are then positions ``start + k*stride``
    clamped (reads) or dropped (writes) one by one, and its dynamic integers too, where
    minipallas shifts a window back inside as a whole and clamps integers."""
    return any(isinstance(e, Array) or (isinstance(e, Slice) and e.stride > 1) for e in indexer)


def index(
    indexer: tuple, shape: Sequence[int], dyn: Sequence[Any], *, write: bool, window: bool
) -> tuple:
    """The numpy-style index for an IR indexer, with minipallas's meaning made explicit.

    ``write``: integer-array positions are write positions (out-of-range ones are dropped);
    ``window``: a Pallas ``load``/``store`` window. Dynamic starts and integers are clamped
    into range here where upstream would not clamp them as minipallas does: in Pallas
    windows (upstream pads) and in indexers upstream turns into a gather (see ``gathers``).
    """
    whole = window or gathers(indexer)
    out: list[Any] = []
    for entry, dim in zip(indexer, shape, strict=True):
        if isinstance(entry, Int):
            i = entry.index
            if isinstance(i, Dyn):
                i = _clamped(dyn[i.pos], dim - 1) if whole else _nonneg(dyn[i.pos])
            out.append(i)
        elif isinstance(entry, Slice):
            span = indexing.span(entry)
            if isinstance(entry.start, Dyn):
                start = dyn[entry.start.pos]
                start = _clamped(start, dim - span) if whole else _nonneg(start)
                out.append(pl.ds(start, entry.size, entry.stride))
            elif (entry.start, entry.size, entry.stride) == (0, dim, 1):
                out.append(slice(None))
            else:
                out.append(slice(entry.start, entry.start + span, entry.stride))
        elif isinstance(entry, Array):
            i = dyn[entry.index.pos]
            if write:
                out.append(_dropped_if_negative(i))
            elif window and np.ndim(i) == 0:  # a scalar to upstream's padded window
                out.append(_clamped(i, dim - 1))
            else:
                out.append(_nonneg(i))
    return tuple(out)
