"""``to_jax``: a minipallas function as a function of JAX arrays, for ``jax.jit`` on any backend.

Approach: discharge and clean up the function (the pipeline ``minipallas.lower`` runs, the
target table's ``stablehlo`` row), then *evaluate* the pure program with one rule per op that
calls ``jax.lax`` (``RULES``, filled by the files of ``rules/``). Called on tracers, the
evaluation stages out an upstream program, so the result works under ``jax.jit``, ``jax.vmap``
and on every backend JAX has. The alternative, embedding the StableHLO module that
``minipallas.lower`` emits, needs private JAX entry points and ties the function to the
platform the module was emitted for; op-by-op evaluation uses only public ``jax.lax``.

Each rule means what the reference interpreter and the StableHLO lowering mean, spelled out so
it holds on every backend:

- integer ``div`` and ``rem`` where C traps, and integer ``pow``, as ``ir/opset/meanings.py``
  says;
- ``convert`` from float to integer truncates, saturates and maps NaN to 0;
- bfloat16/float16 transcendentals are computed in float32 and rounded once; ``logistic`` is
  ``1 / (1 + exp(-x))`` with each step rounded to the dtype; bfloat16/float16 sums accumulate
  in float32; ``dot`` converts its operands to its result dtype first, except bfloat16/float16
  operands of a float32 dot, which go in as they are (``preferred_element_type``), as the
  StableHLO lowering emits them: XLA:CPU sums the products in another order when they are
  converted first;
- indexed ops (``rules/indexing``) clamp dynamic windows, clamp gathered positions and drop
  scattered ones that are out of range; ``cond`` clamps its index into range.

The returned function takes one array per parameter of the discharged function (a ``Ref``
parameter takes its initial value) and returns a tuple: the results, then the final value of
each ref parameter (the discharged convention, as ``minipallas.compile``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from minipallas.interop.exporter import roundings
from minipallas.ir import dtypes
from minipallas.ir.core import Block, Function, Op
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.ir.rules import RuleTable, run_block
from minipallas.lowering import TARGETS
from minipallas.passes.pipeline import run as run_pipeline


class JaxRule(Protocol):
    """How one pure op evaluates on JAX values: the op and its operand values in, results out."""

    def __call__(self, op: Op, args: Sequence[Any]) -> Sequence[Any]: ...


RULES: RuleTable[JaxRule] = RuleTable("to_jax rule")
rule = RULES.register


def evaluate(block: Block, args: Sequence[Any]) -> list[Any]:
    """Run ``block`` with its parameters bound to ``args`` (JAX arrays or tracers)."""
    return run_block(block, args, _apply)


def _apply(op: Op, args: list[Any]) -> Sequence[Any]:
    fn = RULES.get(op.name)
    if fn is None:
        raise PassError(
            "to_jax has no rule for this op",
            op=op.name,
            loc=op.loc,
            fix="program_id / num_programs need a kernel backend; other ops are a bug",
        )
    return fn(op, args)


def to_jax(fn: Function, *, exact: bool = False) -> Callable[..., tuple[jax.Array, ...]]:
    """A function of JAX arrays computing ``fn`` (discharged); works under ``jax.jit``.

    The returned function is named like ``fn`` and keeps the discharged, cleaned program it
    evaluates as its ``function`` attribute. With ``exact``, XLA may not merge two of the
    interpreter's roundings into one (no FMA, no division by an inverse: ``roundings``).
    """
    if not isinstance(fn, Function):
        raise PassError(f"to_jax takes a minipallas Function, got {type(fn).__name__}")
    pure = run_pipeline(fn, TARGETS["stablehlo"].pipeline)
    types = pure.param_types

    def run(*args: Any) -> tuple[jax.Array, ...]:
        if len(args) != len(types):
            raise MiniPallasError(f"@{pure.name} takes {len(types)} arguments, got {len(args)}")
        arrays = [_argument(pure, i, types[i], a) for i, a in enumerate(args)]
        with roundings.exact(exact):
            outs = evaluate(pure.body, arrays)
        return tuple(jnp.asarray(v) for v in outs)  # a constant is numpy

    run.__name__ = run.__qualname__ = pure.name
    run.__doc__ = f"minipallas @{pure.name} as JAX, on ({', '.join(map(str, types))})"
    run.function = pure  # type: ignore[attr-defined]
    return run


def _argument(fn: Function, i: int, t: Any, arg: Any) -> Any:
    dtype = dtypes.to_numpy(t.dtype)
    if type(arg) in (bool, int, float) and t.shape == ():
        return jnp.asarray(arg, dtype=dtype)
    if not (hasattr(arg, "shape") and hasattr(arg, "dtype")):  # a list, a Python scalar
        arg = np.asarray(arg)
    shape, got = tuple(arg.shape), np.dtype(arg.dtype)
    if shape != t.shape or got != dtype:
        raise MiniPallasError(
            f"argument {i} of @{fn.name} must be {t}, got {got}{list(shape)}",
            fix=f"pass an array of shape {t.shape} and dtype {dtype}",
        )
    return jnp.asarray(arg)
