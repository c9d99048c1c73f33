"""Lowering of minipallas to MLIR for a backend, and the one table of targets.

``TARGETS`` maps each target to what it lowers (a ``Function``, or a traced ``Kernel``), the
step that prepares a kernel for a target that lowers a ``Function`` (the "stablehlo" target's:
the kernel's CPU program), the passes run before emission (a ``passes.pipeline`` string, run by
``passes.pipeline.run`` like every other pipeline) and its emitter. ``Target.lower`` is the one
way down: ``minipallas.lower``, ``compile``, ``pallas_call(...).lower`` and its CPU program,
``minipallas-opt --emit`` and the difftest all go through it, so ``verify``
(``MINIPALLAS_VERIFY=1``) and ``--print-ir-after-all`` see every path's passes.

One subpackage per target (``stablehlo``, ``tpu`` for Mosaic, ``gpu`` for Triton; ``ptx`` is the
Triton module compiled by the ``triton`` package), each laid out alike: a lowering context, a
rule table, one rule file per op family. Every private jaxlib entry point they use is in
``compat.jaxlib_shim``, every private jax module in ``compat.jax_private``; every emitter
returns a ``Lowered`` (``lowered``).

A name means one thing. The emitters are named for what they write (``emit_stablehlo``,
``emit_mosaic``, ``emit_triton``, ``emit_ptx``): a target's ``emit.py`` is the module of
op-building helpers its rules share, and a function ``emit`` in the package beside it would
be that module or the function depending on import order. The functions that run a row from
the top are named for their target too (``lower_to_mosaic``, ``lower_to_triton``).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from string import Template
from typing import Any

import numpy as np

from minipallas.ir.core import Function
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import DEFAULT_MEMORY_SPACE, Kernel
from minipallas.ir.types import TPU_VMEM, MemorySpace
from minipallas.passes.pipeline import PASSES, run

__all__ = ["OPTIMIZE_LEVELS", "TARGETS", "Target", "optimize_level", "target"]

AfterEach = Callable[[str, Function], None]
# ``optimize``: none, the exact optimizations (the default), or those that may reorder float sums
OPTIMIZE_LEVELS = (False, True, "fast")


def optimize_level(value: Any) -> bool | str:
    """``value`` as one of ``OPTIMIZE_LEVELS``; a ``PassError`` naming them for anything else
    (an int or another word would be truthy, and silently the exact level)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str) and value == "fast":
        return value
    raise PassError(
        f"optimize={value!r} is not an optimization level",
        fix='give True (exact, the default), False (none) or "fast" (may reorder float sums)',
    )


