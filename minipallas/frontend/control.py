"""Control flow and kernel context, with the signatures of their ``jax.lax`` / Pallas namesakes.

Each region-owning construct traces its Python bodies in child scopes (see ``scopes``): values
and refs the bodies use from outside are captured and become operands of the region op, placed
where the op's layout wants them (``for``: loop-invariant operands after the bounds; ``while``:
condition then body operands; ``cond``: the union of what the branches use, shared by all
branches; ``run_scoped``: after the allocations). Loop carries and results are pytrees of arrays
(tuples, lists, dicts, ``None``), flattened with ``jax.tree_util``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

import numpy as np

from minipallas.frontend.promotion import (
    canonical,
    check_fits,
    default_dtype,
    is_python_scalar,
    promote,
)
from minipallas.frontend.refs import TracedRef
from minipallas.frontend.scopes import (
    Tracer,
    TraceScope,
    child,
    current,
    emit,
    mark_nonnegative,
    trace_error,
)
from minipallas.frontend.tracing import function_name, trace
from minipallas.frontend.values import (
    TracedArray,
    as_result,
    asarray,
    astype,
    compare,
    promote_operands,
    surely_nonnegative,
)
from minipallas.ir import dtypes
from minipallas.ir.builder import params
from minipallas.ir.core import Function, Value
from minipallas.ir.types import ArrayType, RefType, as_ref_type


def _flatten(tree: Any) -> tuple[list[Any], Any]:
    from jax import tree_util  # imported on first use: jax is slow to import

    return tree_util.tree_flatten(tree)


# ----- scoped allocation -----


def run_scoped(
    body: Callable[..., Any], *types: RefType, collective_axes: Any = (), **kw_types: RefType
) -> Any:
    """Runs ``body`` on fresh refs of ``types`` (positional, then keyword) that live only
    while it runs; returns what ``body`` returns (arrays)."""
    axes = (collective_axes,) if isinstance(collective_axes, str) else tuple(collective_axes)
    if not all(isinstance(a, str) for a in axes):
        raise trace_error(f"collective_axes must be axis names, got {collective_axes!r}")
    given = (*types, *kw_types.values())
    all_types = [as_ref_type(t) for t in given]
    for t, g in zip(all_types, given, strict=True):
        if t is None:
            raise trace_error(
                f"run_scoped allocates refs, got {g!r}",
                fix="give ref types, e.g. minipallas.tpu.VMEM((8, 128), jnp.float32)",
            )
    scope = child("run_scoped body")
    with scope:
        allocs = params(all_types)
        refs = [TracedRef(v, scope) for v in allocs]
        out = body(*refs[: len(types)], **dict(zip(kw_types, refs[len(types) :], strict=True)))
        leaves, tree = _flatten(out)
        results = [scope.lift(as_result(x, "a run_scoped body")) for x in leaves]
    operands = list(scope.captures)
    block = scope.close([*allocs, *scope.captures.values()], results)
    outs = emit(TracedArray, "run_scoped", operands, {"collective_axes": axes}, [block])
    return tree.unflatten(outs)


# ----- loops -----


def fori_loop(
    lower: Any,
    upper: Any,
    body_fun: Callable[[Any, Any], Any],
    init_val: Any,
    *,
    unroll: int | bool | None = None,
) -> Any:
    """``for i in range(lower, upper): carry = body_fun(i, carry)``; returns the final carry.

    ``unroll`` as in jax (static bounds only): ``True`` traces every iteration inline, no loop;
    an int ``k`` makes each trip of the loop run ``k`` iterations, the ``length % k`` left over
    traced inline after it; ``None``, ``False``, 0 and 1 keep one iteration per trip.
    """
    if unroll is None or unroll is False or (unroll is not True and unroll in (0, 1)):
        return _rolled_loop(lower, upper, body_fun, init_val)
    if not isinstance(unroll, int | np.integer) or unroll < 0:
        raise trace_error(
            f"fori_loop unroll must be a bool or a non-negative int, got {unroll!r}",
            fix="pass unroll=True, or the number of iterations per trip",
        )
    bounds = [_static_int(b) for b in (lower, upper)]
    if None in bounds:
        raise trace_error(
            "fori_loop can unroll only a loop whose bounds are static Python or numpy ints",
            fix="pass the bounds as ints, or drop unroll=",
        )
    start, stop = bounds
    dtype = _index_dtype(lower, upper)
    length = max(stop - start, 0)
    k = max(length, 1) if unroll is True else int(unroll)
    trips, left = divmod(length, k)
    inits, tree = _carries(init_val, "fori_loop")
    carry = tree.unflatten(inits)

    def iterations(index: Callable[[int], TracedArray], count: int, carry: Any) -> Any:
        """``count`` iterations traced inline, the ``j``-th at ``index(j)``."""
        for j in range(count):
            out = body_fun(index(j), carry)
            carry = _unflatten(tree, _conform(out, tree, inits, current(), _BODY), current())
        return carry

    def trip(t: TracedArray, carry: Any) -> Any:
        base = t * k + start
        return iterations(lambda j: astype(base + j if j else base, dtype), k, carry)

    first, count = start, length  # at most one trip: all of it inline
    if trips > 1:
        carry = _rolled_loop(0, trips, trip, carry)
        first, count = start + trips * k, left
    return iterations(lambda j: _constant_index(first + j, dtype), count, carry)


def _constant_index(i: int, dtype: str) -> TracedArray:
    index = asarray(i, dtype)
    if i >= 0:
        mark_nonnegative(index)
    return index


_BODY = "fori_loop body_fun"


def _static_int(x: Any) -> int | None:
    return int(x) if isinstance(x, int | np.integer) and not isinstance(x, bool) else None


def _index_dtype(lower: Any, upper: Any) -> str:
    """The loop index's dtype: the bounds' (Python ints weakly), as ``promote_operands``."""
    strong = [canonical(np.asarray(b).dtype) for b in (lower, upper) if isinstance(b, np.integer)]
    return reduce(promote, strong) if strong else "int32"


def _rolled_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any) -> Any:
    """A ``for`` op of one iteration per trip."""
    bounds = promote_operands(lower, upper)
    if bounds[0].shape != () or not _is_int(bounds[0]):
        raise trace_error(f"fori_loop bounds must be integer scalars, got {bounds[0].type}")
    inits, tree = _carries(init_val, "fori_loop")
    scope = child("fori_loop body")
    with scope:
        index, *carries = params([bounds[0].type, *(c.type for c in inits)])
        i = TracedArray(index, scope)
        if surely_nonnegative(lower):
            mark_nonnegative(i)  # counts up from lower: indexing with it needs no wrap
        out = body_fun(i, _unflatten(tree, carries, scope))
        results = _conform(out, tree, inits, scope, _BODY)
    consts = list(scope.captures)
    block = scope.close([index, *scope.captures.values(), *carries], results)
    outs = emit(
        TracedArray, "for", [*bounds, *consts, *inits], {"num_consts": len(consts)}, [block]
    )
    return tree.unflatten(outs)


def while_loop(
    cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any
) -> Any:
    """``while cond_fun(carry): carry = body_fun(carry)``; returns the final carry."""
    inits, tree = _carries(init_val, "while_loop")
    cond_scope = child("while_loop cond_fun")
    with cond_scope:
        cond_carries = params([c.type for c in inits])
        pred = as_result(cond_fun(_unflatten(tree, cond_carries, cond_scope)), "cond_fun")
        if pred.type != ArrayType((), "bool"):
            raise trace_error(
                f"while_loop cond_fun must return a bool scalar, got {pred.type}",
                fix="compare, e.g. return i < n",
            )
        pred_value = cond_scope.lift(pred)
    body_scope = child("while_loop body_fun")
    with body_scope:
        body_carries = params([c.type for c in inits])
        out = body_fun(_unflatten(tree, body_carries, body_scope))
        results = _conform(out, tree, inits, body_scope, "while_loop body_fun")
    cond_consts, body_consts = list(cond_scope.captures), list(body_scope.captures)
    regions = [
        cond_scope.close([*cond_scope.captures.values(), *cond_carries], [pred_value]),
        body_scope.close([*body_scope.captures.values(), *body_carries], results),
    ]
    attrs = {"cond_nconsts": len(cond_consts), "body_nconsts": len(body_consts)}
    outs = emit(TracedArray, "while", [*cond_consts, *body_consts, *inits], attrs, regions)
    return tree.unflatten(outs)


def _carries(init_val: Any, what: str) -> tuple[list[TracedArray], Any]:
    leaves, tree = _flatten(init_val)
    inits = []
    for x in leaves:
        if isinstance(x, Tracer) and not isinstance(x, TracedArray):
            raise trace_error(
                f"{what} carries arrays, not refs",
                fix="use the ref inside the body directly (it is captured)",
            )
        inits.append(asarray(x))
    return inits, tree


def _unflatten(tree: Any, values: Sequence[Value], scope: TraceScope) -> Any:
    return tree.unflatten([TracedArray(v, scope) for v in values])


def _conform(
    out: Any, tree: Any, like: Sequence[TracedArray], scope: TraceScope, what: str
) -> list[Value]:
    """A body's returned carries, checked against ``tree`` and the types of ``like``."""
    leaves, out_tree = _flatten(out)
    if out_tree != tree:
        raise trace_error(
            f"{what} must return the structure it was given: got {out_tree}, expected {tree}"
        )
    return [
        scope.lift(_to_type(x, v.type, f"{what} output {k}"))
        for k, (x, v) in enumerate(zip(leaves, like, strict=True))
    ]


