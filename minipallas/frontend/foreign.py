"""JAX functions inside a minipallas trace: neither side can use the other's traced values.

While ``minipallas.trace`` runs the user's function, its values are minipallas tracers. A JAX
function given one (``jnp.exp(x)``, ``jax.lax.fori_loop(0, n, body, x)``) rejects it with a
message about JAX types, and a JAX transformation tracing a body of the user's hands minipallas
JAX's own tracers (the loop index of ``jax.lax.fori_loop``). Both become ``TraceError``s that name
the JAX function the user called, at the user's line, with the minipallas function to use instead.

The JAX call is found in the user's frames: the source span of the call each frame is executing
(``co_positions``), read as a dotted name and looked up without evaluating any code. Where that
source cannot be read (``python -c``, a REPL), the error names the user's line and the general
fix, from JAX's own words.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import FrameType, ModuleType, TracebackType
from typing import Any

import minipallas
from minipallas.ir.errors import MiniPallasError, TraceError
from minipallas.ir.location import Location, is_internal, user_location

_TRACER_NAMES = ("TracedArray", "TracedRef")  # how JAX's messages name a minipallas value
_GENERAL_FIX = (
    "inside minipallas.trace use minipallas.numpy for array functions and "
    "minipallas.fori_loop / while_loop / cond for control flow"
)
_SPECIAL_FIXES = {
    "jit": "call the function directly, or minipallas.call(f, *args) to keep it a function",
}

Frame = tuple[FrameType, int, int]  # a frame, the instruction it is executing, its line


@dataclass(frozen=True)
class JaxCall:
    """A call from the user's code to a JAX function: as written, the function, the line."""

    text: str
    function: Any
    loc: Location


def is_jax_tracer(x: Any) -> bool:
    """Whether ``x`` is one of JAX's own tracers (a JAX transformation is tracing the code)."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.core.Tracer)


def jax_tracer_error(x: Any) -> TraceError:
    """The error for a JAX tracer used by minipallas code, at the user's line, named after the
    JAX function on the stack that is tracing that code. That function is a transformation
    (``jit``, ``vmap``, ``lax.fori_loop``): its counterpart, if any, is in minipallas's own API,
    never in ``minipallas.numpy``, so ``replacement`` is not given that module."""
    call = _jax_call(_stack())
    if call is None:
        return TraceError(
            f"a JAX tracer ({x!r}) cannot be used in a minipallas trace",
            loc=user_location(),
            fix=_GENERAL_FIX,
        )
    return TraceError(
        f"{call.text} (called at {call.loc}) traces this code with JAX's own tracers, which "
        f"minipallas code cannot use (here: {x!r})",
        op=call.text,
        loc=user_location(),
        fix=replacement(call),
    )


def jax_rejection(error: BaseException, numpy: ModuleType) -> TraceError | None:
    """``error`` as a ``TraceError`` when it is a JAX function rejecting a minipallas value the
    user passed to it; None for any other error, which is left as it is. ``numpy`` is
    ``minipallas.numpy``, where the fix for a ``jax.numpy`` function is: the caller (``trace``)
    passes it, as minipallas.numpy is built on this front end and so cannot be imported here."""
    if isinstance(error, MiniPallasError) or not any(n in str(error) for n in _TRACER_NAMES):
        return None
    frames = _traceback(error.__traceback__)
    call = _jax_call(frames)
    said = str(error).strip().splitlines()[0]
    if call is None:  # the user's source cannot be read (python -c, a REPL): JAX's words only
        loc = _user_line(frames)
        if "JAX" not in said or loc is None:
            return None
        op, fix = None, _GENERAL_FIX
    else:
        op, loc, fix = call.text, call.loc, replacement(call, numpy)
    if "TracedRef" in said:
        fix += "; and read a ref's value first: x_ref[...]"
    return TraceError(
        f"a JAX function, which takes JAX arrays, was given a minipallas traced value "
        f"(JAX said: {type(error).__name__}: {said})",
        op=op,
        loc=loc,
        fix=fix,
    )


def _user_line(frames: Iterable[Frame]) -> Location | None:
    """The innermost line of the user's code in ``frames`` (not minipallas's, not JAX's)."""
    for frame, _, line in frames:
        filename = frame.f_code.co_filename
        if not is_internal(filename) and not _is_jax(frame.f_globals.get("__name__", "")):
            return Location(filename, line)
    return None


