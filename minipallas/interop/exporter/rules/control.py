"""``to_jax`` rules for ``for``, ``while``, ``cond`` and ``call``: the regions evaluated by
``engine.evaluate`` inside ``lax.fori_loop``, ``while_loop`` and ``switch``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

from minipallas.interop.exporter.engine import evaluate, rule
from minipallas.ir.core import Block, Op

# --- control flow and calls -----------------------------------------------------------------


@rule("for")
def for_(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    (body,) = op.regions
    where = op.slices()
    (lower,), (upper,) = args[where["lower"]], args[where["upper"]]
    consts, inits = args[where["consts"]], args[where["inits"]]

    def step(i: Any, carries: tuple) -> tuple:
        return tuple(evaluate(body, [i, *consts, *carries]))

    return list(lax.fori_loop(lower, upper, step, tuple(inits)))


@rule("while")
def while_(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    cond, body = op.regions
    where = op.slices()
    cond_consts, body_consts = args[where["cond_consts"]], args[where["body_consts"]]
    inits = args[where["inits"]]

    def keep_going(carries: tuple) -> Any:
        (flag,) = evaluate(cond, [*cond_consts, *carries])
        return flag

    def step(carries: tuple) -> tuple:
        return tuple(evaluate(body, [*body_consts, *carries]))

    return list(lax.while_loop(keep_going, step, tuple(inits)))


@rule("cond")
def cond(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    index, operands = args[0], args[1:]
    last = len(op.regions) - 1
    index = lax.clamp(lax.full_like(index, 0), index, lax.full_like(index, last))
    branches = [functools.partial(_branch, region) for region in op.regions]
    return list(lax.switch(lax.convert_element_type(index, jnp.int32), branches, *operands))


def _branch(region: Block, *operands: Any) -> tuple:
    return tuple(evaluate(region, operands))


@rule("call")
def call(op: Op, args: Sequence[Any]) -> Sequence[Any]:
    return evaluate(op.attrs["callee"].body, args)
