"""Scalar prefetch and dynamic grids in the Mosaic module, against upstream's TPU lowering.

Upstream's module for a ``PrefetchScalarGridSpec`` call takes the prefetched arrays as whole
SMEM memrefs after the grid indices, in the kernel and in every ``@transform_k``, and counts
them in ``scalar_prefetch``; a dynamic grid size is ``iteration_bounds``' dynamic entry and
``num_programs`` along it is ``tpu.iteration_bound``. Both sides lower the same kernels (the
cases of ``tests/kernels/prefetch_cases.py`` and of ``test_dynamic_grid.py``) on this CPU
machine; the modules must have the same text once locations and names are set aside.
"""

import numpy as np
import pytest
import tpu_util  # noqa: F401  (puts tests/kernels on the path)
from dynamic_cases import CASES as DYNAMIC
from prefetch_cases import BY_NAME, CASES

import minipallas as mp
from minipallas.tools.corpora.suite import MP, jax_namespace
from minipallas.tools.difftest.mosaic import compare, summarize, upstream_mosaic


def _agree(ours, theirs):
    diff = compare(ours, theirs)
    assert diff.signature is None
    assert diff.memrefs == {}
    assert diff.ops == {}
    assert diff.attributes == {}
    assert diff.same_text


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_prefetch_module_matches_upstream(case):
    args = case.inputs()
    ours = case.minipallas().lower(*args, target="tpu").module
    _agree(ours, upstream_mosaic(case.upstream(interpret=False), *args))


def test_the_prefetch_calling_convention():
    case = BY_NAME["block_sparse_matmul"]
    lowered = case.minipallas().lower(*case.inputs(), target="tpu")
    summary = summarize(lowered.module)
    assert summary.signature[:3] == ("i32", "i32", "memref<2x2xi32, #tpu.memory_space<smem>>")
    assert summary.attributes["scalar_prefetch"] == "1 : i64"
    text = lowered.as_text(debug_info=False)
    for k in range(3):  # x, y, out: each index map takes (i, k, cols)
        assert (
            f"func.func @transform_{k}(%arg0: i32, %arg1: i32, "
            "%arg2: memref<2x2xi32, #tpu.memory_space<smem>>)" in text
        )
    reasons = lowered.info["dimension_semantics"].reasons
    assert all("scalar prefetch" in r for r in reasons)


def _lower_dynamic(make, args, n):
    """Our Mosaic module of ``make``'s call, lowered inside ``jax.jit`` with ``n`` traced."""
    import jax

    modules = []

    def f(*a):
        call = make(mp, MP, a[-1])
        modules.append(call.lower(*a[:-1], target="tpu").module)
        return call(*a[:-1])

    jax.make_jaxpr(f)(*args, np.int32(n))
    return modules[0]


@pytest.mark.parametrize("name", DYNAMIC)
def test_dynamic_grid_module_matches_upstream(name):
    import jax

    make, args, sizes = DYNAMIC[name]
    ns = jax_namespace()
    ours = _lower_dynamic(make, args(), sizes[-1])
    n = jax.ShapeDtypeStruct((), np.int32)
    theirs = upstream_mosaic(lambda *a: make(ns.pl, ns, a[-1])(*a[:-1]), *args(), n)
    _agree(ours, theirs)
    summary = summarize(ours)
    assert summary.attributes["iteration_bounds"].startswith("array<i64: -9223372036854775808")


def test_num_programs_of_a_dynamic_axis_is_the_iteration_bound():
    make, args, _ = DYNAMIC["rows"]
    ours = _lower_dynamic(make, args(), 3)
    assert summarize(ours).ops["tpu.iteration_bound"] == 1


@pytest.mark.parametrize("name", ["gather_rows", "block_sparse_matmul"])
def test_an_imported_upstream_prefetch_kernel_lowers_to_upstreams_module(name):
    import jax

    from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
    from minipallas.kernels.pallas_call import lower_for_target

    case = BY_NAME[name]
    args = case.inputs()
    upstream = case.upstream(interpret=False)
    kernel = kernel_from_jaxpr(jax.make_jaxpr(upstream)(*args), memory_space=mp.tpu.VMEM)
    _agree(lower_for_target(kernel, "tpu").module, upstream_mosaic(upstream, *args))
