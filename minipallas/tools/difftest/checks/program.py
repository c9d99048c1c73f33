"""The kernel checks over a whole upstream program: each TPU ``pallas_call`` it makes, with the
operands it gets there.

A case that is one ``pallas_call`` (``jit`` wrappers allowed) hands it the case's inputs. Any
other program is evaluated eagerly up to each kernel (upstream's discharge of its refs, then
its equations, each ``pallas_call`` through upstream's interpret mode), so each kernel is
checked on the values it would see. A kernel the checks cannot run (one minipallas does not
import, a GPU kernel, a model error) is noted, not reported as a bug.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minipallas.interop.importer.rules.kernel_call import kernel_from_eqn
from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import state_discharge
from minipallas.platforms.mesh_tpu import evaluate_kernels
from minipallas.tools.difftest.checks import kernel_bugs
from minipallas.tools.difftest.checks.bug import KernelBug
from minipallas.tools.difftest.outputs import initial
from minipallas.tpu import VMEM

GPU_PARAMS = ("triton", "mosaic_gpu")  # compiler params that say a kernel is not for a TPU


@dataclass
class Checked:
    """The bugs found, the kernels checked, and why any kernel was not."""

    bugs: list[KernelBug] = field(default_factory=list)
    kernels: int = 0
    notes: list[str] = field(default_factory=list)


def program_bugs(jaxpr: jax_core.ClosedJaxpr, args: Sequence[Any]) -> Checked:
    """Every TPU kernel of ``jaxpr`` (the case's upstream program) on ``args``, checked."""
    checked = Checked()
    only = only_kernel(jaxpr.jaxpr)
    if only is not None:
        _check(only, initial(args), checked)
        return checked
    if not any(kernel_eqns(jaxpr.jaxpr)):
        return checked

    def rule(eqn: jax_core.JaxprEqn, ins: Sequence[Any]) -> Sequence[Any]:
        _check(eqn, [np.asarray(x) for x in ins], checked)
        return eqn.primitive.bind(*ins, **{**eqn.params, "interpret": True})

    try:
        closed = state_discharge.discharge_state(jaxpr)
        evaluate_kernels(closed.jaxpr, closed.consts, initial(args), {"pallas_call": rule})
    except Exception as e:  # the program's own failure: the ways report it
        checked.notes.append(f"the program stopped before its last kernel: {type(e).__name__}")
    return checked


def _check(eqn: jax_core.JaxprEqn, operands: list[np.ndarray], checked: Checked) -> None:
    params = eqn.params.get("compiler_params") or {}  # {backend: params}, or the params
    names = set(params) if isinstance(params, Mapping) else {type(params).__module__}
    if any(gpu in name for name in names for gpu in GPU_PARAMS):
        checked.notes.append(f"{eqn.params.get('name')}: a GPU kernel, not checked")
        return
    try:
        kernel = kernel_from_eqn(eqn, memory_space=VMEM)
        checked.bugs += kernel_bugs(kernel, operands)
        checked.kernels += 1
    except MiniPallasError as e:
        first = str(e).splitlines()[0]
        checked.notes.append(f"{eqn.params.get('name')}: not checked: {first}")


def kernel_eqns(jaxpr: jax_core.Jaxpr) -> Any:
    """Every ``pallas_call`` equation of ``jaxpr``, inside the jaxprs of its equations too."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            yield eqn
        for sub in jax_core.jaxprs_in_params(eqn.params):
            yield from kernel_eqns(sub)


def only_kernel(jaxpr: jax_core.Jaxpr) -> jax_core.JaxprEqn | None:
    """The ``pallas_call`` equation ``jaxpr`` is made of alone, looking through ``jit``."""
    if len(jaxpr.eqns) != 1 or list(jaxpr.outvars) != list(jaxpr.eqns[0].outvars):
        return None
    (eqn,) = jaxpr.eqns
    if list(eqn.invars) != list(jaxpr.invars):
        return None
    if eqn.primitive.name == "pallas_call":
        return eqn
    if eqn.primitive.name in ("pjit", "jit"):
        return only_kernel(eqn.params["jaxpr"].jaxpr)
    return None
