"""Import rules for control flow and calls: ``scan``, ``while``, ``cond``, ``jit``,
``closed_call``, ``call``, ``shard_map``, ``remat`` and the custom-derivative calls.

- ``scan`` becomes a ``for`` from 0 to ``length``. Its consts and its scanned operands (``xs``)
  are loop constants; iteration ``i`` reads element ``k`` (``i``, or ``length-1-i`` when
  reversed) of each scanned array with a ``dynamic_slice``, or takes the view ``ref.at[k]`` of
  each scanned ref (scanning over a ref). The per-iteration outputs (``ys``) are extra carries,
  written at ``k`` with a ``dynamic_update_slice``. ``fori_loop`` arrives as a ``scan`` (static
  trip count) or a ``while`` and needs nothing of its own.
- ``while`` maps one to one (condition consts, body consts, carries).
- ``cond`` maps one to one, with one difference covered: upstream's ``cond`` (XLA's ``case``)
  runs its last branch for a negative index where minipallas clamps to branch 0, so a negative
  index is replaced by the last branch's unless it is known non-negative (``lax.cond`` converts
  a bool, ``lax.switch`` clamps from 0).
- ``jit``, ``closed_call`` and ``call`` (``core.call``, its jaxpr open) become ``call``s of a
  function imported once per jaxpr;
- ``shard_map`` over a mesh whose manual axes have one device each (the CPU's one device) is
  its body on the whole arrays, inlined; over several devices, a ``mesh_call`` whose body is
  one device's program (``devices``); ``pvary`` (a type fact about mesh axes) is identity.
  ``remat`` (``jax.checkpoint``) and ``custom_jvp_call`` / ``custom_vjp_call`` are inlined:
  after differentiation they mean their primal computation.
"""

from __future__ import annotations

from collections.abc import Sequence

from minipallas.interop.importer.avals import type_of
from minipallas.interop.importer.engine import ImportScope, closed_parts, rule
from minipallas.interop.importer.params import READ, NoEffect, Only, whole_values
from minipallas.interop.importer.rules.devices import device_shard_map
from minipallas.ir import dtypes
from minipallas.ir.core import Value
from minipallas.ir.indexing import Dyn, Int, Slice
from minipallas.ir.types import ArrayType, RefType
from minipallas.lowering.compat.jax_private import core as jax_core


def _element(type_: object) -> tuple:
    """The indexer taking element ``Dyn(0)`` along the leading dimension."""
    return (Int(Dyn(0)), *(Slice(0, d, 1) for d in type_.shape[1:]))


_LOOP = {"jaxpr": READ, "length": READ, "num_consts": READ, "num_carry": READ, "reverse": READ}
_UNROLL = NoEffect("how many iterations XLA runs per step of its loop: the same iterations")


