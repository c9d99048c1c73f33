"""The collective-axes check: the one place that decides what a ``run_scoped`` with
``collective_axes`` may do. It is an analysis of the IR, asked by the interpreter as well as by
the passes and lowerings, so it lives on the IR floor; the pipeline runs it as the
``collectives`` pass (``minipallas.passes.collectives``).

``run_scoped(..., collective_axes=("x",))`` asks for one allocation shared by every program
that differs only along grid axis ``x``. No path of minipallas implements that yet, so each path
asks this check, which rejects the op with the exception class and exact message upstream JAX
raises for the same program on that path (measured with jax 0.10.2; tests/passes/
test_collectives_upstream.py runs upstream itself). A path names its *context*:

- ``"discharge"`` (``minipallas.discharge``), ``"lowering"`` (``lower``, ``compile``,
  ``to_jax``) and ``"interpreter"`` (``minipallas.interpret`` of a program): upstream's
  equivalent is ``jax.jit(run_state(f))``, eager or lowered. Which of two upstream rules fires
  depends on the op: upstream's ``discharge_state`` calls an op's discharge rule only when the
  op has a ref operand being discharged, so a ``run_scoped`` that uses an outer ref raises
  ``_run_scoped_discharge_rule``'s ``NotImplementedError``; one whose operands are all arrays
  is left for XLA lowering, and ``_run_scoped_lowering_rule`` raises its ``ValueError``;
- ``"cpu_kernel"`` (a kernel on the CPU: ``pallas_call``, ``grid_program``, and
  ``minipallas.interpret`` given ``program_ids``/``grid``): upstream's
  ``pallas_call(..., interpret=True)``, whose physicalize walk over the kernel body (through
  loops, branches and nested scopes, not into ``jax.jit`` callees) raises its interpret rule's
  ``NotImplementedError`` first. In a callee, the op meets the discharge or lowering rule, as
  above;
- ``"mosaic"`` (a TPU kernel): the Mosaic lowering rule's ``NotImplementedError``, callees
  included;
- ``"triton"`` (a GPU kernel): upstream's Triton lowering has no ``run_scoped`` rule at all, so
  it raises its ``NotImplementedError`` for an unimplemented primitive. minipallas lowers a
  ``run_scoped`` without collective axes for Triton by discharging its scratch into each
  program's own values, which no two programs can share. A semaphore op (``semaphore_signal``,
  ``_wait``, ``_read``) gets the same unimplemented-primitive error: Triton has no semaphores.

The message (``str(error)``) is upstream's line word for word; a PEP 678 note names the op, its
source location, the axes, which upstream rule the message comes from and the ways out. A
future implementation of collective scratch goes here too: a path that learns to support it
stops rejecting it in this file and nowhere else. The opt-in ``collectives="simulate"`` (issue 15)
skips this check: the multi-program interpreter (``ir.interpret.programs``) and the collective
kernel program (``kernels/collective/program.py``) run such programs.

Algorithm:
1. Walk the function's ops in program order, entering every region and, at each ``call``, the
   callee (each function once), noting whether a ``call`` was crossed.
2. At the first ``run_scoped`` whose ``collective_axes`` is non-empty, pick upstream's rule from
   the context, the op's operands and whether it sits in a callee; raise that rule's error.
"""

from __future__ import annotations

from collections.abc import Iterator

from minipallas.ir.core import CALLS, Block, Function, Op
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.ir.types import RefType


class CollectiveAxesError(MiniPallasError):
    """A ``run_scoped`` with collective axes on a path that cannot take them.

    ``str(error)`` is upstream's message alone; ``axes``, ``context`` (the path), ``rule`` (the
    upstream rule whose message it is, a ``RULES`` key) and ``function`` (where the op lives)
    say the rest, and so does the note.
    """

    verbatim = True

    def __init__(
        self,
        message: str,
        *,
        loc: object,
        axes: tuple[str, ...],
        context: str,
        rule: str,
        function: str,
    ) -> None:
        super().__init__(message, op="run_scoped", loc=loc)
        self.axes = axes
        self.context = context
        self.rule = rule
        self.function = function


