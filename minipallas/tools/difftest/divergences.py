"""Upstream divergences recognized from the jaxpr: patterns of programs where upstream's
discharge or XLA computes something other than sequential execution, each named by a
``classify.KNOWN`` entry of kind ``upstream-divergence`` (``DIVERGENCES`` maps the name to
its detector). ``classify`` names a disagreement of the upstream way after the first pattern
the jaxpr has; a detector only says the pattern is present, which the disagreement it
explains must also be.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_indexing, state_types, tree_util


def _subjaxprs(jaxpr: Any) -> Iterator[Any]:  # noqa: ANN401
    """``jaxpr`` and every jaxpr nested in its equations' parameters (open jaxprs)."""
    stack = [jaxpr.jaxpr if isinstance(jaxpr, jax_core.ClosedJaxpr) else jaxpr]
    while stack:
        j = stack.pop()
        yield j
        for eqn in j.eqns:
            for sub in jax_core.jaxprs_in_params(eqn.params):
                stack.append(sub)


def _written_inputs(jaxpr: Any) -> set[int]:  # noqa: ANN401
    """Positions of the inputs of the open ``jaxpr`` that it writes or accumulates into."""
    position = {v: k for k, v in enumerate(jaxpr.invars)}
    written = set()
    for e in jaxpr.effects:
        k = position.get(e.input) if not isinstance(e.input, int) else e.input
        if isinstance(e, state_types.WriteEffect | state_types.AccumEffect) and k is not None:
            written.add(k)
    return written


def _whiles(jaxpr: Any) -> Iterator[Any]:  # noqa: ANN401
    """Every ``while`` equation in ``jaxpr`` and its sub-jaxprs."""
    return (e for j in _subjaxprs(jaxpr) for e in j.eqns if e.primitive.name == "while")


def while_cond_reads_written_ref(jaxpr: Any) -> bool:  # noqa: ANN401
    """A ``while`` whose condition takes a ref that its body writes (see ``KNOWN``)."""
    for eqn in _whiles(jaxpr):
        nc, nb = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
        cond_refs = {
            v
            for v in eqn.invars[:nc]
            if isinstance(getattr(v, "aval", None), state_types.AbstractRef)
        }
        body_writes = _written_inputs(eqn.params["body_jaxpr"].jaxpr)
        if cond_refs & {eqn.invars[nc + k] for k in body_writes if k < nb}:
            return True
    return False


def while_cond_writes_ref(jaxpr: Any) -> bool:  # noqa: ANN401
    """A ``while`` whose condition writes a ref (see ``KNOWN``)."""
    return any(_written_inputs(eqn.params["cond_jaxpr"].jaxpr) for eqn in _whiles(jaxpr))


def pallas_store_through_view(jaxpr: Any) -> bool:  # noqa: ANN401
    """A Pallas store (``masked_swap``) whose ref has transforms before its indexer."""
    for j in _subjaxprs(jaxpr):
        for eqn in j.eqns:
            if eqn.primitive.name != "masked_swap":
                continue
            _, transforms, _, _ = tree_util.tree_unflatten(eqn.params["args_tree"], eqn.invars)
            transforms = tuple(transforms or ())
            if transforms and not isinstance(transforms[-1], state_indexing.NDIndexer):
                transforms = (*transforms, None)
            if len(transforms) > 1:
                return True
    return False


def bf16_reduce_sum(jaxpr: Any) -> bool:  # noqa: ANN401
    """A ``reduce_sum`` of bfloat16 operands (see ``KNOWN``)."""
    return any(
        e.primitive.name == "reduce_sum" and str(e.invars[0].aval.dtype) == "bfloat16"
        for j in _subjaxprs(jaxpr)
        for e in j.eqns
    )


DIVERGENCES = {
    "while-cond-reads-written-ref": while_cond_reads_written_ref,
    "while-cond-writes-ref": while_cond_writes_ref,
    "pallas-store-through-view": pallas_store_through_view,
    "bf16-sum-in-bf16": bf16_reduce_sum,
}
