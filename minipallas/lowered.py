"""``minipallas.lower``: from a (possibly stateful) function to a backend's MLIR module.

Pipeline for ``target="stablehlo"``:
1. the collective-axes check for the lowering path (before discharge): a ``run_scoped`` with
   collective axes raises what upstream's ``jax.jit(run_state(f)).lower`` raises, the discharge
   error when it uses an outer ref, the lowering error otherwise (``passes.collectives``);
2. ``discharge``: refs become values, the function becomes pure;
3. ``cleanup``: the discharged program made small;
4. emission of a StableHLO module with jaxlib's MLIR bindings, checked by the verifier.

This module is ``minipallas.lowered``, not ``minipallas.lower``: importing a submodule
named like the public function would replace ``minipallas.lower`` on the package with the module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from minipallas.errors import PassError
from minipallas.ir.core import Function
from minipallas.lowering.jaxlib_shim import ir

TARGETS = ("stablehlo",)


class Lowered:
    """A lowered function: ``str()`` is the MLIR text (with source locations), ``.module`` the
    bindings' module, ``.function`` the minipallas function it was emitted from (pure for
    StableHLO; a kernel body for TPU), ``.info`` what the backend reports about the lowering
    (TPU: the dimension semantics and why, the scratch promotion's op counts),
    ``.host_callbacks`` the Python functions its host callbacks run (``debug_print``)."""

    def __init__(
        self,
        target: str,
        module: ir.Module,
        function: Function,
        info: Mapping[str, Any] | None = None,
        host_callbacks: Sequence[Callable[..., Any]] = (),
    ) -> None:
        self.target = target
        self.module = module
        self.function = function
        self.info = dict(info or {})
        self.host_callbacks = tuple(host_callbacks)

    def as_text(self, debug_info: bool = True) -> str:
        """The module's MLIR text; ``debug_info`` prints each op's ``loc(...)``."""
        return self.module.operation.get_asm(enable_debug_info=debug_info)

    def __str__(self) -> str:
        return self.as_text()

    def __repr__(self) -> str:
        return f"<Lowered @{self.function.name} to {self.target}>"


def lower(fn: Function, target: str = "stablehlo") -> Lowered:
    """Discharges and cleans up ``fn`` and emits it for ``target`` (only "stablehlo" so far)."""
    if not isinstance(fn, Function):
        raise PassError(
            f"lower takes a minipallas Function, got {type(fn).__name__}",
            fix="trace a Python function first: minipallas.trace(f, *types)",
        )
    if target not in TARGETS:
        raise PassError(f"unknown lowering target '{target}'", fix=f"use one of: {TARGETS}")
    from minipallas.lowering.stablehlo import lower_stablehlo
    from minipallas.passes.cleanup import cleanup
    from minipallas.passes.collectives import check_collective_axes
    from minipallas.passes.discharge import discharge

    check_collective_axes(fn, "lowering")
    pure = cleanup(discharge(fn))
    callbacks: list[Callable[..., Any]] = []
    return Lowered(target, lower_stablehlo(pure, callbacks), pure, host_callbacks=callbacks)
