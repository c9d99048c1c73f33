"""Shared pieces of the port: ``MeshCase``, the case list and the helpers every section uses."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from minipallas.tools.difftest.mosaic import assume_chip


@dataclasses.dataclass(frozen=True)
class MeshCase:
    name: str  # "upstream/<TestClass>.<test_name>[param]"
    cores: int  # num_cores of the mesh
    # -> (jax function f, numpy args); f(*args) calls pl.kernel / core_map
    build: Callable[[], tuple[Callable, tuple[np.ndarray, ...]]]
    # numpy outputs (tuple) for args (what the upstream test asserts); None if expect != "ok"
    reference: Callable[..., tuple[np.ndarray, ...]] | None
    expect: str = "ok"
    what: str = ""  # one line: what the upstream test checks, and the upstream file:line


CASES: list[MeshCase] = []
NOT_PORTED: list[tuple[str, str]] = []

_UP = "tests/pallas/"


def _on_any_device(build):
    """``build`` with its ``f`` run under ``assume_chip("TPU_V5E")``."""

    @functools.wraps(build)
    def wrapped():
        f, args = build()

        @functools.wraps(f)
        def g(*a):
            with assume_chip("TPU_V5E"):
                return f(*a)

        return g, args

    return wrapped


def _add(name, cores, build, reference, *, expect="ok", what=""):
    assert (reference is None) == (expect != "ok"), name
    CASES.append(
        MeshCase(
            name=f"upstream/{name}",
            cores=cores,
            build=_on_any_device(build),
            reference=reference,
            expect=expect,
            what=what,
        )
    )


def _params(**kw) -> str:
    return "[" + ",".join(f"{k}={v}" for k, v in kw.items()) + "]"


def _ints(shape, seed, lo=-3, hi=3, dtype=np.float32) -> np.ndarray:
    """Deterministic integers in [lo, hi], as ``dtype``."""
    return np.random.default_rng(seed).integers(lo, hi + 1, size=shape).astype(dtype)


def _mm(x, y) -> np.ndarray:
    """x @ y for integer-valued float inputs, exact, as float32."""
    return (np.asarray(x, np.float64) @ np.asarray(y, np.float64)).astype(np.float32)


def _i32(v) -> np.ndarray:
    return np.asarray(v, np.int32)


def _identity(*args):
    return tuple(args)


def _arange_i32(*shape) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
