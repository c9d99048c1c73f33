"""``to_jax`` rules for the structural ops: each is the ``jax.lax`` function upstream's jnp
calls use, which XLA lowers as minipallas's StableHLO rules do (``rev``, ``pad``,
``cumsum`` & co., ``reduce_prod``, a stable ``sort`` with jnp's comparator, ``top_k``,
``argmax`` / ``argmin``), so the bits are the compiled program's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jax import lax

from minipallas.interop.exporter.engine import rule
from minipallas.ir import dtypes
from minipallas.ir.core import Op

_CUMULATIVE = {"cumsum": lax.cumsum, "cumprod": lax.cumprod, "cummax": lax.cummax,
               "cummin": lax.cummin, "cumlogsumexp": lax.cumlogsumexp}  # fmt: skip


@rule("reverse")
def reverse(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.rev(args[0], op.attrs["dims"])]


@rule("pad")
def pad(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    a = op.attrs
    return [lax.pad(args[0], args[1], list(zip(a["low"], a["high"], a["interior"], strict=True)))]


@rule(*_CUMULATIVE)
def cumulative(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [_CUMULATIVE[op.name](args[0], op.attrs["axis"], op.attrs["reverse"])]


@rule("reduce_prod")
def reduce_prod(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return [lax.reduce_prod(args[0], tuple(op.attrs["axes"]))]


@rule("sort")
def sort(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    a = op.attrs
    return list(lax.sort(tuple(args), dimension=a["dimension"], num_keys=a["num_keys"]))


@rule("top_k")
def top_k(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return list(lax.top_k(args[0], op.attrs["k"]))


@rule("argmax", "argmin")
def argmax(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    pick = lax.argmax if op.name == "argmax" else lax.argmin
    return [pick(args[0], op.attrs["axis"], dtypes.to_numpy(op.result.type.dtype))]
