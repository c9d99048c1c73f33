"""State discharge: a program over mutable ``Ref``s becomes a pure program over arrays.

``discharge(fn)`` returns a new function (``fn`` is never edited). Each discharged ``Ref``
parameter becomes an array parameter, and the function returns its original results followed
by the final value of each discharged ref, in parameter order: upstream JAX's
``discharge_state`` convention, so results compare with upstream one to one.

The pass is an interpreter (``engine``) with one rule per op kind:

- ``state``: ``get`` / ``swap`` / ``addupdate`` / ``load`` / ``store`` become ``slice``,
  ``dynamic_slice``, ``gather``, ``dynamic_update_slice``, ``scatter``, ``scatter_add`` (with
  the same indexer), ``add`` and ``select``;
- ``views``: ``ref.at`` / ``ref.reshape`` / ``ref.bitcast`` / ``ref.transpose`` chains, for
  reads and for writes;
- ``scoped``: ``run_scoped`` allocations start ``uninitialized``; the scope is inlined;
- ``control``: ``for`` / ``while`` carry the refs they write, ``cond`` returns them, ``call``
  calls a discharged callee.

Partial discharge: ``should_discharge`` may be one bool per parameter (array parameters ignore
theirs); refs not discharged stay refs, and the ops on them are copied over. Scoped
allocations are discharged by default; ``discharge_scoped`` (a bool, or a predicate on the
allocation's ``RefType``) keeps some as refs, which is how a kernel backend turns scratch into
registers while its operand refs stay in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from minipallas.ir.collectives import COLLECTIVE_MODES, check_mode
from minipallas.ir.core import Function
from minipallas.ir.errors import PassError
from minipallas.ir.types import RefType
from minipallas.passes.collector import collector_paused
from minipallas.passes.discharge import (  # noqa: F401  (each registers its rules)
    atomic,
    control,
    dma,
    scoped,
    semaphore,
    state,
    views,
)
from minipallas.passes.discharge.engine import Context, DischargeRule, DischargeScope, Handle, rule
from minipallas.passes.registry import BOOL, INT, Option, choice, register

__all__ = ["DischargeRule", "DischargeScope", "Handle", "discharge", "rule"]


@register(
    "discharge",
    Option("discharge_scoped", BOOL, "false keeps run_scoped allocations as refs"),
    Option("keep_params", INT, "the first N parameters stay refs (a kernel's operands)"),
    Option(
        "collectives",
        choice(*COLLECTIVE_MODES),
        "simulate: a collective run_scoped is the one program's own allocation",
    ),
    doc="turn ref parameters and scoped allocations into arrays (upstream's discharge_state)",
)
def discharge(
    fn: Function,
    should_discharge: bool | Sequence[bool] = True,
    *,
    discharge_scoped: bool | Callable[[RefType], bool] = True,
    keep_params: int = 0,
    collectives: str = "reject",
) -> Function:
    """``fn`` with the chosen ``Ref`` parameters (all, by default) turned into arrays;
    ``keep_params=N`` keeps the first N as refs whatever ``should_discharge`` says (the Triton
    path keeps a kernel's operands in memory and discharges its scratch).

    Raises the collective-axes pass's error first when a ``run_scoped`` has collective axes,
    and ``PassError`` when ``should_discharge`` does not give one bool per parameter.
    ``collectives="simulate"`` instead discharges such a ``run_scoped`` as any other: a
    function is one program, the only one of its group, so the shared allocation is its own
    (a kernel's groups become one program in ``kernels/collective/program.py``).
    """
    if not isinstance(fn, Function):
        raise PassError(f"discharge expects a Function, got {type(fn).__name__}")
    check_mode(fn, collectives, "discharge", PassError)
    if isinstance(should_discharge, bool):
        mask = (should_discharge,) * len(fn.params)
    else:
        mask = tuple(bool(m) for m in should_discharge)
        if len(mask) != len(fn.params):
            raise PassError(
                f"should_discharge has {len(mask)} entries for {len(fn.params)} parameters",
                fix="give one bool per parameter (array parameters ignore theirs), or one bool",
            )
    if keep_params:
        mask = tuple(m and k >= keep_params for k, m in enumerate(mask))
    if not (isinstance(discharge_scoped, bool) or callable(discharge_scoped)):
        raise PassError(
            f"discharge_scoped must be a bool or a predicate on RefType, got {discharge_scoped!r}",
            op="discharge",
            fix="pass True, False or a function of the allocation's RefType",
        )
    if isinstance(discharge_scoped, bool):
        every = discharge_scoped

        def predicate(_: RefType) -> bool:
            return every

    else:
        predicate = discharge_scoped
    with collector_paused():
        context = Context(predicate)
        context.collectives = collectives
        return context.function(fn, mask)
