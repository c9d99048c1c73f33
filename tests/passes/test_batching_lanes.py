"""Batching ``bitcast`` across widths, ``packed_bitcast`` and ``roll``: each takes the leading
layout; the batched program gives the program's bits at every batch point, whatever layout
its operand came in."""

import functools

import numpy as np
import pytest

from minipallas.ir.interpret import interpret
from minipallas.ir.parser import parse
from minipallas.ir.verifier import verify
from minipallas.passes import batching
from minipallas.passes.batching import NotBatchable
from minipallas.passes.xla_cpu import XLA_CPU

# the batchings of the CPU path, with XLA:CPU's policy (its measured exactness classes)
batch = functools.partial(batching.batch, policy=XLA_CPU)

PROGRAMS = {
    "narrowing bitcast": "%y = bitcast %x : i8[4,8,2]",
    "widening packed_bitcast": "%y = packed_bitcast %x : i32[2,8]",
    "narrowing packed_bitcast": "%y = packed_bitcast %x : i8[8,8]",
    "strided roll": "%y = roll %x, %s, axis 1, stride (3, 0) : i16[4,8]",
}


def _program(line):
    result = line.split(" : ")[1]
    return parse(
        f"""func @f(%x: i16[4,8], %s: i32[]) -> ({result}) {{
  {line}
  return %y
}}"""
    )


@pytest.mark.parametrize("line", PROGRAMS.values(), ids=PROGRAMS.keys())
@pytest.mark.parametrize("layout", [(0, None, None), (None, 0, None), (None, None, 0)])
def test_the_batched_op_is_the_op_at_every_point(line, layout):
    fn = _program(line)
    batched, (out_layout,) = batch(fn, [layout, ()], (3,))
    verify(batched)
    rng = np.random.default_rng(0)
    batch_dim = layout.index(0)
    shape = [4, 8]
    shape.insert(batch_dim, 3)
    x = rng.integers(-(2**15), 2**15, shape, dtype=np.int64).astype(np.int16)
    shift = np.int32(5)
    (got,) = interpret(batched, x, shift)
    for p in range(3):
        (want,) = interpret(fn, np.take(x, p, axis=batch_dim), shift)
        assert np.take(np.asarray(got), p, axis=out_layout.index(0)).tobytes() == want.tobytes()


def test_a_roll_whose_shift_differs_between_points_is_not_batchable():
    with pytest.raises(NotBatchable, match="shift differs between batch points"):
        batch(_program(PROGRAMS["strided roll"]), [(None, None), (0,)], (3,))