@dataclass(frozen=True)
class Target:
    """One backend. ``pipeline`` may name ``$operands``, a kernel's inputs and outputs (the
    parameters that stay refs when the scratch is discharged); ``optimizations`` are passes
    that keep the results bit for bit and only make the kernel faster (``fuse-grid-steps`` on
    the TPU), run after the pipeline unless ``lower(..., optimize=False)``; ``fast``, run in
    their place at ``optimize="fast"``, may also reorder float sums (``reassociate-sums``), so
    the bits move within the order bound of those sums (docs/numerics.md); ``option_passes``
    pairs an emitter option with the passes it appends to the pipeline when true
    (``promote_scratch=True``: ``promote-scratch``). ``emitter`` is
    ``"module:function"``, called as ``emitter(subject, body, **options)`` with the pipeline's
    result as ``body``; it is imported on first use, since jaxlib's MLIR bindings are slow to
    import and a backend may be missing from an installation. ``prepare``, also
    ``"module:function"``, lets a target that lowers a Function take a traced Kernel: called
    as ``prepare(kernel, after_each=..., **its options)``, it gives the Function (the CPU
    program, ``kernels.programs.choose``). It traces with the front end, above this floor, so
    the table names it and imports it on first use, as the emitters."""

    name: str
    doc: str  # for minipallas-opt --help
    kernel: bool  # lowers a traced Kernel (else a Function)
    pipeline: str
    emitter: str
    memory_space: MemorySpace = DEFAULT_MEMORY_SPACE  # of a kernel's blocks that name none
    option_passes: tuple[tuple[str, str], ...] = ()
    optimizations: str = ""
    fast: str = ""
    prepare: str = ""

    def lower(
        self,
        subject: Any,
        *,
        after_each: AfterEach | None = None,
        verify: bool | None = None,
        optimize: bool | str = True,
        **options: Any,
    ) -> Any:
        """Runs the pipeline on ``subject``, then the emitter: ``emit(subject, body)``, the
        pipeline's result as ``body``. A kernel's passes run on the kernel, so a kernel pass
        may change its grid and specs: the emitter's kernel has those, with the body as the
        last kernel pass left it (the input's when none ran), before the function passes
        after it. With ``verify`` the IR is verified before and after each pass (None:
        ``MINIPALLAS_VERIFY``). A Kernel given to a target with a ``prepare`` step goes through
        it first, with the options that step declares (``prepared``)."""
        if self.prepare and isinstance(subject, Kernel):
            own = {k: options.pop(k) for k in _keywords(self._prepare()) if k in options}
            subject = self.prepared(subject, after_each=after_each, **own)
        self._check_subject(subject)
        emit = self._emitter()
        self._check_options(emit, options)
        pipeline = self.pipeline_for(subject, options, optimize=optimize)
        if not self.kernel:
            return emit(subject, run(subject, pipeline, verify=verify, after_each=after_each))
        shaped = [subject.body]

        def note(name: str, body: Function) -> None:
            if PASSES[name].subject == "kernel":
                shaped[0] = body
            if after_each is not None:
                after_each(name, body)

        after = run(subject, pipeline, verify=verify, after_each=note)
        return emit(dataclasses.replace(after, body=shaped[0]), after.body, **options)

    def prepared(
        self, kernel: Kernel, *, after_each: AfterEach | None = None, **options: Any
    ) -> Any:
        """What this target's pipeline takes for ``kernel``: the Function its ``prepare`` step
        makes (``options``: that step's, e.g. the CPU program's ``match_upstream``), or the
        kernel itself for a target that lowers kernels."""
        if not self.prepare:
            if options:
                raise PassError(
                    f"target '{self.name}' emits the kernel itself and takes no options "
                    f"{sorted(options)} to prepare it",
                    fix="give them to a target with a prepare step (stablehlo), or drop them",
                )
            return kernel
        return self._prepare()(kernel, after_each=after_each, **options)

    def pipeline_for(
        self,
        subject: Function | Kernel,
        options: Mapping[str, Any] | None = None,
        *,
        optimize: bool | str = True,
    ) -> str:
        """The pipeline run on ``subject``: the target's own, its ``optimizations`` when
        ``optimize`` (its ``fast`` ones at ``"fast"``), then the passes the emitter
        ``options`` ask for."""
        pipeline = self.pipeline
        if self.kernel:
            operands = len(subject.scalar_prefetch) + subject.num_inputs + subject.num_outputs
            pipeline = Template(pipeline).substitute(operands=operands)
        level = optimize_level(optimize)
        optimizations = self.fast if level == "fast" else self.optimizations if level else ""
        extra = [passes for option, passes in self.option_passes if (options or {}).get(option)]
        return ",".join(p for p in (pipeline, optimizations, *extra) if p)

    def _check_subject(self, subject: Any) -> None:
        got = type(subject).__name__
        if self.kernel and not isinstance(subject, Kernel):
            raise PassError(
                f"target '{self.name}' takes a traced Kernel, got {got}",
                fix="build one with minipallas.pallas_call(...).trace(*arrays_or_types)",
            )
        if not self.kernel and not isinstance(subject, Function):
            raise PassError(
                f"lower takes a minipallas Function for target '{self.name}', got {got}",
                fix="trace a Python function first: minipallas.trace(f, *types)"
                + (", or a kernel: pallas_call(...).trace(*types)" if self.prepare else ""),
            )

    def _emitter(self) -> Callable[..., Any]:
        return self._imported(self.emitter, "emitter")

    def _prepare(self) -> Callable[..., Any]:
        return self._imported(self.prepare, "prepare step")

    def _imported(self, where: str, what: str) -> Callable[..., Any]:
        """The function ``"module:function"`` names, imported now."""
        module, _, name = where.partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as e:
            if e.name is None or not module.startswith(e.name):
                raise
            raise PassError(
                f"the {self.name} {what} ({module}) is not available in this installation"
            ) from None

    def _check_options(self, emit: Callable[..., Any], options: dict[str, Any]) -> None:
        accepted = [
            p.name
            for p in inspect.signature(emit).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        unknown = sorted(set(options) - set(accepted))
        if unknown and not accepted:
            raise PassError(f"target '{self.name}' takes no options, got {unknown}")
        if unknown:
            raise PassError(
                f"target '{self.name}' has no option {', '.join(map(repr, unknown))}",
                fix=f"its options: {', '.join(accepted)}",
            )


def _keywords(fn: Callable[..., Any]) -> list[str]:
    """The options a prepare step takes: its parameters after the kernel, but ``after_each``."""
    names = list(inspect.signature(fn).parameters)[1:]
    return [n for n in names if n != "after_each"]


_TRITON = "collectives{context=triton},discharge{keep_params=$operands},cleanup"
TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target(
            "stablehlo",
            "StableHLO: text IR discharged and lowered, or a kernel file's CPU program",
            kernel=False,
            pipeline="collectives{context=lowering},discharge,cleanup",
            emitter="minipallas.lowering.stablehlo:emit_stablehlo",
            prepare="minipallas.kernels.programs.choose:cpu_program",
        ),
        Target(
            "tpu",
            "a kernel file's Mosaic TPU module (as upstream Pallas hands it to Mosaic)",
            kernel=True,
            pipeline="collectives{context=mosaic}",
            emitter="minipallas.lowering.tpu:emit_mosaic",
            memory_space=TPU_VMEM,
            option_passes=(("promote_scratch", "promote-scratch"),),
            # Mosaic sums each row of a block alone, so a row sum widens (widen.py)
            optimizations="fuse-grid-steps{rows_alone=true}",
            # reduce_1d over 2^24 floats on a v5e: 0.180 ms (jit 0.128) where the default
            # level took 2.24 (issue 49 item 4); with the output threaded in values the default
            # level takes 0.117, and the fast one at max_unroll=256 0.235: the model's unroll
            fast="reassociate-sums,fuse-grid-steps{rows_alone=true}",
        ),
        Target(
            "gpu",
            "a kernel file's Triton GPU module",
            kernel=True,
            pipeline=_TRITON,
            emitter="minipallas.lowering.gpu:emit_triton",
        ),
        Target(
            "ptx",
            "a kernel file's Triton module compiled to PTX by triton",
            kernel=True,
            pipeline=_TRITON,
            emitter="minipallas.lowering.gpu.ptx:emit_ptx",
        ),
    )
}


def target(name: str) -> Target:
    """The target named ``name``; a ``PassError`` listing the targets when there is none."""
    if name not in TARGETS:
        raise PassError(f"unknown lowering target '{name}'", fix=f"use one of: {tuple(TARGETS)}")
    return TARGETS[name]
