"""``interpret``: check and bind a function's arguments, run it, return its results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.collectives import check_mode
from minipallas.ir.conversions import canonical_bools, to_dtype
from minipallas.ir.core import Function
from minipallas.ir.errors import InterpretError
from minipallas.ir.interpret.engine import Interpreter, Ref, RuleSet, describe
from minipallas.ir.interpret.programs import Programs
from minipallas.ir.interpret.schedules import across, check_schedules
from minipallas.ir.types import RefType, Type


def interpret(
    fn: Function,
    *args: Any,
    uninitialized: str = "nan",
    checks: bool = False,
    program_ids: Sequence[int] | None = None,
    grid: Sequence[int] | None = None,
    perturb: RuleSet | None = None,
    grid_names: Sequence[str] | None = None,
    collectives: str = "reject",
    schedule: str | int | Sequence[str | int] = "lockstep",
) -> tuple[np.ndarray, ...]:
    """Evaluate ``fn`` with numpy; return its results as a tuple of arrays (empty if none).

    ``Ref`` parameters take numpy arrays of exactly the ref's shape and dtype, mutated in place
    as references are; array parameters take numpy arrays of exactly their shape and dtype
    (copied), a 0-d one also a numpy or Python scalar of its kind (an int in range for an
    integer dtype, a float rounded to nearest). Bools are read by value: an argument's bytes
    other than 0 and 1 as a canonical copy, a ref's canonicalized in place.

    Each entry into a ``run_scoped`` allocates fresh buffers holding upstream discharge's
    values (NaN, the integer minimum, False) under ``uninitialized="nan"``; ``"error"`` raises
    ``InterpretError`` at a read of an element never written. Out-of-range dynamic indices
    follow upstream (slice starts and integer indices clamp, integer-array writes drop);
    ``checks=True`` raises at any out-of-range index or uninitialized read instead. In a
    kernel's loop program such errors name the grid point (``grid_steps``), and reading an
    unwritten scratch or output block, an output element no grid point writes and an index
    map's block outside its array are errors too; a partial block's padding reads as the fill.

    Arithmetic is XLA's on CPU (``xla.numerics``, ``arrays``): integers wrap, integer division
    by zero is -1, float-to-int conversion saturates, bfloat16/float16 math is done in float32
    and rounded once, float32/bfloat16 subnormals are flushed to zero by arithmetic.
    ``program_ids`` and ``grid`` (one int per grid axis) are what ``program_id`` and
    ``num_programs`` return. ``perturb`` (a ``RuleSet``) runs the program with its rule table
    in place of ``RULES``: the envelope's ``Perturbation`` (``tools.envelope.perturb``) and
    ``OrderBound`` (``tools.envelope.reorder``) take the freedoms a correct compiler has.

    A ``run_scoped`` with collective axes is rejected before anything runs, with upstream's
    error for the same program (``ir.collectives``). ``collectives="simulate"`` (with ``grid``
    and ``grid_names``) runs every program of the grid together instead (``programs``): shared
    allocations per group, ``barrier``, races (``RaceError``) and deadlocks reported; each
    result gains leading axes of the grid's shape. A ``mesh_call`` runs its cores one after
    another, or together under ``"simulate"``. ``schedule`` is "lockstep", a seed for random
    interleavings, or a list of them whose bits must agree (``ScheduleDependentError``).
    """
    if not isinstance(schedule, str | int):
        options = dict(
            uninitialized=uninitialized,
            checks=checks,
            program_ids=program_ids,
            grid=grid,
            perturb=perturb,
            grid_names=grid_names,
            collectives=collectives,
        )
        return across(
            lambda a, s: interpret(fn, *a, **options, schedule=s), args, check_schedules(schedule)
        )
    _check_function(fn, perturb)
    interp = Interpreter(
        uninitialized, checks, _axes(program_ids, "program_ids"), _axes(grid, "grid"), perturb
    )
    _check_grid(interp.program_ids, interp.grid)
    kernel = interp.program_ids is not None or interp.grid is not None
    check_mode(fn, collectives, "cpu_kernel" if kernel else "interpreter", InterpretError)
    bound = _bound(interp, fn, args)
    interp.collectives, interp.schedule = collectives, schedule  # for mesh_call (``mesh``)
    if collectives == "simulate" and (kernel or grid_names is not None or not _meshes(fn)):
        return _simulate(fn, bound, interp, grid_names, schedule, (uninitialized, checks, perturb))
    with np.errstate(all="ignore"):  # integers wrap and floats follow IEEE, silently
        results = interp.run(fn.body, bound)
    if interp.copies is not None and interp.program_ids is None:  # not one step of a grid
        interp.copies.finish(interp)
    return tuple(_result(fn, i, r) for i, r in enumerate(results))


def _check_function(fn: Any, perturb: Any) -> None:
    if not isinstance(fn, Function):
        raise InterpretError(
            f"expected a Function, got {type(fn).__name__}",
            fix="trace or parse a function first (minipallas.trace, minipallas.parse)",
        )
    if perturb is not None and not isinstance(perturb, RuleSet):
        raise InterpretError(
            f"perturb must be a RuleSet (an object with a rules() method) or None, got "
            f"{type(perturb).__name__}",
            fix="pass perturb=minipallas.tools.envelope.perturb.Perturbation(seed)",
        )


def _bound(interp: Interpreter, fn: Function, args: Sequence[Any]) -> list[Any]:
    """The arguments checked against ``fn``'s parameters, as the interpreter holds them."""
    if len(args) != len(fn.params):
        raise InterpretError(f"@{fn.name} takes {len(fn.params)} arguments, got {len(args)}")
    return [
        _bind(interp, f"argument {i} of @{fn.name}", p.type, a)
        for i, (p, a) in enumerate(zip(fn.params, args, strict=True))
    ]


