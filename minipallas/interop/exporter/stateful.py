"""The exporter's second output: a minipallas program over refs as upstream JAX, ``emit(fn)``.

``to_jax`` (``engine``) discharges first and gives a function of arrays that means what the
interpreter means on every backend, spelling that meaning out in ``jax.lax`` (integer division
by zero, saturating float-to-int ``convert``, float32 transcendentals for bfloat16...). ``emit``
keeps the refs and writes upstream's own primitives: ``ref[idx]`` reads, ``ref.at[...]`` views,
``pl.load``/``pl.store``, ``lax.fori_loop``/``while_loop``/``switch``, ``pl.run_scoped``,
``jax.jit`` for calls, ``lax.div`` as it is. That is its purpose: the differential tester
(``minipallas.difftest``) traces it (``trace(fn)``, ``AbstractRef`` inputs), discharges it with
upstream's ``discharge_state`` and compares, so upstream's discharge and primitives are what is
tested, and spelling minipallas's meaning into them would test nothing. The two outputs share
the rules whose ``to_jax`` form is already one upstream primitive (``AS_TO_JAX``: elementwise
ops, shapes, the structural ops, ``debug_print``); the rest differ on purpose.

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
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu

from minipallas.interop.exporter.engine import RULES as TO_JAX
from minipallas.ir import dtypes, indexing
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.indexing import Array, Dyn, Int, Slice
from minipallas.ir.opset.atomic import COMBINE
from minipallas.ir.opset.scans import CUMULATIVE
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType, RefType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import lax_control_flow, state_types
from minipallas.lowering.compat.jax_private import pallas_primitives as pallas
from minipallas.lowering.compat.jax_private import state_primitives as state


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


def _np(dtype: str) -> np.dtype:
    return dtypes.to_numpy(dtype)


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


def _split(op: Op, args: list) -> tuple[Any, tuple, list]:
    """The ref, the numpy-style index and the value operands of a state op."""
    indexer, indices = op.attrs["indexer"], op.slices()["indices"]
    ref, dyn, rest = args[0], args[indices], args[indices.stop :]
    write = op.name in ("swap", "addupdate", "store")
    window = op.name in ("load", "store")
    shape = op.operands[0].type.shape
    return ref, index(indexer, shape, dyn, write=write, window=window), rest


# -- state ops and views -------------------------------------------------------------------


@rule("get")
def _get(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    ref, idx, _ = _split(op, args)
    return [state.ref_get(ref, idx)]


@rule("swap")
def _swap(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    ref, idx, (value,) = _split(op, args)
    return [state.ref_swap(ref, idx, value)]


@rule("addupdate")
def _addupdate(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    ref, idx, (value,) = _split(op, args)
    state.ref_addupdate(ref, idx, value)
    return []


@rule("load")
def _load(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    ref, idx, rest = _split(op, args)
    mask = rest[0] if op.attrs.get("masked") else None
    other = rest[1] if op.attrs.get("has_other") else None
    return [pallas.load(ref, idx, mask=mask, other=other)]


@rule("store")
def _store(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    ref, idx, rest = _split(op, args)
    mask = rest[1] if op.attrs.get("masked") else None
    pallas.store(ref, idx, rest[0], mask=mask)
    return []


@rule(*COMBINE)
def _atomic(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    """``plgpu.atomic_add``/``max``/``min``; upstream's discharge has no masked form."""
    if op.attrs.get("masked"):
        raise EmitError("upstream cannot interpret a masked atomic", op=op.name, loc=op.loc)
    ref, idx, rest = _split(op, args)
    return [getattr(plgpu, op.name)(ref, idx, rest[0])]