def _to_type(x: Any, t: ArrayType, what: str) -> TracedArray:
    """``x`` as a value of type ``t``: Python scalars convert weakly, traced values must match."""
    if is_python_scalar(x) and t.shape == ():
        check_fits(x, t.dtype)
        return asarray(x, t.dtype)
    value = as_result(x, what)
    if value.type != t:
        raise trace_error(
            f"{what} has type {value.type}, expected {t}",
            fix=f"make it a {t} (e.g. with .astype or broadcast_to)",
        )
    return value


def _is_int(x: TracedArray) -> bool:
    return dtypes.is_int(x.type.dtype)


# ----- conditionals -----


def cond(
    pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any
) -> Any:
    """``true_fun(*operands)`` if ``pred`` else ``false_fun(*operands)``; an int ``pred``
    means ``pred != 0``. Branch 0 of the IR ``cond`` is ``false_fun``, as in lax.cond."""
    p = asarray(pred)
    if p.shape != () or not (p.type.dtype == "bool" or _is_int(p)):
        raise trace_error(f"cond predicate must be a bool or int scalar, got {p.type}")
    if p.type.dtype != "bool":
        p = compare("ne", p, 0)
    return _branches("cond", astype(p, "int32"), [false_fun, true_fun], operands)


def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """``branches[index](*operands)``, the index clamped into range as in lax.switch."""
    i = asarray(index)
    if i.shape != () or not _is_int(i):
        raise trace_error(f"switch index must be an int scalar, got {i.type}")
    if not branches or not all(callable(b) for b in branches):
        raise trace_error("switch needs a non-empty sequence of functions")
    return _branches("switch", astype(i, "int32"), list(branches), operands)


