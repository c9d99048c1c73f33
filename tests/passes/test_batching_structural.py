"""``passes.batching`` on the structural ops (reverse, pad, cumulative ops, reduce_prod, sort,
top_k, argmax/argmin): the batched program at every batch point equals the op on that point,
bit for bit, both interpreted and compiled by XLA (float scans included: XLA scans each line
alike at any shape); and a kernel whose body has no batched form runs as loops, unchanged."""

import functools
import itertools

import numpy as np
import pytest

import minipallas
from minipallas.ir import ArrayType, Builder, params
from minipallas.ir.interpret import interpret
from minipallas.ir.kernel_spec import Kernel, TracedBlockSpec
from minipallas.ir.types import RefType
from minipallas.ir.verifier import verify
from minipallas.kernels.programs.grid import grid_program
from minipallas.kernels.programs.vectorized_grid import (
    vectorized_grid_plan,
    vectorized_grid_program,
)
from minipallas.passes import batching
from minipallas.passes.batching import NotBatchable
from minipallas.passes.xla_cpu import XLA_CPU
from minipallas.tools.generate.check import same_bits

# the batchings of the CPU path, with XLA:CPU's policy (its measured exactness classes)
batch = functools.partial(batching.batch, policy=XLA_CPU)

SIZES = (3, 2)


def _one_op(name, types, **attrs):
    b = Builder()
    xs = params(types)
    op = b.create(name, list(xs), attrs)
    return b.function(name, xs, list(op.results))


def _values(rng, shape, dtype):
    """Small values with ties; float32 ones with NaN, signed zeros, inf and a subnormal."""
    if dtype == "int32":
        return rng.integers(-3, 4, shape).astype(np.int32)
    x = np.asarray(np.round(rng.standard_normal(shape) * 4) / 2)
    where = rng.random(shape) < 0.2
    x[where] = rng.choice([np.nan, -0.0, 0.0, np.inf, -np.inf, 1e-40], int(where.sum()))
    return x.astype(np.float32)


def _at(value, layout, point):
    return value[tuple(slice(None) if d is None else point[d] for d in layout)]


def _check_every_point(fn, layouts, seed=0):
    """Batches ``fn`` with its parameters in ``layouts``; compares both ways at every point."""
    batched, out_layouts = batch(fn, layouts, SIZES)
    verify(batched)
    rng = np.random.default_rng(seed)
    args = [_values(rng, t.shape, t.dtype) for t in batched.param_types]
    ways = {"interpret": interpret(batched, *args), "compile": minipallas.compile(batched)(*args)}
    for point in itertools.product(*map(range, SIZES)):
        at = [_at(a, lay, point) for a, lay in zip(args, layouts, strict=True)]
        expected = interpret(fn, *at)
        for way, got in ways.items():
            for g, e, lay in zip(got, expected, out_layouts, strict=True):
                assert same_bits(_at(np.asarray(g), lay, point), e), (fn.name, way, point)
    return batched


F = ArrayType((5, 20), "float32")
I = ArrayType((5, 20), "int32")
# batch axes between, before and after the original dims: rules must find the dims
SPREAD = (None, 1, None, 0)
LEADING = (0, 1, None, None)


