"""The interpreter's machinery: options, mutable buffers, the rule table and block evaluation.

Evaluation is the classic environment-plus-rules interpreter (autodidax's ``eval_jaxpr``):

1. Bind a block's parameters to the values it is entered with, in a dict keyed by ``Value``
   (identity hashing, so lookups are O(1) and never confuse two equal-looking values).
2. For each op in order, look up its rule by name in ``RULES``, call it with the operand values,
   and bind its results. An op without a rule is an ``InterpretError`` naming it.
3. Return the values the block yields.

Region ops (loops, ``cond``, ``run_scoped``, ``call``) re-enter step 1 for their regions, so the
cost is linear in the number of ops executed.

Array values are numpy arrays or numpy scalars of exactly the IR dtype; they are never mutated
after they are bound. Ref values are ``Ref`` objects that alias numpy storage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Block, Op
from minipallas.ir.errors import InterpretError, MiniPallasError
from minipallas.ir.rules import RuleTable
from minipallas.ir.types import ArrayType, RefType, Type, initial_value, is_semaphore


class Ref:
    """A mutable buffer, or a view of one, as a ``Ref`` value holds it at run time.

    ``data`` is a numpy array that aliases the underlying storage (a window, transpose or
    bitcast of a ref is a numpy view of it, so writes through any of them are seen by all).
    ``written`` is a bool array viewed exactly like ``data``, marking the elements ever written,
    or None when the interpreter does not track initialization. A reshape that numpy cannot
    express as a view (a strided window seen with another shape) keeps ``data`` as is and adds
    ``positions``: for each element of the view, its row-major position in ``data``. A bitcast
    view to a wider dtype (whose elements join pieces from several rows) sets ``joined`` to
    that dtype; ``positions`` then has a last dim more, each element's pieces, low first.
    """

    __slots__ = ("data", "written", "positions", "joined")

    def __init__(
        self,
        data: np.ndarray,
        written: np.ndarray | None,
        positions: np.ndarray | None = None,
        joined: np.dtype | None = None,
    ) -> None:
        self.data = data
        self.written = written
        self.positions = positions
        self.joined = joined

    @property
    def shape(self) -> tuple[int, ...]:
        if self.positions is None:
            return self.data.shape
        return self.positions.shape[:-1] if self.joined is not None else self.positions.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype if self.joined is None else self.joined


class Rule(Protocol):
    """How one op runs: given the interpreter, the op and its operand values, return its results.

    Rules return one value per op result (a list or tuple, empty for ops with no results). A rule
    reports bad run-time input by raising ``interp.error(op, ...)``.
    """

    def __call__(self, interp: Interpreter, op: Op, args: Sequence[Any]) -> Sequence[Any]: ...


RULES: RuleTable[Rule] = RuleTable("interpreter rule")
rule = RULES.register


@runtime_checkable
class RuleSet(Protocol):
    """A rule table to run in place of ``RULES`` (``interpret(..., perturb=)``): ``rules()``
    returns it, usually ``RULES`` with some rules replaced. The difftest's ``Perturbation`` and
    ``OrderBound`` are rule sets (``minipallas.tools.envelope.perturb``, ``reorder``): the
    interpreter runs them without knowing them."""

    def rules(self) -> Mapping[str, Rule]: ...


def conforms(value: Any, t: Type) -> bool:
    """Whether a run-time value has exactly the IR type ``t`` (kind, shape and numpy dtype)."""
    if type(value) is Ref:
        return type(t) is RefType and value.shape == t.shape and value.dtype == _NP[t.dtype]
    return type(t) is ArrayType and value.shape == t.shape and value.dtype == _NP[t.dtype]


def describe(value: Any) -> str:
    """A run-time value written like an IR type, for messages."""
    try:
        name = dtypes.SHORT[dtypes.canonicalize(value.dtype)]
    except MiniPallasError:
        name = str(value.dtype)
    text = f"{name}[{','.join(map(str, value.shape))}]"
    return f"Ref{{{text}}}" if isinstance(value, Ref) else text


UNINITIALIZED_MODES = ("nan", "error")
_NP = {name: dtypes.to_numpy(name) for name in dtypes.NAMES}


class Interpreter:
    """Runs blocks under one set of options.

    ``uninitialized``: "nan" (fresh scratch holds ``dtypes.fill_value``) or "error" (reading an
    element never written raises). ``checks``: raise on any out-of-range dynamic index (instead of
    clamping or dropping) and on any uninitialized read. ``program_ids`` / ``grid``: what
    ``program_id`` / ``num_programs`` return. ``perturb``: a ``RuleSet`` whose rule table
    (the difftest's: the float freedoms a correct compiler has) replaces ``RULES``; None:
    ``RULES``.
    """

    def __init__(
        self,
        uninitialized: str = "nan",
        checks: bool = False,
        program_ids: tuple[int, ...] | None = None,
        grid: tuple[int, ...] | None = None,
        perturb: RuleSet | None = None,
    ) -> None:
        if uninitialized not in UNINITIALIZED_MODES:
            raise InterpretError(
                f"uninitialized={uninitialized!r} is not a mode",
                fix=f"use one of {', '.join(map(repr, UNINITIALIZED_MODES))}",
            )
        self.checks = bool(checks)
        self.tracking = self.checks or uninitialized == "error"
        self.options = (uninitialized, checks, perturb)  # what a program of a mesh_call gets
        # how a mesh_call runs its cores: "reject" (one after another) or "simulate" (together,
        # under ``schedule``); ``interpret(..., collectives=, schedule=)`` sets them
        self.collectives = "reject"
        self.schedule: str | int = "lockstep"
        self.program_ids = program_ids
        self.grid = grid
        # under collectives="simulate": the programs run together (``programs.Programs``),
        # this one's number among them, and the grid's axis names
        self.together: Any = None
        self.program: int | None = None
        self.grid_names: tuple[str, ...] | None = None
        # under checks: the async copies started and not yet waited for (``dma.InFlight``)
        self.copies: Any = None
        self.rules: Mapping[str, Rule] = RULES if perturb is None else perturb.rules()

    def at(
        self,
        program_ids: tuple[int, ...],
        grid: tuple[int, ...],
        grid_names: tuple[str, ...] | None = None,
    ) -> Interpreter:
        """A fresh interpreter under this one's options for one program of ``grid``."""
        uninitialized, checks, perturb = self.options
        program = Interpreter(uninitialized, checks, tuple(map(int, program_ids)), grid, perturb)
        program.grid_names = grid_names
        return program

    def error(self, op: Op, message: str, fix: str | None = None) -> InterpretError:
        """An ``InterpretError`` located at ``op``; rules ``raise`` it."""
        return InterpretError(message, op=op.name, loc=op.loc, fix=fix)

    def allocate(self, ref_type: RefType) -> Ref:
        """A fresh buffer holding ``dtypes.fill_value``; under tracking, nothing in it is written
        yet. Semaphores start at 0, as on hardware."""
        data = np.full(ref_type.shape, initial_value(ref_type), dtypes.to_numpy(ref_type.dtype))
        counted = is_semaphore(ref_type)  # a count is always there to read
        written = np.full(ref_type.shape, counted) if self.tracking else None
        return Ref(data, written)

    def run(self, block: Block, args: Sequence[Any]) -> list[Any]:
        """Evaluate ``block`` with its parameters bound to ``args``; return what it yields."""
        env = dict(zip(block.params, args, strict=True))
        rules = self.rules
        for op in block.ops:
            fn = rules.get(op.name)
            if fn is None:
                raise self.error(op, "the interpreter has no rule for this op")
            try:
                ins = [env[v] for v in op.operands]
            except KeyError:
                raise self.error(
                    op,
                    "an operand is used before it is defined",
                    fix="run minipallas.verify(fn) to find the malformed IR",
                ) from None
            try:
                outs = fn(self, op, ins)
                for v, x in zip(op.results, outs, strict=True):
                    if not conforms(x, v.type):
                        raise self.error(
                            op,
                            f"produced {describe(x)} for a result of type {v.type}",
                            fix="this is an interpreter bug; please report it with the program",
                        )
                    env[v] = x
            except MiniPallasError:
                raise
            except Exception as e:  # a numpy failure on IR the verifier would reject
                raise self.error(
                    op,
                    f"failed: {type(e).__name__}: {e}",
                    fix="run minipallas.verify(fn); if it passes, this is an interpreter bug",
                ) from e
        return [env[v] for v in block.results]