def when(condition: Any) -> Callable[[Callable[[], None]], None]:
    """Decorator: runs the function when ``condition`` holds (a Python bool decides at trace
    time, as in Pallas); the function returns nothing, and neither does the decorated name."""

    def decorate(f: Callable[[], None]) -> None:
        def body() -> None:
            if f() is not None:
                raise trace_error("a function decorated with when must return nothing")

        if isinstance(condition, bool | np.bool_):
            if condition:
                body()
            return None
        cond(condition, body, lambda: None)
        return None

    return decorate


def _branches(what: str, index: TracedArray, fns: list[Callable[..., Any]], operands: tuple) -> Any:
    """Traces each branch in its own scope, gives their outputs one type, builds the ``cond``."""
    args = [x if isinstance(x, Tracer) else asarray(x) for x in operands]
    scopes, outputs = [], []
    for k, fn in enumerate(fns):
        scope = child(f"{what} branch {k}")
        with scope:
            leaves, tree = _flatten(fn(*args))
            leaves = [
                x if is_python_scalar(x) else as_result(x, f"{what} branch {k}") for x in leaves
            ]
        scopes.append(scope)
        outputs.append((leaves, tree))
    trees = [tree for _, tree in outputs]
    if any(tree != trees[0] for tree in trees):
        raise trace_error(
            f"{what} branches must return the same structure, got {', '.join(map(str, trees))}"
        )
    types = _branch_types(what, [leaves for leaves, _ in outputs])
    results = []
    for scope, (leaves, _) in zip(scopes, outputs, strict=True):
        with scope:
            results.append(
                [
                    scope.lift(_to_type(x, t, f"{scope.what} output {i}"))
                    for i, (x, t) in enumerate(zip(leaves, types, strict=True))
                ]
            )
    shared = list(dict.fromkeys(v for scope in scopes for v in scope.captures))
    blocks = [
        scope.close([scope.captures.get(v) or Value(v.type) for v in shared], values)
        for scope, values in zip(scopes, results, strict=True)
    ]
    outs = emit(TracedArray, "cond", [index, *shared], {}, blocks)
    return outputs[0][1].unflatten(outs)


