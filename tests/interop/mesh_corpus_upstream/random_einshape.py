"""tests/pallas/tpu_pallas_random_test.py and tests/pallas/einshape_test.py."""

from __future__ import annotations

import functools

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax import random as jax_random
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mesh_corpus_upstream.common import _UP, _add, _params

# --------------------------------------------------------------------------------------------
# tests/pallas/tpu_pallas_random_test.py and tests/pallas/einshape_test.py
# --------------------------------------------------------------------------------------------

_RANDOM = _UP + "tpu_pallas_random_test.py"
_EINSHAPE = _UP + "einshape_test.py"


def _random_key_in_core_map(cores):
    def main(refs):
        key_hbm, o_ref = refs

        @pl.core_map(pltpu.create_tensorcore_mesh("core", num_cores=cores))
        def _():
            @functools.partial(
                pl.run_scoped,
                key_smem=pltpu.SMEM((), key_hbm.dtype),
                o_vmem=pltpu.VMEM(o_ref.shape, o_ref.dtype),
            )
            def _scoped(key_smem, o_vmem):
                pltpu.sync_copy(key_hbm, key_smem)
                o_vmem[...] = jax_random.uniform(
                    key_smem[...], shape=o_ref.shape, minval=0.0, maxval=1.0
                )
                pltpu.sync_copy(o_vmem, o_ref)

    @jax.jit
    def f(rng_key):
        y = jnp.zeros((8, 128), dtype=jnp.float32)
        _, y = pl.run_state(main)((rng_key, y))
        return y

    def g(key_data):
        key = pltpu.to_pallas_key(jax_random.wrap_key_data(key_data, impl="rbg"))
        y = f(key)
        return (jnp.max(y) >= jnp.min(y),)

    key_data = np.asarray(jax_random.key_data(jax_random.key(0, impl="rbg")))
    return g, (key_data,)


@functools.partial(jax.jit, static_argnames=["equation", "sizes"])
def _einshape_kernel(x, equation, sizes):
    sizes = dict(sizes)
    x_ref = jax.new_ref(x)
    fn = functools.partial(pltpu.einshape, equation, **sizes)
    out_ref = jax.new_ref(jnp.empty_like(jax.eval_shape(fn, x)))

    @pl.core_map(mesh=pltpu.create_tensorcore_mesh(num_cores=1, axis_name="x"))
    def _():
        @pl.with_scoped(
            pltpu.VMEM(x_ref.shape, x_ref.dtype),
            pltpu.VMEM(out_ref.shape, out_ref.dtype),
        )
        def inner(x_vmem_ref, out_vmem_ref):
            pltpu.sync_copy(x_ref, x_vmem_ref)
            out_vmem_ref[...] = pltpu.einshape(equation, x_vmem_ref[...], **sizes)
            pltpu.sync_copy(out_vmem_ref, out_ref)

        inner()

    return out_ref[...]


_EINSHAPES = [
    ("ab(cd)->cabd", (2, 4, 128 * 4), {"c": 4}),
    ("abcd->ab(cd)", (2, 3, 4, 128), {}),
    ("abc->a(bc)", (8, 2, 128), {}),
    ("a(bc)->abc", (10, 128 * 4), {"b": 4}),
    ("a(bc)->abc", (10, 128 * 2), {"c": 128}),
    ("a(bc)->abc", (10, 128 * 2), {"b": 2}),
    ("a(bc)->b(ac)", (8, 256), {"c": 128}),
]


def _einshape_build(equation, shape, sizes, dtype):
    x = np.arange(int(np.prod(shape))).reshape(shape).astype(jnp.dtype(dtype))

    def f(x):
        return (_einshape_kernel(x, equation, tuple(sizes.items())),)

    return f, (x,)


def _einshape_expected(equation, sizes):
    def ref(x):
        match equation:
            case "ab(cd)->cabd":
                a, b, cd = x.shape
                c = sizes["c"]
                d = cd // c
                return (x.reshape(a, b, c, d).transpose(2, 0, 1, 3),)
            case "abcd->ab(cd)":
                a, b, c, d = x.shape
                return (x.reshape(a, b, c * d),)
            case "abc->a(bc)":
                a, b, c = x.shape
                return (x.reshape(a, b * c),)
            case "a(bc)->abc":
                a, bc = x.shape
                if "b" in sizes:
                    b = sizes["b"]
                    c = bc // b
                else:
                    c = sizes["c"]
                    b = bc // c
                return (x.reshape(a, b, c),)
            case "a(bc)->b(ac)":
                a, bc = x.shape
                c = sizes["c"]
                b = bc // c
                return (x.reshape(a, b, c).transpose(1, 0, 2).reshape(b, a * c),)
        raise ValueError(f"Unsupported equation: {equation}")

    return ref


def _einshape_error_build(shape, equation, sizes):
    def f(x):
        return (_einshape_kernel(x, equation, tuple(sizes.items())),)

    return f, (np.zeros(shape, np.float32),)


def _cases_random_einshape():
    for test, shape, sizes, message, line in (
        ("test_error_ambiguous", (10, 12), {}, "Ambiguous split", 209),
        ("test_error_mismatch", (10, 13), {"b": 3}, "Cannot split size", 214),
    ):
        _add(
            f"EinshapeTPUKernelTest.{test}",
            1,
            functools.partial(_einshape_error_build, shape, "a(bc)->abc", sizes),
            None,
            expect=f"raises_at_trace:ValueError:{message}",
            what="the kernel's jax.eval_shape of pltpu.einshape rejects the equation before "
            f"the core_map is traced; {_EINSHAPE}:{line}",
        )
    for cores in (2, 1):
        _add(
            f"PRNGTest.test_key_in_core_map{_params(cores=cores)}",
            cores,
            functools.partial(_random_key_in_core_map, cores),
            lambda key_data: (np.bool_(True),),
            what="an rbg key (to_pallas_key) DMA'd to SMEM drives jax.random.uniform in a "
            "core_map; upstream asserts only max(y) >= min(y), which f returns (f takes the "
            f"key's raw uint32 data); {_RANDOM}:216",
        )
    for equation, shape, sizes in _EINSHAPES:
        for dtype in ("int32", "bfloat16"):
            p = _params(
                einshape=f"{equation}|{'x'.join(map(str, shape))}|"
                + ",".join(f"{k}{v}" for k, v in sizes.items()),
                dtype=dtype,
            )
            _add(
                f"EinshapeTPUKernelTest.test_einshape_basic{p}",
                1,
                functools.partial(_einshape_build, equation, shape, sizes, dtype),
                _einshape_expected(equation, sizes),
                what="pltpu.einshape on a VMEM value inside a 1-core core_map (refs from "
                f"jax.new_ref, scratch from pl.with_scoped); {_EINSHAPE}:170",
            )
