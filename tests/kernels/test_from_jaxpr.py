"""``from_jaxpr`` imports an upstream ``pallas_call``: the kernel written with
``jax.experimental.pallas``, its grid and block specs become a minipallas ``Kernel``; the
imported program gives upstream's interpret-mode results bit for bit, and the imported kernel
emits the same TPU module as the same kernel traced by minipallas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from kernel_helpers import as_tuple, assert_same_bits

import minipallas as mp
from minipallas.interop import JaxprImportError, from_jaxpr
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.kernels.programs.choose import lower_for_target
from minipallas.tools.corpora.suite import BY_NAME, KERNELS


def _jaxpr(case, args):
    return jax.make_jaxpr(case.upstream(interpret=False))(*args)


@pytest.mark.parametrize("case", KERNELS, ids=lambda c: c.name)
def test_imported_pallas_call_matches_upstream_interpret_mode(case):
    args = case.inputs()
    fn = from_jaxpr(_jaxpr(case, args))
    assert any(op.name == "call" for op in fn.walk())
    got = mp.compile(fn)(*args)
    for g, e in zip(got, as_tuple(case.upstream()(*args)), strict=True):
        assert_same_bits(g, np.asarray(e))


def test_imported_kernel_has_the_grid_specs_and_semantics():
    case = BY_NAME["matmul"]
    kernel = kernel_from_jaxpr(_jaxpr(case, case.inputs()))
    traced = case.minipallas().trace(*case.inputs())
    assert kernel.name == "matmul" and kernel.grid == traced.grid
    assert kernel.dimension_semantics == ("parallel", "parallel", "arbitrary")
    assert kernel.scratch_types == traced.scratch_types
    specs = zip(
        (*kernel.in_specs, *kernel.out_specs), (*traced.in_specs, *traced.out_specs), strict=True
    )
    for a, b in specs:
        assert (a.array, a.block_shape, a.ref_type) == (b.array, b.block_shape, b.ref_type)
        for point in [(0, 0, 0), (1, 0, 3), (1, 1, 2)]:
            assert mp.interpret(a.index_map, *point) == mp.interpret(b.index_map, *point)


@pytest.mark.parametrize(
    "name", ["add_partial_blocks", "sum_and_max", "batched_squeezed", "staged_run_scoped"]
)
def test_imported_kernel_emits_the_tpu_module_of_the_traced_one(name):
    case = BY_NAME[name]
    args = case.inputs()
    kernel = kernel_from_jaxpr(_jaxpr(case, args), memory_space=mp.tpu.VMEM)
    imported = lower_for_target(kernel, "tpu").as_text(debug_info=False)
    traced = case.minipallas().lower(*args, target="tpu").as_text(debug_info=False)
    assert imported == traced


def test_squeezed_blocks_and_default_specs_import():
    def k(x_ref, w_ref, o_ref):
        o_ref[...] = x_ref[...] * w_ref[0, :]

    call = pl.pallas_call(
        k,
        jax.ShapeDtypeStruct((3, 128), jnp.float32),
        grid=(3,),
        in_specs=[pl.BlockSpec((None, 128), lambda i: (i, 0)), pl.BlockSpec()],
        out_specs=pl.BlockSpec((None, 128), lambda i: (i, 0)),
    )
    x = np.arange(384, dtype=np.float32).reshape(3, 128)
    w = np.full((2, 128), 2, np.float32)
    kernel = kernel_from_jaxpr(jax.make_jaxpr(call)(x, w))
    assert kernel.in_specs[0].block_shape == (None, 128)
    assert kernel.in_specs[1].block_shape == (2, 128)
    (out,) = mp.compile(from_jaxpr(jax.make_jaxpr(call)(x, w)))(x, w)
    np.testing.assert_array_equal(out, x * 2)


def test_a_jaxpr_without_one_pallas_call_is_refused():
    with pytest.raises(JaxprImportError, match="expected one pallas_call"):
        kernel_from_jaxpr(jax.make_jaxpr(lambda x: x + 1)(np.zeros(3, np.float32)))