def _branch_types(what: str, outputs: list[list[Any]]) -> list[ArrayType]:
    """The type of each output position: the branches' traced type (which must agree), or for
    Python scalars in every branch, their promoted default dtype."""
    types = []
    for i, column in enumerate(zip(*outputs, strict=True)):
        traced = {x.type for x in column if isinstance(x, TracedArray)}
        if len(traced) > 1:
            raise trace_error(
                f"{what} branches return different types for output {i}: "
                f"{', '.join(sorted(map(str, traced)))}",
                fix="make every branch return the same shape and dtype",
            )
        types.append(
            traced.pop() if traced else ArrayType((), reduce(promote, map(default_dtype, column)))
        )
    return types


# ----- calls and kernel context -----


def call(f: Callable[..., Any] | Function, *args: Any) -> Any:
    """Calls ``f`` (a ``Function``, or a Python function traced once per argument types) on
    ``args``; returns None, one array, or a tuple for several results."""
    values = [x if isinstance(x, Tracer) else asarray(x) for x in args]
    types = tuple(x.type for x in values)
    if isinstance(f, Function):
        fn = f
    elif callable(f):
        fn = _traced_callee(f, types)
    else:
        raise trace_error(f"call needs a function, got {type(f).__name__}")
    if types != fn.param_types:
        raise trace_error(
            f"@{fn.name} takes ({', '.join(map(str, fn.param_types))}), "
            f"got ({', '.join(map(str, types))})"
        )
    outs = emit(TracedArray, "call", values, {"callee": fn})
    return None if not outs else outs[0] if len(outs) == 1 else outs


def _traced_callee(f: Callable[..., Any], types: tuple) -> Function:
    """``f`` traced for ``types``, once per trace; a name already used gets a numeric suffix
    (a module's functions need distinct names)."""
    scope = current()
    key = (f, types)
    if key not in scope.cache:
        name = base = function_name(f)
        for k in itertools.count(1):
            if name not in scope.names:
                break
            name = f"{base}_{k}"
        scope.names.add(name)
        scope.cache[key] = trace(f, *types, name=name)
    return scope.cache[key]


def program_id(axis: int) -> TracedArray:
    """This kernel instance's index along grid axis ``axis`` (an int32 scalar)."""
    return _grid_query("program_id", axis)


def num_programs(axis: int) -> TracedArray:
    """The size of the grid along axis ``axis`` (an int32 scalar)."""
    return _grid_query("num_programs", axis)


def _grid_query(name: str, axis: Any) -> TracedArray:
    if not isinstance(axis, int | np.integer) or isinstance(axis, bool) or axis < 0:
        raise trace_error(f"{name} takes a static grid axis (an int >= 0), got {axis!r}")
    (result,) = emit(TracedArray, name, [], {"axis": int(axis)})
    mark_nonnegative(result)
    return result
