"""``Lowered``, what every emitter returns, and ``minipallas.lower``.

``lower(subject, target)`` runs ``target``'s row of the target table (``minipallas.lowering``):
its pipeline, then its emitter. For ``target="stablehlo"`` the pipeline is
``collectives{context=lowering},discharge,cleanup``:
1. the collective-axes check for the lowering path (before discharge): a ``run_scoped`` with
   collective axes raises what upstream's ``jax.jit(run_state(f)).lower`` raises, the discharge
   error when it uses an outer ref, the lowering error otherwise (``ir.collectives``);
2. ``discharge``: refs become values, the function becomes pure;
3. ``cleanup``: the discharged program made small;
then the emission of a StableHLO module with jaxlib's MLIR bindings, checked by the verifier.

This module is ``minipallas.lowering.lowered``, not ``lower``: a submodule named like the
public function ``minipallas.lower`` would read as that function.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from minipallas.ir.core import Function
from minipallas.lowering import AfterEach
from minipallas.lowering import target as target_named
from minipallas.lowering.compat.jaxlib_shim import ir


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


def lower(
    subject: Any,
    target: str = "stablehlo",
    *,
    after_each: AfterEach | None = None,
    verify: bool | None = None,
    **options: Any,
) -> Lowered:
    """``subject`` (a ``Function``; a traced ``Kernel`` for "tpu", "gpu" and "ptx", and for
    "stablehlo", which lowers its CPU program) through ``target``'s pipeline and emitter;
    ``after_each(pass_name, fn)`` is called after each pass (``minipallas-opt
    --print-ir-after-all``), ``verify=True`` verifies the IR before and after each (default:
    when ``MINIPALLAS_VERIFY=1``), ``options`` go to the emitter."""
    return target_named(target).lower(subject, after_each=after_each, verify=verify, **options)
