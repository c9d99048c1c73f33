"""``minipallas.compile``: run a function's lowered StableHLO module on XLA's CPU backend.

The module ``minipallas.lower`` emits is the one that runs: its text goes to XLA's CPU compiler
through jaxlib, once per function object, and each call hands numpy arrays in and out.
Results follow the discharged convention: the function's results, then the final values of
its ref parameters, in parameter order.

The cache is keyed by the function object itself, weakly: a function is compiled once while it
lives, and its executable goes with it (fuzzers compile thousands).

The module is named ``compiled``, not ``compile``: a submodule named like the public function
would shadow it wherever both are reached as attributes of one package.
"""

from __future__ import annotations

import weakref

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.conversions import canonical_bools
from minipallas.ir.core import Function
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.types import ArrayType
from minipallas.lowering.lowered import Lowered, lower
from minipallas.lowering.runtime import jax_dispatch, xla_cpu

_CACHE: weakref.WeakKeyDictionary[Function, Compiled] = weakref.WeakKeyDictionary()


def compile(fn: Function) -> Compiled:  # noqa: A001 - the public name, like jax.jit's role
    """A callable running ``fn`` on XLA:CPU; compiled on first request, then cached."""
    compiled = _CACHE.get(fn)
    if compiled is None:
        compiled = _CACHE[fn] = Compiled(lower(fn, target="stablehlo"))
    return compiled


class Compiled:
    """An XLA:CPU executable for one lowered function; call it with numpy arrays.

    ``jitted`` is the executable behind ``jax.jit``'s dispatch (``runtime/jax_dispatch.py``), and
    ``wait`` learns how long its results take, so a numpy call polls rather than sleeps;
    ``jitted`` is ``None`` where a ``debug_print`` calls back into Python; then ``executable`` is
    jaxlib's, called through ``xla_cpu.cpu_execute``."""

    def __init__(self, lowered: Lowered) -> None:
        self.lowered = lowered
        self.param_types: tuple[ArrayType, ...] = lowered.function.param_types
        self._expected = tuple((t.shape, dtypes.to_numpy(t.dtype)) for t in self.param_types)
        text, callbacks = lowered.as_text(debug_info=False), lowered.host_callbacks
        if callbacks:  # a debug_print's: only jaxlib's bindings take them
            self.jitted = None
            self.executable = xla_cpu.cpu_compile(text, callbacks)
        else:
            results = tuple(
                (t.shape, dtypes.to_numpy(t.dtype)) for t in lowered.function.result_types
            )
            self.jitted = jax_dispatch.jitted(text, self._expected, results)
            self.wait = jax_dispatch.Wait()

    def __call__(self, *args: object) -> tuple[np.ndarray, ...]:
        if len(args) != len(self.param_types):
            raise MiniPallasError(
                f"@{self.lowered.function.name} takes {len(self.param_types)} arguments, "
                f"got {len(args)}"
            )
        arrays = [self._check(i, a) for i, a in enumerate(args)]
        if self.jitted is not None:
            return tuple(map(xla_cpu.writable, self.wait(self.jitted(*arrays))))
        return tuple(xla_cpu.cpu_execute(self.executable, arrays))

    def _check(self, i: int, arg: object) -> np.ndarray:
        if type(arg) is np.ndarray and (arg.shape, arg.dtype) == self._expected[i]:
            return canonical_bools(arg) if arg.dtype == np.bool_ else arg  # the common case
        expected = self.param_types[i]
        dtype = dtypes.to_numpy(expected.dtype)
        if type(arg) in (bool, int, float) and expected.shape == ():
            try:
                return np.asarray(arg, dtype=dtype)  # a Python scalar takes the parameter's dtype
            except OverflowError:
                pass
        array = np.asarray(arg)
        if array.shape != expected.shape or array.dtype != dtype:
            got = f"{_short(array.dtype)}[{','.join(map(str, array.shape))}]"
            raise MiniPallasError(
                f"argument {i} of @{self.lowered.function.name} must be {expected}, got {got}",
                fix=f"pass a numpy array of shape {expected.shape} and dtype {dtype}",
            )
        return canonical_bools(array) if array.dtype == np.bool_ else array

    def __repr__(self) -> str:
        return f"<Compiled @{self.lowered.function.name} for XLA:CPU>"


def _short(dtype: np.dtype) -> str:
    """``f32`` for a minipallas dtype, numpy's name (``float64``) for any other."""
    try:
        return dtypes.SHORT[dtypes.canonicalize(dtype)]
    except MiniPallasError:
        return str(dtype)
