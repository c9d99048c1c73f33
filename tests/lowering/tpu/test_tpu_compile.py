"""Mosaic's real compiler (libtpu, ahead of time for a v5e) on minipallas's modules.

Each suite kernel compiles beside upstream's own ``pallas_call`` module; so do the kernel
fuzzer's kernels; and each form the chip found Mosaic refusing (issue 26, section 3) is now
emitted as upstream emits it, or refused ahead of time with a ``MiniPallasError``. Every module
a test emits is also compiled by ``tests/mosaic_compile.py``; the tests here compile directly,
so they say which side refused.
"""

import dataclasses
import os
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from test_tpu_vs_upstream import REJECTED, VARIANTS
from tpu_util import KERNELS, mosaic_refuses, upstream_call

import minipallas as mp
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.lowering.runtime import libtpu
from minipallas.lowering.tpu import aot, compile_check, lower_to_mosaic
from minipallas.tools.difftest.mosaic import compare, upstream_mosaic
from minipallas.tools.generate.choices import RandomChoices
from minipallas.tools.generate.kernels import (
    kernel_inputs,
    minipallas_call,
    random_kernel,
    tpu_sized,
)

if not aot.libtpu_available():
    if os.environ.get("CI"):
        raise RuntimeError("CI compiles every Mosaic module with libtpu: install requirements.lock")
    pytest.skip("libtpu is not installed (make test installs it)", allow_module_level=True)

F32 = jax.ShapeDtypeStruct((8, 128), jnp.float32)


def upstream_compiles(call, *specs):
    """Upstream's own lowering asks the default device's kind: the compile-only TPU device."""
    with jax.default_device(libtpu.tpu_device()):
        sharding = libtpu.tpu_sharding()
        args = [jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding) for s in specs]
        return jax.jit(call, out_shardings=sharding).lower(*args).compile()


SUITE = [c for c in (*KERNELS, *VARIANTS) if c.name not in REJECTED]


@pytest.mark.parametrize("case", SUITE, ids=lambda c: c.name)
def test_every_suite_kernel_compiles_beside_upstreams(case):
    kernel = case.minipallas().trace(*case.inputs(), memory_space=mp.tpu.VMEM)
    assert compile_check(kernel).as_text()  # the TPU executable's HLO
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in case.inputs()]
    if case.name == "compare_int8":  # upstream emits int8 arith.addi, which Mosaic refuses
        with pytest.raises(Exception, match="Only vector<i16> and vector<i32> are supported"):
            upstream_compiles(upstream_call(case), *specs)
        return
    upstream_compiles(upstream_call(case), *specs)


# a bf16 row reduction of a rank-1 block ends in a bf16 scalar vector.extract
SCALAR_BF16 = mosaic_refuses("'Only 32-bit scalar vector.extracts supported'")


@pytest.mark.parametrize(
    "seed", [pytest.param(s, marks=SCALAR_BF16 if s in (2, 5) else ()) for s in range(8)]
)
def test_fuzzed_kernels_compile(seed):
    """The kernel fuzzer's kernels, TPU-sized: compiled, or refused ahead of time by the
    block-shape rules (a squeezed dimension among the last two)."""
    spec = tpu_sized(random_kernel(RandomChoices(random.Random(seed))))
    args = kernel_inputs(spec, seed)
    kernel = minipallas_call(spec).trace(*args, memory_space=mp.tpu.VMEM)
    try:
        lowered = lower_to_mosaic(kernel)
    except PassError as e:
        assert "divisible by 8 and 128" in str(e)
        return
    compile_check(kernel, lowered)


def _imported(body, out, *specs, **kwargs):
    call = pl.pallas_call(body, out_shape=out, **kwargs)
    kernel = kernel_from_jaxpr(jax.make_jaxpr(call)(*specs), memory_space=mp.tpu.VMEM)
    return call, kernel, lower_to_mosaic(kernel)