@pytest.mark.parametrize("layout", [SPREAD, LEADING])
@pytest.mark.parametrize(
    "name, types, attrs",
    [
        ("reverse", [F], {"dims": (1,)}),
        ("cumsum", [F], {"axis": 1, "reverse": False}),
        ("cumsum", [F], {"axis": 0, "reverse": True}),
        ("cummax", [F], {"axis": 1, "reverse": True}),
        ("cumlogsumexp", [F], {"axis": 1, "reverse": False}),
        ("cumprod", [I], {"axis": 1, "reverse": False}),
        ("reduce_prod", [I], {"axes": (0, 1)}),
        ("argmax", [F], {"axis": 1, "dtype": "int32"}),
        ("argmin", [F], {"axis": 0, "dtype": "int32"}),
        ("sort", [F, I], {"dimension": 1, "num_keys": 1}),
        ("top_k", [F], {"k": 4}),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_op_batched_equals_the_op_at_every_point(name, types, attrs, layout):
    fn = _one_op(name, types, **attrs)
    _check_every_point(fn, [layout] * len(types))


def test_layout_keeping_ops_leave_the_batch_axes_where_they_lie():
    """No transpose: ``reverse``/cumulative/``pad`` keep the layout, ``argmax`` drops its dim."""
    for fn in (
        _one_op("reverse", [F], dims=(0, 1)),
        _one_op("cumsum", [F], axis=1, reverse=False),
        _one_op("pad", [F, ArrayType((), "float32")], low=(1, -2), high=(0, 3), interior=(2, 0)),
    ):
        batched, (out,) = batch(fn, [SPREAD, ()][: len(fn.params)], SIZES)
        assert out == SPREAD and "transpose" not in str(batched), fn.name
    batched, (out,) = batch(_one_op("argmax", [F], axis=1, dtype="int32"), [SPREAD], SIZES)
    assert out == (None, 1, 0) and "transpose" not in str(batched)


def test_pad_batches_its_array_not_its_padding_value():
    pad = _one_op("pad", [F, ArrayType((), "float32")], low=(1, -2), high=(0, 3), interior=(2, 1))
    _check_every_point(pad, [SPREAD, ()])
    with pytest.raises(NotBatchable, match="padding value differs") as e:
        batch(pad, [SPREAD, (0,)], SIZES)
    assert e.value.op == "pad"


def test_float_reduce_prod_batches_exactly():
    """XLA multiplies a float product itself at any shape, in the same order batched
    (bench/numerics/batched_bits.py; passes/xla_cpu/exactness.py), so exact mode batches it too."""
    fn = _one_op("reduce_prod", [F], axes=(1,))
    for exact in (True, False):
        _, (out,) = batch(fn, [SPREAD], SIZES, exact=exact)
        assert out == (None, 1, 0)


def _kernel(body_fn, block, grid):
    """A kernel over ``grid`` whose point i reads and writes block i of a (grid * block) array."""
    n = grid * block[0]
    i32 = ArrayType((), "int32")
    index_map = minipallas.trace(lambda i: (i, 0), i32, name="index_map")
    spec = TracedBlockSpec(
        ArrayType((n, block[1]), "float32"), block, index_map, RefType(block, "float32")
    )
    fn = minipallas.trace(body_fn, spec.ref_type, spec.ref_type)
    return Kernel(fn.name, fn, (grid,), (spec,), (spec,), (), None)


def test_a_body_without_a_batched_form_runs_as_loops_with_the_same_bits():
    """A ``pad`` by a value read from the block differs between points: no batched form, so
    the CPU path takes the loops; with a fixed value the grid is batched. Both agree with
    the compiled loop program and the interpreter, bit for bit."""
    from minipallas.frontend.values import constant, emit_array

    def padded(fixed):
        def body(x_ref, o_ref):
            x = x_ref[...]
            value = constant(2.5, "float32") if fixed else x[0, 0]
            cut = emit_array("pad", [x, value], low=(0, 1), high=(0, -1), interior=(0, 0))
            o_ref[...] = emit_array("cumsum", [cut], axis=1, reverse=True)

        return body

    x = _values(np.random.default_rng(3), (32, 16), "float32")
    for fixed, plan in ((False, None), (True, (0,))):
        kernel = _kernel(padded(fixed), (8, 16), 4)
        assert vectorized_grid_plan(kernel) == plan
        loops = minipallas.compile(grid_program(kernel))(x)
        ran = minipallas.compile(vectorized_grid_program(kernel) or grid_program(kernel))(x)
        assert all(same_bits(a, b) for a, b in zip(ran, loops, strict=True))
        (want,) = interpret(grid_program(kernel), x)
        assert same_bits(loops[0], want)
