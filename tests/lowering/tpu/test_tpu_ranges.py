"""The integer range analysis that lets index clamps be left out."""

from ir_types import I32

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.lowering.tpu.ranges import int_ranges


def ranges_of(f, *types, grid=(4, 3)):
    """The ranges of ``f``'s results (None when unknown)."""
    fn = mp.trace(f, *types)
    found = int_ranges(fn.body, grid)
    return [found.get(r) for r in fn.body.results]


def test_grid_indices_constants_and_arithmetic():
    def f():
        i, j = mp.program_id(0), mp.program_id(1)
        return i, mp.num_programs(1), i * 8 + j, 7 - i, jnp.maximum(i, j), i // 2, (i + 5) % 4

    # ``i // 2`` traces as ``div`` and a floor correction (``select(..., q - 1, q)``) the walk
    # cannot rule out: sound, one below tight
    assert ranges_of(f) == [(0, 3), (3, 3), (0, 26), (4, 7), (0, 3), (-1, 1), (0, 3)]


def test_unknowns_bools_and_overflow():
    def f(n):
        big = mp.program_id(0) * 2**30
        return n, (n > 0).astype(jnp.int32), big * 4, jnp.where(n > 0, 1, 5)

    assert ranges_of(f, I32) == [None, (0, 1), None, (1, 5)]


def test_loop_counters_and_region_parameters():
    def f(n):
        def step(k, acc):
            return acc + k * 8

        bounded = mp.fori_loop(0, 4, lambda k, c: k * 8, jnp.int32(0))
        unbounded = mp.fori_loop(0, n, step, jnp.int32(0))
        return bounded, unbounded

    fn = mp.trace(f, I32)
    found = int_ranges(fn.body, ())
    bounded_loop, unbounded_loop = [op for op in fn.body.ops if op.name == "for"]
    (body,) = bounded_loop.regions
    assert found[body.params[0]] == (0, 3)
    assert found[body.results[0]] == (0, 24)
    assert bounded_loop.results[0] not in found  # carries are not tracked
    assert unbounded_loop.regions[0].params[0] not in found


def test_decided_comparisons_and_floor_corrections():
    def f(n):
        i = mp.program_id(0)
        return i < 4, i > 3, (i >= 0) & (n > 0), (i < 0) & (n > 0), (n > 0) | (i < 9), i % 4

    assert ranges_of(f, I32) == [(1, 1), (0, 0), None, (0, 0), (1, 1), (0, 3)]