def _cat(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.concatenate([x, x * 2.0], axis=1)


def _stack(x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = jnp.stack([x, x * 2.0], axis=0)


def _wrap(x_ref, o_ref):
    o_ref[...] = jnp.pad(x_ref[...], ((8, 8), (0, 0)), mode="wrap")


def _cat_constant(x_ref, o_ref):
    o_ref[...] = jnp.concatenate([x_ref[...], jnp.full((8, 128), 3.0, jnp.float32)], axis=0)


def _batched_dot(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.einsum("bij,bjk->bik", x_ref[...], y_ref[...])


CONCATENATIONS = {
    "concatenate": (_cat, jax.ShapeDtypeStruct((8, 256), jnp.float32), [F32]),
    "stack": (_stack, jax.ShapeDtypeStruct((2, 8, 128), jnp.float32), [F32]),
    "wrap_pad": (_wrap, jax.ShapeDtypeStruct((24, 128), jnp.float32), [F32]),
    "concatenate_constant": (_cat_constant, jax.ShapeDtypeStruct((16, 128), jnp.float32), [F32]),
    "batched_dot": (
        _batched_dot,
        jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
        [
            jax.ShapeDtypeStruct((2, 8, 128), jnp.float32),
            jax.ShapeDtypeStruct((2, 128, 128), jnp.float32),
        ],
    ),
}


@pytest.mark.parametrize("name", CONCATENATIONS)
def test_concatenations_and_batched_dots_are_upstreams_module_and_compile(name):
    """Once ``vector.insert_strided_slice`` (refused by Mosaic's layout inference); now
    ``tpu.concatenate`` of the operands / a batched ``tpu.matmul``, upstream's text."""
    body, out, specs = CONCATENATIONS[name]
    call, kernel, ours = _imported(body, out, *specs)
    text = ours.as_text(debug_info=False)
    assert "insert_strided_slice" not in text
    diff = compare(ours.module, upstream_mosaic(call, *specs))
    # upstream brackets an einsum with its name: tpu.trace_start / trace_stop
    assert set(diff.ops) <= {"tpu.trace_start", "tpu.trace_stop"}
    assert not diff.memrefs and diff.signature is None
    compile_check(kernel, ours)
    upstream_compiles(call, *specs)


def test_a_vector_constant_of_many_values_is_refused_ahead_of_time():
    """Mosaic would put it in a scratch buffer a Pallas kernel cannot take."""
    table = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + table

    call = mp.pallas_call(body, mp.ArrayType((8, 128), "float32"))
    with pytest.raises(MiniPallasError, match="vector constant with more than one value") as e:
        call.lower(table, target="tpu")
    assert "test_tpu_compile.py" in str(e.value.loc) and "input" in e.value.fix


def test_int8_arithmetic_compiles_on_32_bits():
    def body(x_ref, y_ref, o_ref, q_ref):
        x, y = x_ref[...], y_ref[...]
        o_ref[...] = (x + y) * x - (y >> 2)
        q_ref[...] = jnp.maximum(x, y) // jnp.where(y == 0, 1, y).astype(jnp.int8)

    i8 = jax.ShapeDtypeStruct((32, 128), jnp.int8)
    _, kernel, ours = _imported(body, (i8, i8), i8, i8)
    text = ours.as_text(debug_info=False)
    assert "arith.extsi" in text and "arith.trunci" in text
    assert not any("xi8>" in line for line in text.splitlines() if "arith.addi" in line)
    compile_check(kernel, ours)


def _swap_outputs(x_ref, y_ref, ox_ref, oy_ref):
    a, b = ox_ref[...], oy_ref[...]
    ox_ref[...] = b
    oy_ref[...] = a


def _swap(x_ref, y_ref, ox_ref, oy_ref):
    a, b = x_ref[...], y_ref[...]
    ox_ref[...] = b
    oy_ref[...] = a


def test_reading_an_output_block_nothing_wrote_is_refused_ahead_of_time():
    """The chip's wrong swap: a TPU never loads an output block, aliased or not, so reading one
    reads stale VMEM (upstream's module gives the previous kernel's values on a v5e)."""
    specs = (F32, F32)
    call = pl.pallas_call(_swap_outputs, specs, input_output_aliases={0: 0, 1: 1})
    kernel = kernel_from_jaxpr(jax.make_jaxpr(call)(*specs), memory_space=mp.tpu.VMEM)
    with pytest.raises(PassError, match="reads output 0 .* before anything writes it") as e:
        lower_to_mosaic(kernel)
    assert e.value.op == "get" and "test_tpu_compile.py" in str(e.value.loc)
    assert "input_output_aliases" in e.value.fix


def test_accumulating_into_an_unwritten_output_is_refused():
    spec = random_kernel(RandomChoices(random.Random(0)))
    spec = dataclasses.replace(tpu_sized(spec), accumulate=True)
    kernel = minipallas_call(spec).trace(*kernel_inputs(spec, 0), memory_space=mp.tpu.VMEM)
    with pytest.raises(PassError, match="before anything writes it"):
        lower_to_mosaic(kernel)


def test_a_swap_through_aliased_inputs_is_upstreams_module_with_the_aliases():
    """The fix the refusal names: read the aliased inputs. The compiled call aliases each output
    to its input, and the module is upstream's."""
    call, kernel, ours = _imported(_swap, (F32, F32), F32, F32, input_output_aliases={0: 0, 1: 1})
    assert compare(ours.module, upstream_mosaic(call, F32, F32)).same_text
    hlo = compile_check(kernel, ours).as_text()
    assert "output_to_operand_aliasing={{0}: (0, {}), {1}: (1, {})}" in hlo


def test_without_libtpu_compile_check_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(aot, "libtpu_available", lambda: False)
    with pytest.raises(PassError, match="needs libtpu") as e:
        compile_check(SUITE[0].minipallas().trace(*SUITE[0].inputs(), memory_space=mp.tpu.VMEM))
    assert "libtpu==0.0.42.1" in e.value.fix


@mosaic_refuses("a v5e has no f16 vectors (the module the test checks the refusal of)")
def test_a_refusal_names_mosaics_message_op_and_line():
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(jnp.float16).astype(jnp.float32)

    call = mp.pallas_call(body, mp.ArrayType((8, 128), "float32"))
    kernel = call.trace(np.zeros((8, 128), np.float32), memory_space=mp.tpu.VMEM)
    with pytest.raises(aot.MosaicCompileError, match="refuses kernel") as e:
        compile_check(kernel)
    assert "test_tpu_compile.py" in str(e.value.loc) and e.value.op == "convert"


def test_compile_check_takes_the_calls_compiler_params():
    """A call's ``vmem_limit_bytes`` reaches libtpu: 8 MiB of double-buffered blocks compile
    under the default limit and run out of VMEM under a 1 MiB one."""
    from minipallas.platforms.mosaic import as_tpu_kernel_fields

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    rows = mp.BlockSpec((512, 1024), lambda i: (i, 0))
    call = mp.pallas_call(body, out_shape=mp.ArrayType((2048, 1024), "float32"), grid=(4,),
                          in_specs=[rows], out_specs=rows)  # fmt: skip
    kernel = call.trace(np.zeros((2048, 1024), np.float32), memory_space=mp.tpu.VMEM)
    compile_check(kernel)
    small = as_tpu_kernel_fields(mp.tpu.CompilerParams(vmem_limit_bytes=1 << 20))
    with pytest.raises(aot.MosaicCompileError, match="CompileTimeScopedVmemOom"):
        compile_check(kernel, params=small)
