"""Dynamic-grid kernels, written once for minipallas and upstream Pallas (as ``suite``).

Each ``make(lib, ns, n, **options)`` builds a ``pallas_call`` whose grid has the size ``n``
(a traced integer under ``jax.jit``) with ``lib`` = ``minipallas`` / ``jax.experimental.pallas``;
``CASES[name] = (make, inputs, sizes)``. Block shapes are TPU-legal, so the Mosaic tests lower
the same calls.
"""

import functools

import numpy as np

import minipallas as mp
from minipallas.tools.corpora.suite import MP, jax_namespace


def rows_plus_ids(ns, x_ref, o_ref):
    """Block i of the rows, plus its grid index and the (dynamic) grid size."""
    i, n = ns.program_id(0), ns.num_programs(0)
    o_ref[...] = x_ref[...] + i.astype(ns.np.float32) + 10 * n.astype(ns.np.float32)


def column_sums(ns, x_ref, o_ref):
    """A 2-D grid (dynamic rows, 2 static column blocks): sums the first n row blocks."""

    @ns.when(ns.program_id(0) == 0)
    def _():
        o_ref[...] = ns.np.zeros(o_ref.shape, ns.np.float32)

    o_ref[...] += x_ref[...]


def prefetch_accumulate(ns, s1_ref, s2_ref, x_ref, o_ref):
    """Upstream's ``test_dynamic_grid_and_aliasing`` kernel, accumulating into the output: the
    aliased input first, as a TPU never loads an output block."""

    @ns.when(ns.program_id(0) == 0)
    def _():
        o_ref[...] = x_ref[...]

    o_ref[...] += s1_ref[0].astype(o_ref.dtype) * s2_ref[0].astype(o_ref.dtype)


def rows(lib, ns, n, **kw):
    return lib.pallas_call(
        functools.partial(rows_plus_ids, ns),
        _out(ns, (32, 128)),
        grid=(n,),
        in_specs=[lib.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=lib.BlockSpec((8, 128), lambda i: (i, 0)),
        **kw,
    )


def columns(lib, ns, n, **kw):
    return lib.pallas_call(
        functools.partial(column_sums, ns),
        _out(ns, (8, 256)),
        grid=(n, 2),
        in_specs=[lib.BlockSpec((8, 128), lambda i, j: (i, j))],
        out_specs=lib.BlockSpec((8, 128), lambda i, j: (0, j)),
        **kw,
    )


def prefetch(lib, ns, n, **kw):
    grid_spec = (mp.tpu if lib is mp else ns.pltpu).PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(n,),
        in_specs=[lib.BlockSpec((8, 128), lambda i, *_: (0, 0))],
        out_specs=lib.BlockSpec((8, 128), lambda i, *_: (0, 0)),
    )
    return lib.pallas_call(
        functools.partial(prefetch_accumulate, ns),
        _out(ns, (8, 128)),
        grid_spec=grid_spec,
        input_output_aliases={2: 0},
        **kw,
    )


def _out(ns, shape):
    return mp.ArrayType(shape, "float32") if ns is MP else ns.jax.ShapeDtypeStruct(shape, "float32")


def both(make):
    """``make``'s call as a jitted function of ``(*args, n)`` on both sides."""
    ns = jax_namespace()
    ours = ns.jax.jit(lambda *a: make(mp, MP, a[-1])(*a[:-1]))
    theirs = ns.jax.jit(lambda *a: make(ns.pl, ns, a[-1], interpret=True)(*a[:-1]))
    return ours, theirs


def normal_f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


CASES = {
    "rows": (rows, lambda: (normal_f32(32, 128),), (0, 1, 3, 4)),
    "columns": (columns, lambda: (normal_f32(32, 256),), (1, 2, 4)),
    "prefetch_aliasing": (
        prefetch,
        lambda: (np.array([3], np.int32), np.array([2], np.int32), normal_f32(8, 128)),
        (0, 1, 5),
    ),
}