def replacement(call: JaxCall, numpy: ModuleType | None = None) -> str:
    """What to call instead of ``call``: minipallas's function of the same name where there is
    one (``minipallas.fori_loop``, or ``minipallas.numpy.exp`` when given ``numpy``, the
    ``minipallas.numpy`` module)."""
    name = getattr(call.function, "__name__", call.text.rpartition(".")[2])
    if name in _SPECIAL_FIXES:
        return _SPECIAL_FIXES[name]
    if name in minipallas.__all__:
        return f"use minipallas.{name}, which traces into the minipallas program"
    if numpy is not None and not name.startswith("_") and hasattr(numpy, name):
        return f"use minipallas.numpy.{name} (minipallas.numpy is jax.numpy for traced values)"
    return _GENERAL_FIX


# ----- finding the user's call to JAX -----


def _stack() -> Iterator[Frame]:
    frame = sys._getframe(1)
    while frame is not None:
        yield frame, frame.f_lasti, frame.f_lineno
        frame = frame.f_back


def _traceback(tb: TracebackType | None) -> list[Frame]:
    """The frames an exception passed through, innermost first."""
    frames = []
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lasti, tb.tb_lineno))
        tb = tb.tb_next
    return frames[::-1]


def _jax_call(frames: Iterable[Frame]) -> JaxCall | None:
    """The innermost call of a JAX function made by the user's code in ``frames``."""
    for frame, lasti, line in frames:
        filename = frame.f_code.co_filename
        if is_internal(filename) or _is_jax(frame.f_globals.get("__name__", "")):
            continue
        text = _called_name(frame, lasti)
        function = None if text is None else _lookup(text, frame)
        if function is not None and _is_jax(_module_of(function)):
            return JaxCall(text, function, Location(filename, line))  # type: ignore[arg-type]
    return None


def _called_name(frame: FrameType, lasti: int) -> str | None:
    """The dotted name of the function the call at instruction ``lasti`` calls, as written."""
    positions = list(frame.f_code.co_positions())  # one entry per 2-byte code unit
    if not 0 <= lasti // 2 < len(positions):
        return None
    first, last, col, end_col = positions[lasti // 2]
    if None in (first, last, col, end_col):
        return None
    lines = [s.encode() for s in linecache.getlines(frame.f_code.co_filename)[first - 1 : last]]
    if len(lines) != last - first + 1:
        return None
    lines[-1] = lines[-1][:end_col]
    lines[0] = lines[0][col:]
    try:
        node = ast.parse(b"(" + b"".join(lines) + b")", mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if not isinstance(node, ast.Call):
        return None
    called = node.func
    while isinstance(called, ast.Call):  # jax.jit(f)(x): the transformation is jax.jit
        called = called.func
    head = called
    while isinstance(head, ast.Attribute):
        head = head.value
    return ast.unparse(called) if isinstance(head, ast.Name) else None


def _lookup(dotted: str, frame: FrameType) -> Any:
    """The object a dotted name denotes in ``frame``, or None."""
    head, *rest = dotted.split(".")
    for namespace in (frame.f_locals, frame.f_globals, vars(builtins)):
        if head in namespace:
            value = namespace[head]
            break
    else:
        return None
    for attr in rest:
        try:
            value = getattr(value, attr)
        except Exception:  # noqa: BLE001 - an attribute that cannot be read names nothing
            return None
    return value


def _module_of(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    return module if isinstance(module, str) else type(obj).__module__


def _is_jax(module: str) -> bool:
    return module.split(".")[0] in ("jax", "jaxlib")