@rule("ref.at")
def _at(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    ref, idx, _ = _split(op, args)
    return [ref.at[idx]]


@rule("ref.reshape")
def _ref_reshape(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [args[0].reshape(*op.attrs["shape"])]


@rule("ref.bitcast")
def _ref_bitcast(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [args[0].bitcast(_np(op.attrs["dtype"]))]


@rule("ref.transpose")
def _ref_transpose(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [args[0].transpose(tuple(op.attrs["permutation"]))]


# -- scratch, control flow and calls -------------------------------------------------------


def _scratch(t: RefType) -> Any:  # noqa: ANN401
    """The Pallas allocation for a scratch ref (GPU spaces need jax's GPU extras: ``ANY``)."""
    space = {"tpu.vmem": pltpu.VMEM, "tpu.smem": pltpu.SMEM}.get(str(t.memory_space), pl.ANY)
    return space(t.shape, _np(t.dtype))


@rule("run_scoped")
def _run_scoped(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    (body,) = op.regions
    allocs = op.param_group("allocs")

    def scoped(*refs: Any) -> tuple:  # noqa: ANN401
        return tuple(e.block(body, [*refs, *args]))

    axes = tuple(op.attrs.get("collective_axes", ()))
    return list(pl.run_scoped(scoped, *(_scratch(p.type) for p in allocs), collective_axes=axes))


@rule("uninitialized")
def _uninitialized(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    t: ArrayType = op.attrs["type"]
    return [pallas.uninitialized_value(t.shape, _np(t.dtype))]


@rule("for")
def _for(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    (body,) = op.regions
    where = op.slices()
    (lower,), (upper,) = args[where["lower"]], args[where["upper"]]
    consts, inits = args[where["consts"]], args[where["inits"]]

    def step(i: Any, carry: tuple) -> tuple:  # noqa: ANN401
        return tuple(e.block(body, [i, *consts, *carry]))

    # Constant bounds become Python ints, so fori_loop makes a scan (as it does for user code
    # with literal bounds); other bounds make a while_loop.
    bounds = (*op.group("lower"), *op.group("upper"))
    if all(v in e.constants for v in bounds):
        lower, upper = (e.constants[v] for v in bounds)
    return list(lax.fori_loop(lower, upper, step, tuple(inits)))


@rule("while")
def _while(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    cond, body = op.regions
    where = op.slices()
    cond_consts, body_consts = args[where["cond_consts"]], args[where["body_consts"]]
    inits = args[where["inits"]]

    def keep_going(carry: tuple) -> Any:  # noqa: ANN401
        return e.block(cond, [*cond_consts, *carry])[0]

    def step(carry: tuple) -> tuple:
        return tuple(e.block(body, [*body_consts, *carry]))

    return list(lax.while_loop(keep_going, step, tuple(inits)))


@rule("cond")
def _cond(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    where = op.slices()
    (index_value,), operands = args[where["index"]], args[where["args"]]

    def branch(block: Block) -> Callable[[], tuple]:
        return lambda: tuple(e.block(block, operands))

    return list(lax.switch(index_value, [branch(b) for b in op.regions]))


@rule("call")
def _call(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    callee: Function = op.attrs["callee"]
    jitted = e.callees.get(id(callee))
    if jitted is None:
        jitted = e.callees[id(callee)] = jax.jit(e.function(callee))
    return list(jitted(*args))


@rule("program_id", "num_programs")
def _kernel_query(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    raise EmitError(
        f"'{op.name}' has no meaning outside a pallas_call",
        op=op.name,
        loc=op.loc,
        fix="emit the kernel body inside pl.pallas_call instead",
    )


# -- arrays --------------------------------------------------------------------------------


def _lax(name: str) -> Callable[..., Any]:
    return getattr(lax, name)


STRUCTURAL = ("reverse", "pad", *CUMULATIVE, "reduce_prod", "sort", "top_k", "argmax", "argmin")
# to_jax's rule for these is already the one upstream primitive (or call) emit would write
AS_TO_JAX = (
    *("add", "sub", "mul", "max", "min", "and", "or", "xor", "eq", "ne", "lt", "le", "gt", "ge"),
    *("floor", "ceil", "exp2", "expm1", "log1p", "erf", "erf_inv", "tan", "asin", "atan"),
    *("sinh", "cosh", "asinh", "cbrt", "population_count", "clz", "atan2", "nextafter"),
    *("shift_left", "shift_right_logical", "shift_right_arithmetic", "round", "round_even"),
    *("neg", "not", "abs", "select", "iota", "bitcast", "broadcast_in_dim", "reshape"),
    *("transpose", *STRUCTURAL, "debug_print"),
)
# to_jax spells minipallas's meaning out around these (division by zero, float32 for
# bfloat16/float16); upstream's discharge is tested on the primitives as they are
_OWN = ("div", "rem", "pow", "exp", "log", "tanh", "logistic", "sqrt", "rsqrt", "sin", "cos")


@rule(*AS_TO_JAX)
def _as_to_jax(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return TO_JAX[op.name](op, args)


@rule(*_OWN)
def _own(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    if op.name == "pow" and not dtypes.is_float(op.operands[0].type.dtype):
        raise EmitError("lax.pow has no integer form", op=op.name, loc=op.loc)
    return [_lax(op.name)(*args)]


@rule("constant")
def _constant(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [jnp.asarray(op.attrs["value"].array())]


@rule("convert")
def _convert(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [_lax("convert_element_type")(args[0], _np(op.attrs["dtype"]))]


@rule("packed_bitcast")
def _packed_bitcast(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [pltpu.bitcast(args[0], _np(op.attrs["dtype"]))]


@rule("roll")
def _roll(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    stride = dict(zip(("stride", "stride_axis"), op.attrs["stride"], strict=False))
    return [pltpu.roll(args[0], args[1], op.attrs["axis"], **stride)]


@rule("platform_index")
def _platform_index(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [lax_control_flow.platform_index_p.bind(platforms=op.attrs["platforms"])]


@rule("reduce_sum", "reduce_max", "reduce_min")
def _reduce(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [_lax(op.name)(args[0], tuple(op.attrs["axes"]))]


@rule("dot")
def _dot(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    batch = tuple(range(op.results[0].type.ndim - 2))
    dims = (((len(batch) + 1,), (len(batch),)), (batch, batch))
    dtype = _np(op.results[0].type.dtype)
    precision = op.attrs.get("precision")
    if precision is not None:
        precision = tuple(_lax("Precision")[p.upper()] for p in precision)
    return [_lax("dot_general")(*args, dims, precision=precision, preferred_element_type=dtype)]


@rule("reciprocal")
def _reciprocal(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [pl.reciprocal(args[0], approx=op.attrs["approx"], full_range=op.attrs["full_range"])]


@rule("multiple_of")
def _multiple_of(e: Emitter, op: Op, args: list) -> Sequence[Any]:
    return [pl.multiple_of(args[0], op.attrs["multiple"])]