class CollectiveAxesUnsupported(CollectiveAxesError, NotImplementedError):
    """Collective axes on a path that does not implement them yet (upstream's class)."""


class CollectiveAxesLoweringError(CollectiveAxesError, ValueError):
    """Collective axes reaching XLA lowering outside any kernel (upstream's class)."""


# "reject" (the default on every path): upstream's errors; "simulate": run them (issue 15)
COLLECTIVE_MODES = ("reject", "simulate")

DISCHARGE_MESSAGE = "run_scoped discharge does not support collective_axes yet."
LOWERING_MESSAGE = "run_scoped lowering outside of Pallas does not support collective_axes."
INTERPRET_MESSAGE = "run_scoped interpret rule does not support collective axes"
MOSAIC_MESSAGE = "run_scoped lowering does not support collective axes"
TRITON_MESSAGE = (
    "Unimplemented primitive in Pallas Triton lowering: run_scoped. Please file an issue at"
    " https://github.com/jax-ml/jax/issues/new/choose."
)

# upstream rule -> (error class, its message, where the message comes from, in words)
RULES: dict[str, tuple[type[CollectiveAxesError], str, str]] = {
    "discharge": (
        CollectiveAxesUnsupported,
        DISCHARGE_MESSAGE,
        "upstream's run_scoped discharge rule, which this op meets because it uses a ref "
        "from outside it",
    ),
    "lowering": (
        CollectiveAxesLoweringError,
        LOWERING_MESSAGE,
        "upstream's run_scoped lowering rule (outside Pallas), which this op meets because "
        "it uses no outer ref, so state discharge leaves it for XLA lowering",
    ),
    "interpret": (
        CollectiveAxesUnsupported,
        INTERPRET_MESSAGE,
        "upstream's interpret-mode rule (pallas_call(..., interpret=True)), which sees every "
        "run_scoped of a kernel body before discharge",
    ),
    "mosaic": (CollectiveAxesUnsupported, MOSAIC_MESSAGE, "upstream's Mosaic lowering rule"),
    "triton": (
        CollectiveAxesUnsupported,
        TRITON_MESSAGE,
        "upstream's Triton lowering, which has no run_scoped rule at all; minipallas lowers a "
        "run_scoped without collective axes for Triton by discharging its scratch into each "
        "program's own values, which no two programs can share",
    ),
}

# context -> the path that asks, in words (the note's subject)
CONTEXTS: dict[str, str] = {
    "discharge": "state discharge",
    "lowering": "lowering outside a kernel",
    "interpreter": "the reference interpreter",
    "cpu_kernel": "a kernel run on the CPU",
    "mosaic": "Mosaic TPU kernel lowering",
    "triton": "Triton GPU kernel lowering",
}

WAYS_OUT = (
    "drop collective_axes if each program may have its own scratch;",
    "keep the collective outside the run_scoped body and pass its result in as an operand;",
    "run the body inside a kernel whose backend supports collective allocations (upstream "
    "Pallas: Mosaic GPU, for thread-collective scratch);",
    "or opt in to minipallas's simulation: pallas_call(..., grid_names=..., "
    "collectives='simulate'), or interpret(..., collectives='simulate').",
)


# ``in_callee`` for an op reached through a ``mesh_call``'s body: a kernel of upstream's
# ``pl.kernel``, whose interpret rule sees it whatever path runs the program around it
KERNEL = "kernel"


def upstream_rule(context: str, op: Op, in_callee: bool | str) -> str:
    """Which upstream rule (a ``RULES`` key) rejects ``op`` on ``context``'s path; ``in_callee``:
    the op is reached through a ``call`` (upstream: a ``jax.jit`` callee), or ``KERNEL``: the
    body of a ``mesh_call``."""
    if context in ("mosaic", "triton"):
        return context
    if in_callee == KERNEL or (context == "cpu_kernel" and not in_callee):
        return "interpret"
    return "discharge" if any(isinstance(v.type, RefType) for v in op.operands) else "lowering"


