"""Rule tables: one rule per op name, registered by decorator, and the op-by-op block walk.

Every interpreter-shaped pass in minipallas (the reference interpreter, discharge, batching, the
StableHLO, Mosaic TPU and Triton lowerings, ``to_jax``, the jaxpr importer, the difftest JAX
emitter) keeps a table from an op's (or a primitive's) name to the function handling it,
``RULES``, filled by ``@rule("name", ...)`` (``rule = RULES.register``) in one file per op
family. ``@register`` is the pass registry's decorator: it registers passes, not rules.
``RuleTable`` is that table: a plain dict, so tests can swap a rule, whose ``register`` refuses
a second rule for the same name. What a *missing* rule means stays with each pass: each raises
its own error naming the op. Cleanup's rewrite patterns are no rule table: an op may have
several, tried in order (``cleanup_patterns.pattern``).

``run_block`` is the walk they share (autodidax's ``eval_jaxpr``): bind the block's parameters,
hand each op its operands' entries and bind its results, return the yielded entries. An error
from an op's rule learns that op (``excerpt.at_op``), so the entry point can show it in the IR.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from minipallas.ir.core import Block, Op
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.excerpt import at_op

R = TypeVar("R", bound=Callable[..., Any])


class RuleTable(dict[str, R], Generic[R]):
    """The rules of one pass by op name; ``what`` names them in the "registered twice" error."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def register(self, *names: str) -> Callable[[R], R]:
        """Registers the decorated function as the rule of each op in ``names``."""

        def add(rule: R) -> R:
            for name in names:
                if name in self:
                    raise ValueError(f"{self.what} for {name!r} registered twice")
                self[name] = rule
            return rule

        return add


def run_block(
    block: Block, args: Sequence[Any], apply: Callable[[Op, list[Any]], Sequence[Any]]
) -> list[Any]:
    """Binds ``block``'s parameters to ``args``, binds each op's results to ``apply(op, its
    operands' entries)``, and returns the entries of the values the block yields."""
    env = dict(zip(block.params, args, strict=True))
    try:
        for op in block.ops:
            outs = apply(op, [env[v] for v in op.operands])
            env.update(zip(op.results, outs, strict=True))
    except MiniPallasError as e:
        at_op(e, op)  # the innermost walk is first: its op is the one that failed
        raise
    return [env[v] for v in block.results]