@rule("scan", params={**_LOOP, "unroll": _UNROLL})
def scan(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    p = eqn.params
    jaxpr, consts = closed_parts(p["jaxpr"])
    n_consts, n_carry, length = p["num_consts"], p["num_carry"], int(p["length"])
    args = [scope.read(a) for a in eqn.invars]
    outer_consts = args[:n_consts]
    inits, xs = args[n_consts : n_consts + n_carry], args[n_consts + n_carry :]
    y_types = [type_of(v.aval) for v in eqn.outvars[n_carry:]]
    ys_init = [scope.constant(0, t.dtype, t.shape) for t in y_types]
    lower, upper = scope.constant(0, "int32"), scope.constant(length, "int32")

    i = Value(ArrayType((), "int32"))
    const_params = [Value(v.type) for v in (*outer_consts, *xs)]
    carry_params = [Value(v.type) for v in (*inits, *ys_init)]
    x_params = const_params[n_consts:]
    position: list[Value] = []  # the element index k, made by the prologue

    def prologue(inner: ImportScope, _: list[Value]) -> list[Value]:
        k = i
        if p["reverse"]:
            k = inner.emit("sub", [inner.constant(length - 1, "int32"), i])
        elements = []
        for x in x_params:
            if isinstance(x.type, RefType):
                elements.append(inner.emit("ref.at", [x, k], indexer=_element(x.type)))
            else:
                elements.append(inner.emit("dynamic_slice", [x, k], indexer=_element(x.type)))
        position.append(k)
        return [*const_params[:n_consts], *carry_params[:n_carry], *elements]

    def epilogue(inner: ImportScope, outs: list[Value]) -> list[Value]:
        carries, ys = outs[:n_carry], outs[n_carry:]
        stacked = [
            inner.emit("dynamic_update_slice", [acc, position[0], y], indexer=_element(acc.type))
            for acc, y in zip(carry_params[n_carry:], ys, strict=True)
        ]
        return [*carries, *stacked]

    body = scope.region(jaxpr, consts, [i, *const_params, *carry_params], prologue, epilogue)
    operands = [lower, upper, *outer_consts, *xs, *inits, *ys_init]
    op = scope.emit_op("for", operands, [body], num_consts=len(const_params))
    return list(op.results)


@rule(
    "while",
    params={"cond_jaxpr": READ, "body_jaxpr": READ, "cond_nconsts": READ, "body_nconsts": READ},
)
def while_(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    p = eqn.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    args = [scope.read(a) for a in eqn.invars]
    cond_consts, body_consts, inits = args[:nc], args[nc : nc + nb], args[nc + nb :]
    cond_jaxpr, cond_closed = closed_parts(p["cond_jaxpr"])
    body_jaxpr, body_closed = closed_parts(p["body_jaxpr"])
    cond = scope.region(cond_jaxpr, cond_closed, [Value(v.type) for v in (*cond_consts, *inits)])
    body = scope.region(body_jaxpr, body_closed, [Value(v.type) for v in (*body_consts, *inits)])
    op = scope.emit_op("while", args, [cond, body], cond_nconsts=nc, body_nconsts=nb)
    return list(op.results)


@rule(
    "cond",
    params={
        "branches": READ,
        "branches_platforms": NoEffect(
            "the platforms of lax.platform_dependent's branches: the index operand (a "
            "platform_index) already picks the branch; jax uses it to lower fewer branches"
        ),
    },
)
def cond(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    branches = eqn.params["branches"]
    index_atom, *operand_atoms = eqn.invars
    args = [scope.read(a) for a in operand_atoms]
    index = _last_if_negative(scope, index_atom, len(branches))
    regions = []
    for branch in branches:
        jaxpr, consts = closed_parts(branch)
        regions.append(scope.region(jaxpr, consts, [Value(a.type) for a in args]))
    return list(scope.emit_op("cond", [index, *args], regions).results)


def _last_if_negative(scope: ImportScope, atom: jax_core.Atom, n: int) -> Value:
    """The branch index with a negative value sent to the last branch, as XLA's ``case``."""
    known = scope.static(atom)
    if known is not None:
        i = int(known)
        return scope.constant(n - 1 if i < 0 or i >= n else i, "int32")
    index = scope.read(atom)
    if index in scope.nonnegative or dtypes.is_unsigned(index.type.dtype) or n == 1:
        return index
    dtype = index.type.dtype
    negative = scope.emit("lt", [index, scope.constant(0, dtype)])
    return scope.emit("select", [negative, scope.constant(n - 1, dtype), index])


def _unspecified(shardings: object) -> bool:
    """Whether a ``jit``'s shardings are all left to jax (``UnspecifiedValue``, a private
    class: read by name, so a jax that renames it refuses rather than accepts) or place
    whole values (``params.whole_values``)."""
    return all(type(s).__name__ == "UnspecifiedValue" or whole_values(s) for s in shardings)


_HINT = NoEffect("how XLA compiles the call (donation, inlining, unused inputs, options)")
_SHARDINGS = Only(
    test=_unspecified,
    accepted="shardings left unspecified or placing whole values",
    fix="call jax.jit without unreduced in_shardings/out_shardings: minipallas computes "
    "whole values",
)
_JIT = {
    "jaxpr": READ,
    "name": READ,
    "donated_invars": _HINT,
    "inline": _HINT,
    "keep_unused": _HINT,
    "compiler_options_kvs": _HINT,
    "in_shardings": _SHARDINGS,
    "out_shardings": _SHARDINGS,
    "in_layouts": NoEffect("how the inputs are laid out in memory, not what they hold"),
    "out_layouts": NoEffect("how the results are laid out in memory, not what they hold"),
    "ctx_mesh": NoEffect("the mesh in context while tracing; only shardings would use it"),
}


@rule("jit", params=_JIT)
@rule("closed_call", "call", params={"call_jaxpr": READ})
def call(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    closed = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    if not isinstance(closed, jax_core.ClosedJaxpr):
        closed = jax_core.ClosedJaxpr(closed, ())
    name = str(eqn.params.get("name", eqn.primitive.name))
    args = [scope.read(a) for a in eqn.invars]
    callee = scope.importer.callee(closed, name, args)
    return list(scope.emit_op("call", args, callee=callee).results)


@rule(
    "shard_map",
    params={
        "mesh": READ,
        "jaxpr": READ,
        "manual_axes": READ,
        "newly_manual_axes": READ,
        "in_specs": READ,  # over several devices, how each operand is split (``devices``)
        "out_specs": READ,
        "check_vma": NoEffect("a check of the body's types while tracing"),
    },
)
def shard_map(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """The body on the whole arrays, when every manual mesh axis has one device: each operand
    is then its own (only) shard. Over more devices, the body runs once per device."""
    mesh = eqn.params["mesh"]
    sizes = dict(mesh.shape)
    manual = eqn.params.get("newly_manual_axes", eqn.params.get("manual_axes", sizes))
    wide = {str(a): sizes[a] for a in manual if sizes[a] != 1}
    if wide:  # a kernel per device (``devices``)
        return device_shard_map(scope, eqn)
    jaxpr, consts = closed_parts(eqn.params["jaxpr"])
    return scope.inline(jaxpr, consts, [scope.read(a) for a in eqn.invars])


@rule("pvary", params={"axes": NoEffect("a type fact: the values vary over these axes")})
def pvary(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    """Marks values as varying over manual mesh axes (a type fact): the values themselves."""
    return [scope.read(a) for a in eqn.invars]


_DERIVATIVE = NoEffect("how jax differentiates the call; its values are the primal's")
_CONSTS = NoEffect("how many leading operands are constants, for jax's differentiation")


@rule(
    "remat2",
    params={
        "jaxpr": READ,
        "prevent_cse": NoEffect("whether XLA may merge the recomputation with the original"),
        "differentiated": _DERIVATIVE,
        "policy": NoEffect("which values jax.checkpoint saves for differentiation"),
    },
)
@rule(
    "custom_jvp_call",
    params={
        "call_jaxpr": READ,
        "num_consts": _CONSTS,
        "jvp_jaxpr_fun": _DERIVATIVE,
        "symbolic_zeros": _DERIVATIVE,
    },
)
@rule(
    "custom_vjp_call",
    params={
        "call_jaxpr": READ,
        "num_consts": _CONSTS,
        "fwd_jaxpr_thunk": _DERIVATIVE,
        "bwd": _DERIVATIVE,
        "out_trees": _DERIVATIVE,
        "symbolic_zeros": _DERIVATIVE,
    },
)
def inline(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    jaxpr, consts = closed_parts(eqn.params.get("jaxpr", eqn.params.get("call_jaxpr")))
    return scope.inline(jaxpr, consts, [scope.read(a) for a in eqn.invars])
