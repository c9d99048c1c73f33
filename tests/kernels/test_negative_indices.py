"""Kernels indexing with negative traced values give upstream's bits.

A negative dynamic index counts once from the end in upstream's ``pallas_call(...,
interpret=True)`` (its state discharge uses ``lax.dynamic_slice``'s wrap and numpy indexing's);
the same kernel written the same way must give the same result in minipallas: the CPU program
(batched where it can be), the loop program (``grid_program``) and upstream agree bit for bit.
"""

import numpy as np
import pytest
from kernel_helpers import as_tuple, assert_same_bits

from minipallas.kernels.programs.grid import grid_program
from minipallas.lowering.runtime.compiled import compile
from minipallas.tools.corpora.suite import Case

X48 = np.arange(32, dtype=np.int32).reshape(4, 8)


def const(*arrays):
    return lambda rng: arrays


def previous_row(ns, x_ref, o_ref):
    """The repro: grid point 0 reads row -1, the last row (not row 0)."""
    o_ref[...] = x_ref[ns.program_id(0) - 1][None, :]


def window_before(ns, x_ref, o_ref):
    """A ``ds`` whose start is negative for the first grid points."""
    o_ref[...] = x_ref[ns.ds(ns.program_id(0) - 2, 2), :]


def row_from_table(ns, s_ref, x_ref, o_ref):
    """A scalar index read from memory, negative for some grid points."""
    o_ref[...] = x_ref[s_ref[ns.program_id(0)]][None, :]


def gather_rows(ns, idx_ref, x_ref, o_ref):
    """An integer-array index with negative entries."""
    o_ref[...] = x_ref[idx_ref[...], :]


def strided_columns(ns, x_ref, o_ref):
    """A strided ``ds`` whose start is negative and in range after the wrap."""
    o_ref[...] = x_ref[:, ns.ds(ns.program_id(0) - 8, 2, stride=2)]


def write_previous_row(ns, x_ref, o_ref):
    """A write at a negative row: grid point 0 writes the last row."""
    i = ns.program_id(0)
    o_ref[i - 1, :] = x_ref[i, :] * 2


def value_row(ns, x_ref, o_ref):
    """A negative index into a value (jax.numpy indexing upstream)."""
    o_ref[...] = x_ref[...][ns.program_id(0) - 3][None, :]


def loop_from_the_end(ns, x_ref, o_ref):
    """A loop index minus a constant: rows -4..-1, then a view at a negative row."""

    def body(k, acc):
        return acc + x_ref[k - 4, :] + x_ref.at[k - 1][ns.ds(k - 8, 4)].sum()

    o_ref[...] = ns.fori_loop(0, 4, body, ns.np.zeros((8,), ns.np.int32))[None, :]


FULL = ((4, 8), lambda i: (0, 0))
ROW_OUT = ((1, 8), lambda i: (i, 0))
CASES = [
    Case("previous_row", previous_row, ((4, 8), "int32"), const(X48), grid=(4,),
         in_specs=[FULL], out_specs=ROW_OUT),
    Case("window_before", window_before, ((8, 8), "int32"), const(X48), grid=(4,),
         in_specs=[FULL], out_specs=((2, 8), lambda i: (i, 0))),
    Case("row_from_table", row_from_table, ((4, 8), "int32"),
         const(np.array([-1, -4, 2, -3], np.int32), X48), grid=(4,),
         in_specs=[((4,), lambda i: (0,)), FULL], out_specs=ROW_OUT),
    Case("gather_rows", gather_rows, ((5, 8), "int32"),
         const(np.array([-1, 0, -4, 2, -2], np.int32), X48)),
    Case("strided_columns", strided_columns, ((4, 8), "int32"), const(X48), grid=(4,),
         in_specs=[FULL], out_specs=((4, 2), lambda i: (0, i))),
    Case("write_previous_row", write_previous_row, ((4, 8), "int32"), const(X48), grid=(4,),
         in_specs=[FULL], out_specs=FULL),
    Case("value_row", value_row, ((4, 8), "int32"), const(X48), grid=(4,),
         in_specs=[FULL], out_specs=ROW_OUT),
    Case("loop_from_the_end", loop_from_the_end, ((1, 8), "int32"), const(X48)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_negative_indices_match_upstream(case):
    args = case.inputs()
    expected = as_tuple(case.upstream()(*args))
    cpu = as_tuple(case.minipallas()(*args))
    loops = compile(grid_program(case.minipallas().trace(*args)))(*args)
    for got in (cpu, loops):
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert_same_bits(g, e)


def test_the_repro_reads_the_last_row_at_grid_point_zero():
    (case,) = [c for c in CASES if c.name == "previous_row"]
    out = np.asarray(case.minipallas()(X48))
    np.testing.assert_array_equal(out[0], np.arange(24, 32, dtype=np.int32))
    np.testing.assert_array_equal(out[1:], X48[:3])
