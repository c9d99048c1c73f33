"""``num_programs`` and ``program_id`` read inside a kernel's nested regions (a ``when`` body, a
``fori_loop`` body, a ``run_scoped`` body) are the kernel's grid: every CPU program answers
them (``bind_grid`` rewrites a region whose only grid query is a static size, not only one
that needs the grid indices threaded in), bit for bit as upstream's interpret mode, with a
static and with a dynamic grid, and the upstream kernel imports to the same bits."""

import functools

import numpy as np
import pytest
from kernel_helpers import assert_same_bits

import minipallas as mp
from minipallas.interop import from_jaxpr
from minipallas.passes.kernel.bind_grid import bind_grid
from minipallas.tools.corpora.suite import MP, jax_namespace


def f32(ns, n):
    """A grid size as f32 (upstream gives a static one as a Python int)."""
    return ns.np.asarray(n, ns.np.float32)


def rows_of(ns, outside):
    """``num_programs(0)``, read where it is used, or (``outside``) once at the kernel's top:
    upstream's interpret mode has no rule for a dynamic size read in a region."""
    if outside:
        rows = ns.num_programs(0)
        return lambda: rows
    return lambda: ns.num_programs(0)


def in_when(ns, outside, x_ref, o_ref):
    rows = rows_of(ns, outside)
    o_ref[...] = x_ref[...]

    @ns.when(ns.program_id(1) == 1)
    def _():
        o_ref[...] += f32(ns, ns.num_programs(1))
        o_ref[...] += 10 * f32(ns, rows())


def in_fori_loop(ns, outside, x_ref, o_ref):
    rows = rows_of(ns, outside)

    def body(k, acc):
        sizes = rows() * 100 + ns.num_programs(1)
        return acc + f32(ns, sizes + k)

    o_ref[...] = ns.fori_loop(0, 2, body, x_ref[...])


def in_run_scoped(ns, outside, x_ref, o_ref):
    rows = rows_of(ns, outside)

    def body(s_ref):
        s_ref[...] = x_ref[...] * f32(ns, ns.num_programs(1))
        o_ref[...] = s_ref[...] + f32(ns, rows())

    ns.run_scoped(body, ns.VMEM((8, 128), "float32"))


def when_in_fori_loop(ns, outside, x_ref, o_ref):
    rows = rows_of(ns, outside)
    o_ref[...] = x_ref[...]

    def body(k, carry):
        @ns.when(k == ns.num_programs(1) - 2)
        def _():
            o_ref[...] += f32(ns, rows())

        return carry

    ns.fori_loop(0, 3, body, 0)


KERNELS = [in_when, in_fori_loop, in_run_scoped, when_in_fori_loop]


def make(lib, ns, kernel, rows, outside=False, **kw):
    out = np.zeros((8 * 4, 384), np.float32)
    return lib.pallas_call(
        functools.partial(kernel, ns, outside),
        mp.ArrayType(out.shape, "float32")
        if ns is MP
        else ns.jax.ShapeDtypeStruct(out.shape, "float32"),
        grid=(rows, 3),
        in_specs=[lib.BlockSpec((8, 128), lambda i, j: (i, j))],
        out_specs=lib.BlockSpec((8, 128), lambda i, j: (i, j)),
        **kw,
    )


X = np.random.default_rng(5).standard_normal((32, 384)).astype(np.float32)


@pytest.mark.parametrize("match_upstream", [True, False])
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.__name__)
def test_static_grid_sizes_in_regions_match_upstream(kernel, match_upstream):
    ns = jax_namespace()
    want = np.asarray(make(ns.pl, ns, kernel, 4, interpret=True)(X))
    call = make(mp, MP, kernel, 4, match_upstream=match_upstream)
    assert_same_bits(call(X), want)
    assert_same_bits(ns.jax.jit(call)(X), want)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.__name__)
def test_dynamic_grid_sizes_in_regions_match_upstream(kernel):
    """The row count is traced: ``num_programs(0)`` is a run-time value threaded into the
    regions, ``num_programs(1)`` a constant answered in them. Upstream reads the dynamic size
    at the kernel's top (its interpret mode has no rule for it in a region), minipallas in
    the regions and at the top; the upstream kernel imports."""
    ns = jax_namespace()
    ours, ours_outside = (
        ns.jax.jit(lambda x, n, o=o: make(mp, MP, kernel, n, o)(x)) for o in (False, True)
    )
    theirs = ns.jax.jit(lambda x, n: make(ns.pl, ns, kernel, n, True, interpret=True)(x))
    for n in (1, 3, 4):
        want = theirs(X, np.int32(n))
        assert_same_bits(ours(X, np.int32(n)), want)
        assert_same_bits(ours_outside(X, np.int32(n)), want)
    imported = mp.compile(from_jaxpr(ns.jax.make_jaxpr(theirs)(X, np.int32(4))))
    for n in (2, 4):
        (got,) = imported(X, np.int32(n))
        assert_same_bits(got, theirs(X, np.int32(n)))


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.__name__)
def test_the_upstream_kernel_imports_with_its_static_sizes(kernel):
    ns = jax_namespace()
    theirs = make(ns.pl, ns, kernel, 4, interpret=True)
    (got,) = mp.compile(from_jaxpr(ns.jax.make_jaxpr(make(ns.pl, ns, kernel, 4))(X)))(X)
    assert_same_bits(got, theirs(X))


def test_a_static_size_in_a_region_becomes_a_constant_and_threads_no_index():
    """Only ``num_programs`` of a static axis in the ``when``: its ``cond`` takes no grid
    indices, and no grid query is left for the StableHLO rules to refuse."""

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

        @mp.when(x_ref[0, 0] > 0)
        def _():
            o_ref[...] += mp.num_programs(1).astype("float32")

    call = mp.pallas_call(
        kernel,
        mp.ArrayType((32, 384), "float32"),
        grid=(4, 3),
        in_specs=[mp.BlockSpec((8, 128), lambda i, j: (i, j))],
        out_specs=mp.BlockSpec((8, 128), lambda i, j: (i, j)),
    )
    body = call.trace(X).body
    bound = bind_grid(body, (4, 3))
    assert not any(op.name in ("program_id", "num_programs") for op in bound.walk())
    (before,) = [op for op in body.walk() if op.name == "cond"]
    (after,) = [op for op in bound.walk() if op.name == "cond"]
    assert len(after.operands) == len(before.operands)
    want = X + np.where(X[::8, ::128] > 0, 3.0, 0.0).repeat(8, 0).repeat(128, 1)
    assert_same_bits(call(X), want.astype(np.float32))