def _meshes(fn: Function) -> bool:
    """Whether ``fn`` runs a ``mesh_call``, whose cores ``collectives="simulate"`` runs
    together without a ``grid``."""
    return any(op.name == "mesh_call" for f in (fn, *fn.callees()) for op in f.walk())


def _simulate(
    fn: Function,
    bound: list[Any],
    interp: Interpreter,
    grid_names: Sequence[str] | None,
    schedule: str | int,
    options: tuple,
) -> tuple[np.ndarray, ...]:
    """Every program of the grid together (``programs``); results stacked over the grid."""
    if interp.grid is None or grid_names is None or interp.program_ids is not None:
        raise InterpretError(
            "collectives='simulate' runs every program of a grid: it needs grid= and "
            "grid_names=, and takes no program_ids",
            fix="interpret(fn, ..., grid=(4,), grid_names=('x',), collectives='simulate')",
        )
    for a in bound:
        if isinstance(a, Ref) and not a.data.flags.c_contiguous:
            raise InterpretError(
                "collectives='simulate' shares ref arguments among programs: they must be "
                "C-contiguous arrays",
                fix="pass np.ascontiguousarray(x) (and read the result from that array)",
            )
    grid = interp.grid
    per_program = Programs(grid, tuple(grid_names), schedule, lambda ids: interp.at(ids, grid)).run(
        fn, bound
    )
    return tuple(
        np.array([_result(fn, i, r[i]) for r in per_program]).reshape((*grid, *t.shape))
        for i, t in enumerate(fn.result_types)
    )


def _bind(interp: Interpreter, what: str, t: Type, value: Any) -> Any:
    if isinstance(t, RefType):
        if not isinstance(value, np.ndarray):
            raise InterpretError(
                f"{what} is a {t}: expected a numpy array, got {type(value).__name__}",
                fix="pass a numpy array; the interpreter writes into it in place",
            )
        _check_array(what, t, value)
        if not value.flags.writeable:
            raise InterpretError(
                f"{what} is a {t}, but the array is read-only",
                fix="pass a writable array (e.g. a copy)",
            )
        if t.dtype == "bool":  # a buffer's odd bytes as 0 or 1, in place (it is the ref)
            np.copyto(value, canonical_bools(value))
        return Ref(value, np.ones(t.shape, np.bool_) if interp.tracking else None)
    if isinstance(value, np.ndarray | np.generic):
        _check_array(what, t, value)
        return canonical_bools(np.array(value)) if t.dtype == "bool" else np.array(value)
    if isinstance(value, bool | int | float) and t.shape == ():
        return _python_scalar(what, t, value)
    raise InterpretError(f"{what} is a {t}: expected a numpy array, got {type(value).__name__}")


def _check_array(what: str, t: Type, value: np.ndarray | np.generic) -> None:
    if value.dtype != dtypes.to_numpy(t.dtype) or value.shape != t.shape:
        raise InterpretError(
            f"{what} must be {t.value_type if isinstance(t, RefType) else t}, "
            f"got an array of {describe(value)}",
            fix="convert with .astype(...) / reshape it first; the interpreter does not cast",
        )


def _python_scalar(what: str, t: Type, value: bool | int | float) -> np.ndarray:
    np_dtype = dtypes.to_numpy(t.dtype)
    if t.dtype == "bool":
        fits = isinstance(value, bool)
    elif dtypes.is_int(t.dtype):
        info = np.iinfo(np_dtype)
        fits = isinstance(value, int) and not isinstance(value, bool)
        fits = fits and info.min <= value <= info.max
    else:  # floats round to nearest; ints too large for a Python float do not fit
        fits = not isinstance(value, bool)
        try:
            value = float(value)
        except OverflowError:
            fits = False
    if not fits:
        raise InterpretError(
            f"{what} is a {t}: the Python value {value!r} does not convert to it exactly",
            fix=f"pass a value of dtype {t.dtype}",
        )
    return to_dtype(value, t.dtype)


def _axes(values: Sequence[int] | None, name: str) -> tuple[int, ...] | None:
    if values is None:
        return None
    try:
        axes = tuple(values)
    except TypeError:
        axes = None
    if axes is None or not all(isinstance(v, int | np.integer) and v >= 0 for v in axes):
        raise InterpretError(f"{name} must be a tuple of non-negative ints, got {values!r}")
    return tuple(int(v) for v in axes)


def _check_grid(program_ids: tuple[int, ...] | None, grid: tuple[int, ...] | None) -> None:
    if program_ids is None or grid is None:
        return
    if len(program_ids) != len(grid) or any(p >= g for p, g in zip(program_ids, grid, strict=True)):
        raise InterpretError(
            f"program_ids={program_ids} is not a point of grid={grid}",
            fix="give one id per grid axis, each below that axis's size",
        )


def _result(fn: Function, i: int, value: Any) -> np.ndarray:
    """A fresh, writable copy; checks the interpreter produced the declared type."""
    out = np.array(value)
    t = fn.result_types[i]
    if out.dtype != dtypes.to_numpy(t.dtype) or out.shape != t.shape:
        raise InterpretError(
            f"result {i} of @{fn.name} came out as {describe(out)}, declared {t}",
            fix="this is an interpreter bug; please report it with the program",
        )
    return out
