"""Import rules for ``jax.random`` with threefry keys, in a program or a Pallas kernel body.

- ``threefry2x32`` (four uint32 arrays in, broadcast together; two out) is the Threefry-2x32
  hash written out in uint32 ``add``, ``xor`` and rotations (an ``or`` of ``shift_left`` and
  ``shift_right_logical``): five groups of four rounds, each group followed by a key
  injection, as upstream's ``_threefry2x32_lowering`` computes it, so every target gets its
  bits with integer ops;
- ``iota_2x32_shape`` (the counters of ``random_bits`` and ``split``) is the row-major position
  of each element, split into its high and low 32 bits;
- a key array ``key<fry>[*s]`` imports as its key data, ``uint32[*s, 2]`` (``type_of``), so
  ``random_wrap``, ``random_unwrap`` and ``random_clone`` are the identity, and
  ``random_seed``, ``random_bits``, ``random_split`` and ``random_fold_in`` import as
  upstream's definition of them on key data (``*_impl_base`` in ``jax/_src/random/prng.py``,
  which its own lowering traces too), traced under the equation's source location and imported
  inline; that brings the two primitives above. The bits follow the
  ``jax_threefry_partitionable`` setting in force while importing, as upstream's follow it
  while lowering.

Other key implementations (``rbg``, ``unsafe_rbg``, and Pallas TPU's hardware PRNG, whose
bits only the chip defines) are refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax

from minipallas.interop.importer.engine import ImportScope, rule
from minipallas.interop.importer.params import READ, NoEffect
from minipallas.interop.importer.rules.lax import identity, operands
from minipallas.ir.core import Value
from minipallas.ir.types import ArrayType
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import random_prng, source_info_util

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # the rounds of even and odd groups
_PARITY = 0x1BD11BDA  # Threefry's key schedule constant

rule("random_unwrap", "random_clone", params={})(identity)
rule(
    "random_wrap",
    params={
        "impl": NoEffect(
            "wrapping is the identity on the key data for every implementation; the "
            "primitives that use the keys read it from their dtype (threefry only)"
        )
    },
)(identity)


@rule("threefry2x32", params={})
def threefry2x32(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    k0, k1, x0, x1 = operands(scope, eqn)
    shape = x0.type.shape

    def u32(n: int) -> Value:
        return scope.constant(n, "uint32", shape)

    def add(*xs: Value) -> Value:
        total = xs[0]
        for x in xs[1:]:
            total = scope.emit("add", [total, x])
        return total

    def rotate_left(x: Value, r: int) -> Value:
        high = scope.emit("shift_left", [x, u32(r)])
        return scope.emit("or", [high, scope.emit("shift_right_logical", [x, u32(32 - r)])])

    keys = (k0, k1, scope.emit("xor", [scope.emit("xor", [k0, k1]), u32(_PARITY)]))
    x0, x1 = add(x0, keys[0]), add(x1, keys[1])
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            x0 = add(x0, x1)
            x1 = scope.emit("xor", [x0, rotate_left(x1, r)])
        x0 = add(x0, keys[(group + 1) % 3])
        x1 = add(x1, keys[(group + 2) % 3], u32(group + 1))
    return [x0, x1]


@rule("iota_2x32_shape", params={"shape": READ})
def iota_2x32_shape(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    shape = tuple(eqn.params["shape"])
    if math.prod(shape) > 2**32:
        raise scope.error(
            f"{math.prod(shape)} random values need counters past 2**32",
            fix="draw at most 2**32 values per call",
        )
    low = None
    for d in range(len(shape)):
        stride = math.prod(shape[d + 1 :])
        position = scope.emit("iota", [], type=ArrayType(shape, "uint32"), dimension=d)
        if stride != 1:
            position = scope.emit("mul", [position, scope.constant(stride, "uint32", shape)])
        low = position if low is None else scope.emit("add", [low, position])
    return [scope.constant(0, "uint32", shape), low]


@rule("prng_seed", params={})  # refused whatever it carries
@rule("prng_random_bits", params={"shape": READ})
def hardware_prng(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    raise scope.error(
        "Pallas TPU's hardware PRNG (pltpu.prng_seed / prng_random_bits) cannot be imported: "
        "only the chip defines its bits (upstream's interpret=True cannot run it either)",
        fix="draw with jax.random and a threefry key (jax.random.key(seed)) in the kernel",
    )


def _impl(scope: ImportScope, eqn: jax_core.JaxprEqn) -> object:
    """The PRNG implementation of the keys ``eqn`` makes or takes; only threefry imports."""
    impl = eqn.params.get("impl")
    if impl is None:
        impl = eqn.invars[0].aval.dtype._impl
    if impl.name != "threefry2x32":
        raise scope.error(
            f"keys of the PRNG implementation '{impl.name}' cannot be imported",
            fix="make the keys with jax.random.key(seed, impl='threefry2x32') (the default)",
        )
    return impl


def _inline(
    scope: ImportScope, eqn: jax_core.JaxprEqn, definition: Callable[..., jax.Array]
) -> list[Value]:
    """Import ``definition`` of ``eqn`` on its operands' physical values, traced as if written
    on the equation's line (so that its ops and errors are located there)."""
    avals = [jax_core.physical_aval(a.aval) for a in eqn.invars]
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]
    info = eqn.source_info
    with source_info_util.user_context(info.traceback, name_stack=info.name_stack):
        closed = jax.make_jaxpr(definition)(*specs)
    return scope.inline(closed.jaxpr, closed.consts, [scope.read(a) for a in eqn.invars])


@rule("random_seed", params={"impl": READ})
def random_seed(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    impl = _impl(scope, eqn)
    return _inline(scope, eqn, lambda seeds: random_prng.random_seed_impl_base(seeds, impl=impl))


@rule("random_bits", params={"bit_width": READ, "shape": READ})
def random_bits(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    impl, ndim, params = _impl(scope, eqn), eqn.invars[0].aval.ndim, eqn.params

    def bits(keys: jax.Array) -> jax.Array:
        return random_prng.random_bits_impl_base(impl, keys, ndim, **params)

    return _inline(scope, eqn, bits)


@rule("random_split", params={"shape": READ})
def random_split(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    impl, ndim, shape = _impl(scope, eqn), eqn.invars[0].aval.ndim, eqn.params["shape"]

    def split(keys: jax.Array) -> jax.Array:
        return random_prng.random_split_impl_base(impl, keys, ndim, shape=shape)

    return _inline(scope, eqn, split)


@rule("random_fold_in", params={})
def random_fold_in(scope: ImportScope, eqn: jax_core.JaxprEqn) -> Sequence[Value]:
    impl, shape = _impl(scope, eqn), eqn.invars[0].aval.shape

    def fold_in(keys: jax.Array, msgs: jax.Array) -> jax.Array:
        return random_prng.random_fold_in_impl_base(impl, keys, msgs, shape)

    return _inline(scope, eqn, fold_in)