class TritonSemaphoreUnsupported(MiniPallasError, NotImplementedError):
    """A semaphore op or async copy in a Triton kernel: upstream's Triton lowering has no rule
    for it."""

    verbatim = True


def check_mode(fn: Function, mode: str, context: str, error: type[MiniPallasError]) -> None:
    """``collectives=mode`` on ``context``'s path: a mode not in ``COLLECTIVE_MODES`` is
    ``error``; under ``"reject"`` the program's collective axes are checked (below)."""
    if mode not in COLLECTIVE_MODES:
        raise error(
            f"collectives={mode!r} is not a mode",
            fix=f"use one of {', '.join(map(repr, COLLECTIVE_MODES))}",
        )
    if mode == "reject":
        check_collective_axes(fn, context)


def check_collective_axes(fn: Function, context: str) -> None:
    """Raises upstream's error for the first ``run_scoped`` with collective axes on
    ``context``'s path (module doc); on Triton's, for the first semaphore op too."""
    if context not in CONTEXTS:
        raise PassError(
            f"unknown collective-axes context '{context}'", fix=f"use one of: {', '.join(CONTEXTS)}"
        )
    for op, where, in_callee in _walk(fn, everything=context == "triton"):
        if op.name.startswith(("semaphore_", "dma_")):  # a semaphore, or an async copy's
            exc = TritonSemaphoreUnsupported(
                TRITON_MESSAGE.replace("run_scoped", op.name), op=op.name, loc=op.loc
            )
            exc.add_note(
                f"'{op.name}' at {op.loc} in {where}: Triton has no semaphores; run the kernel "
                "on the CPU (minipallas.pallas_call) or lower it for Mosaic TPU"
            )
            raise exc
        axes = tuple(op.attrs.get("collective_axes", ()))
        if op.name == "run_scoped" and axes:
            rule = upstream_rule(context, op, in_callee)
            error, message, origin = RULES[rule]
            exc = error(message, loc=op.loc, axes=axes, context=context, rule=rule, function=where)
            exc.add_note(_note(op, axes, where, CONTEXTS[context], origin))
            raise exc


def _note(op: Op, axes: tuple[str, ...], where: str, path: str, origin: str) -> str:
    ways = "\n".join(f"  - {way}" for way in WAYS_OUT)
    return (
        f"'run_scoped' at {op.loc} in {where} has collective_axes {axes}, which {path} "
        f"does not support. The message is that of {origin}. Ways out:\n{ways}"
    )


def _walk(fn: Function, everything: bool) -> Iterator[tuple[Op, str, bool | str]]:
    """Every ``run_scoped`` (``everything``: every op) reachable from ``fn`` in program order,
    with where it lives and whether a ``call`` leads to it."""
    seen = {id(fn)}

    def visit(
        block: Block, where: str, in_callee: bool | str
    ) -> Iterator[tuple[Op, str, bool | str]]:
        for op in block.ops:
            if everything or op.name == "run_scoped":
                yield op, where, in_callee
            if not op.regions and op.name not in CALLS:  # most ops: nothing to look into
                continue
            for region in op.regions:
                yield from visit(region, where, in_callee)
            callee = op.attrs.get("callee") if op.name in CALLS else None
            if isinstance(callee, Function) and id(callee) not in seen:
                seen.add(id(callee))
                if op.name == "mesh_call":  # a kernel body: upstream's kernel rules see it
                    yield from visit(callee.body, f"@{callee.name} (the kernel of {where})", KERNEL)
                else:
                    yield from visit(callee.body, f"@{callee.name} (called from {where})", True)

    yield from visit(fn.body, f"@{fn.name}", False)
