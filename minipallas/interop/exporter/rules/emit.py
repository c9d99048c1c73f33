"""``emit``'s rules (``stateful.py``): each op as the upstream JAX a user would write over refs.

State ops and views as ``jax._src.state`` calls with minipallas's indices made explicit
(``stateful.index``), loops and branches as ``lax`` control flow over Python closures, scratch
as ``pl.run_scoped``; the array ops whose ``to_jax`` rule is one upstream primitive are
``to_jax``'s (``AS_TO_JAX``), the others upstream's own primitive as it is.
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
from minipallas.interop.exporter.stateful import EmitError, Emitter, index, rule
from minipallas.ir import dtypes
from minipallas.ir.core import Block, Function, Op
from minipallas.ir.opset.atomic import COMBINE
from minipallas.ir.opset.scans import CUMULATIVE
from minipallas.ir.types import ArrayType, RefType
from minipallas.lowering.compat.jax_private import lax_control_flow
from minipallas.lowering.compat.jax_private import pallas_primitives as pallas
from minipallas.lowering.compat.jax_private import state_primitives as state


def _np(dtype: str) -> np.dtype:
    return dtypes.to_numpy(dtype)


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
