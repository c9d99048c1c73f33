"""Rule tables: one rule per op name, registered by decorator, and the op-by-op block walk.

Every interpreter-shaped pass in minipallas (the reference interpreter, discharge, batching, the
StableHLO, Mosaic TPU and Triton lowerings, ``to_jax``, the jaxpr importer, the difftest JAX
emitter) keeps a table from an op's (or a primitive's) name to the function handling it,
``RULES``, filled by ``@rule("name", ...)`` (``rule = RULES.register``) in one file per op
family. ``@register`` is the pass registry's decorator: it registers passes, not rules.
``RuleTable`` is that table: a plain dict, so tests can swap a rule, whose ``register`` refuses
a second rule for the same name, and a name that is no op (``known``: the declared ops, or for
the jaxpr importer jax's primitives): a misspelt name would be a rule that silently never runs,
so it is an error with the nearest names; a new primitive of another package is registered by
the primitive itself (``@rule(my_p)``). What a *missing* rule means stays with each pass: each
raises its own error naming the op. Cleanup's rewrite patterns are no rule table: an op may have
several, tried in order (``cleanup_patterns.pattern``, which refuses unknown names the same way).

``run_block`` is the walk they share (autodidax's ``eval_jaxpr``): bind the block's parameters,
hand each op its operands' entries and bind its results, return the yielded entries. An error
from an op's rule learns that op (``excerpt.at_op``), so the entry point can show it in the IR.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from minipallas.ir.core import Block, Op
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.excerpt import at_op
from minipallas.ir.opdef import OPS

R = TypeVar("R", bound=Callable[..., Any])


class Named(Protocol):
    """What a rule may be registered for besides a name: a thing with one (a jax ``Primitive``)."""

    name: str


def declared_ops() -> Collection[str]:
    """The names a rule table of ops accepts: every op declared (``ir.opset``, and any op a
    program declares later, as ``examples/ch14_new_op.py`` does)."""
    return OPS


def check_name(name: str, known: Collection[str], what: str, kind: str = "op") -> None:
    """Refuses a rule (``what``) for ``name`` when no ``kind`` has that name: a
    ``ValueError`` naming it and the nearest known names."""
    if name in known:
        return
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    raise ValueError(f"{what} for {name!r}: there is no {kind} named {name!r}{hint}")


class RuleTable(dict[str, R], Generic[R]):
    """The rules of one pass by name; ``what`` names them in errors. ``known`` gives the names
    a rule may be registered for (asked at each registration; by default the declared ops),
    ``kind`` what those names are ("op", "jax primitive")."""

    def __init__(
        self,
        what: str,
        known: Callable[[], Collection[str]] = declared_ops,
        kind: str = "op",
    ) -> None:
        super().__init__()
        self.what = what
        self.known = known
        self.kind = kind

    def register(self, *keys: str | Named) -> Callable[[R], R]:
        """Registers the decorated function as the rule of each op in ``keys``; a name that is
        not ``known``, or already has a rule, is a ``ValueError``. A key may also be the thing
        itself (an object with a ``name``: a jax ``Primitive`` another package defines), which
        needs no check: it exists."""
        names = [k if isinstance(k, str) else k.name for k in keys]
        strings = [k for k in keys if isinstance(k, str)]
        known = self.known() if strings else ()
        for name in strings:
            check_name(name, known, self.what, self.kind)

        def add(rule: R) -> R:
            for name in names:
                if name in self:
                    raise ValueError(f"{self.what} for {name!r} registered twice")
                self[name] = rule
            return rule

        return add

    @classmethod
    def of(cls, what: str, rules: Mapping[str, R]) -> RuleTable[R]:
        """A table of the declared ops' ``rules``, written as a dict: each name checked as
        ``register`` checks it, so a table a pass indexes by op name has no misspelt entry."""
        table = cls(what)
        for name, fn in rules.items():
            table.register(name)(fn)
        return table


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
