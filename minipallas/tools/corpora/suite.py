"""The kernel suite: Pallas kernels written once, run by minipallas and by upstream Pallas.

Each kernel is a Python function ``kernel(ns, *refs)`` whose body uses only ref indexing,
``ns.program_id``-like calls and ``ns.np`` array functions, where ``ns`` is a namespace: ``MP``
(minipallas) or ``JAX`` (``jax.numpy`` and ``jax.experimental.pallas``). A ``Case`` adds the
grid, the block specs (``(block_shape, index_map)``, or ``None`` for the whole array), the
scratch and the inputs, and builds the call for either side:

    from minipallas.tools.corpora.suite import KERNELS
    for case in KERNELS:
        call = case.minipallas()          # a minipallas.PallasCall
        args = case.inputs()              # numpy arrays (fixed seed)
        out = call(*args)                 # CPU run
        kernel = call.trace(*args)        # the Kernel object backends read
        expected = case.upstream()(*args) # pallas_call(..., interpret=True)

Used by the CPU tests here and by the TPU/GPU emitters' differential tests.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.kernels.pallas_call import PallasCall

Spec = tuple[tuple[int | None, ...], Callable[..., Any]] | None
Shape = tuple[tuple[int, ...], str]

MP = types.SimpleNamespace(
    name="minipallas",
    np=mnp,
    program_id=mp.program_id,
    num_programs=mp.num_programs,
    ds=mp.ds,
    when=mp.when,
    run_scoped=mp.run_scoped,
    fori_loop=mp.fori_loop,
    VMEM=lambda shape, dtype: mp.tpu.VMEM(shape, dtype),
    broadcasted_iota=mnp.broadcasted_iota,
    rsqrt=mnp.rsqrt,
    pltpu=mp.tpu,  # roll, bitcast: upstream's TPU vector primitives
)


@functools.cache
def jax_namespace() -> types.SimpleNamespace:
    """The upstream namespace (jax is imported on first use: it is slow to import)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    return types.SimpleNamespace(
        name="jax",
        np=jnp,
        program_id=pl.program_id,
        num_programs=pl.num_programs,
        ds=pl.ds,
        when=pl.when,
        run_scoped=pl.run_scoped,
        fori_loop=jax.lax.fori_loop,
        VMEM=lambda shape, dtype: pltpu.VMEM(shape, jnp.dtype(dtype)),
        broadcasted_iota=jax.lax.broadcasted_iota,
        rsqrt=jax.lax.rsqrt,
        pl=pl,
        pltpu=pltpu,
        jax=jax,
    )


@dataclass(frozen=True)
class Case:
    """One kernel with everything ``pallas_call`` needs; ``out_shape`` is one ``(shape, dtype)``
    or a tuple of them (then the call returns a tuple). ``in_specs=None``: no specs at all."""

    name: str
    kernel: Callable[..., None]
    out_shape: Shape | tuple[Shape, ...]
    make_inputs: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
    grid: tuple[int, ...] = ()
    in_specs: Sequence[Spec] | None = None
    out_specs: Spec | Sequence[Spec] = None
    scratch: tuple[Shape, ...] = ()
    dimension_semantics: tuple[str, ...] | None = None

    @property
    def multiple_outputs(self) -> bool:
        return isinstance(self.out_shape[1], tuple)  # a (shape, dtype) pair has a str second

    def inputs(self, seed: int = 0) -> tuple[np.ndarray, ...]:
        return self.make_inputs(np.random.default_rng(seed))

    def minipallas(self, **options: Any) -> PallasCall:
        """The minipallas call; ``options`` go to ``pallas_call`` (e.g. match_upstream)."""
        return mp.pallas_call(
            functools.partial(self.kernel, MP),
            self._outs(lambda shape, dtype: mp.ArrayType(shape, dtype)),
            grid=self.grid,
            in_specs=None
            if self.in_specs is None
            else [_spec(mp.BlockSpec, s) for s in self.in_specs],
            out_specs=self._out_specs(mp.BlockSpec),
            scratch_shapes=[MP.VMEM(shape, dtype) for shape, dtype in self.scratch],
            dimension_semantics=self.dimension_semantics,
            name=self.name,
            **options,
        )

    def upstream(self, interpret: bool = True, **options: Any) -> Callable[..., Any]:
        """The jitted upstream ``pallas_call(..., interpret=True)``; with ``interpret=False``
        the call compiled for a device (lower it with ``lowering_platforms=("tpu",)``).
        ``options`` go to ``pallas_call`` (e.g. input_output_aliases)."""
        ns = jax_namespace()
        kwargs = {}
        if self.in_specs is not None:
            kwargs["in_specs"] = [_spec(ns.pl.BlockSpec, s) for s in self.in_specs]
        if self.out_specs is not None:
            kwargs["out_specs"] = self._out_specs(ns.pl.BlockSpec)
        if self.dimension_semantics is not None:  # read by the TPU lowering only
            kwargs["compiler_params"] = ns.pltpu.CompilerParams(
                dimension_semantics=self.dimension_semantics
            )
        call = ns.pl.pallas_call(
            functools.partial(self.kernel, ns),
            self._outs(lambda shape, dtype: ns.jax.ShapeDtypeStruct(shape, dtype)),
            grid=self.grid,
            scratch_shapes=[ns.VMEM(shape, dtype) for shape, dtype in self.scratch],
            interpret=interpret,
            name=self.name,
            **kwargs,
            **options,
        )
        return ns.jax.jit(call)

    def _outs(self, make: Callable[..., Any]) -> Any:
        if self.multiple_outputs:
            return tuple(make(shape, dtype) for shape, dtype in self.out_shape)
        return make(*self.out_shape)

    def _out_specs(self, block_spec: type) -> Any:
        if self.multiple_outputs:
            specs = self.out_specs or [None] * len(self.out_shape)
            return tuple(_spec(block_spec, s) for s in specs)
        return _spec(block_spec, self.out_specs)


def _spec(block_spec: type, spec: Spec) -> Any:
    return block_spec() if spec is None else block_spec(*spec)


# ----- inputs -----


def normal(*shape: int, dtype: Any = np.float32) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(shape, dtype=np.float32).astype(dtype)


def inputs(*makers: Callable[[np.random.Generator], np.ndarray]) -> Callable[..., tuple]:
    return lambda rng: tuple(make(rng) for make in makers)


BF16 = ml_dtypes.bfloat16
INF = float("inf")

# ----- kernels -----


def add(ns, x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def bias_relu(ns, x_ref, b_ref, o_ref):
    """Broadcasting: a (1, bn) row and a scalar against a (bm, bn) block."""
    y = x_ref[...] * 0.5 + b_ref[...]
    o_ref[...] = ns.np.where(y > 0, y, y * 0.01)


def scale_1d(ns, x_ref, o_ref):
    o_ref[...] = ns.np.sin(x_ref[...]) * 2.0 + 1.0


def row_sum(ns, x_ref, o_ref):
    """A reduction accumulated across grid axis 1 into a resident output block."""

    @ns.when(ns.program_id(1) == 0)
    def _():
        o_ref[...] = ns.np.zeros(o_ref.shape, ns.np.float32)

    o_ref[...] += x_ref[...].sum(axis=1, keepdims=True)


def masked_col_max(ns, x_ref, o_ref):
    """Max over rows, accumulated across grid axis 0; the last row block is partial, so rows
    past the array's end (upstream pads them with NaN) are masked out with an iota."""
    bm = x_ref.shape[0]
    rows = ns.broadcasted_iota(ns.np.int32, x_ref.shape, 0) + ns.program_id(0) * bm
    x = ns.np.where(rows < 100, x_ref[...], -INF)

    @ns.when(ns.program_id(0) == 0)
    def _():
        o_ref[...] = ns.np.full(o_ref.shape, -INF, ns.np.float32)

    o_ref[...] = ns.np.maximum(o_ref[...], x.max(axis=0, keepdims=True))


def matmul(ns, x_ref, y_ref, o_ref, acc_ref):
    """Blocked matmul, 3-D grid (i, j, k), f32 scratch accumulator written out at the last k."""

    @ns.when(ns.program_id(2) == 0)
    def _():
        acc_ref[...] = ns.np.zeros(acc_ref.shape, ns.np.float32)

    acc_ref[...] += ns.np.dot(x_ref[...], y_ref[...], preferred_element_type=ns.np.float32)

    @ns.when(ns.program_id(2) == ns.num_programs(2) - 1)
    def _():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def softmax(ns, x_ref, o_ref):
    x = x_ref[...]
    e = ns.np.exp(x - x.max(axis=1, keepdims=True))
    o_ref[...] = e / e.sum(axis=1, keepdims=True)


def staged(ns, x_ref, o_ref):
    """A scratch buffer from ``run_scoped`` inside the body."""

    def body(tmp_ref):
        tmp_ref[...] = x_ref[...] * 3.0
        tmp_ref[0:8, :] = tmp_ref[8:16, :] - 1.0
        o_ref[...] = tmp_ref[...] + x_ref[...]

    ns.run_scoped(body, ns.VMEM(x_ref.shape, "float32"))


def batched_squeezed(ns, x_ref, o_ref):
    """3-D arrays and grid; the batch dimension is squeezed (block size None)."""
    o_ref[...] = ns.np.tanh(x_ref[...]) + ns.program_id(0).astype(ns.np.float32)


def pick_rows(ns, x_ref, o_ref):
    """Two squeezed dimensions: the kernel sees one row (128,) of one matrix."""
    o_ref[...] = x_ref[...] * 2.0


def bf16_gelu(ns, x_ref, o_ref):
    x = x_ref[...]
    o_ref[...] = x * ns.np.tanh(x * 0.79 + x * x * x * 0.035).astype(x.dtype)


def bf16_matmul(ns, x_ref, y_ref, o_ref):
    o_ref[...] = ns.np.dot(x_ref[...], y_ref[...], preferred_element_type=ns.np.float32)


def grid_ids(ns, o_ref):
    """Integer output from the grid position alone."""
    i, j = ns.program_id(0), ns.program_id(1)
    o_ref[...] = ns.np.full(o_ref.shape, i * ns.num_programs(1) + j, ns.np.int32)


def whole(ns, x_ref, y_ref, o_ref):
    """No grid, no specs: the whole arrays in one block."""
    o_ref[...] = ns.np.tanh(ns.np.dot(x_ref[...], y_ref[...], preferred_element_type=ns.np.float32))


def transpose_blocks(ns, x_ref, o_ref):
    """The output block (j, i) is the transposed input block (i, j)."""
    o_ref[...] = x_ref[...].T


def chunked_loop(ns, x_ref, o_ref):
    """A ``fori_loop`` over 8-row chunks of the block with dynamic slices."""

    def body(r, carry):
        rows = ns.ds(r * 8, 8)
        carry = carry + x_ref[rows, :]
        o_ref[rows, :] = carry
        return carry

    ns.fori_loop(0, x_ref.shape[0] // 8, body, ns.np.zeros((8, x_ref.shape[1]), ns.np.float32))


def sum_and_max(ns, x_ref, s_ref, m_ref):
    """Two outputs, both accumulated across grid axis 1."""

    @ns.when(ns.program_id(1) == 0)
    def _():
        s_ref[...] = ns.np.zeros(s_ref.shape, ns.np.float32)
        m_ref[...] = ns.np.full(m_ref.shape, -INF, ns.np.float32)

    x = x_ref[...]
    s_ref[...] += x.sum(axis=1, keepdims=True)
    m_ref[...] = ns.np.maximum(m_ref[...], x.max(axis=1, keepdims=True))


def int_ops(ns, x_ref, y_ref, o_ref):
    x, y = x_ref[...], y_ref[...]
    o_ref[...] = ((x * 3 + y) % 7 - (x & y)).astype(ns.np.int32)


def reversed_blocks(ns, x_ref, o_ref):
    o_ref[...] = x_ref[...] - 1.0


def layer_norm(ns, x_ref, g_ref, o_ref):
    x = x_ref[...]
    mean = x.sum(axis=1, keepdims=True) / x.shape[1]
    c = x - mean
    var = (c * c).sum(axis=1, keepdims=True) / x.shape[1]
    o_ref[...] = c * ns.rsqrt(var + 1e-5) * g_ref[...]


def padding_visible(ns, x_ref, o_ref):
    """Row sums with NaN counted as -1: the partial blocks' padding (NaN, as upstream pads)
    shows in the result."""

    @ns.when(ns.program_id(1) == 0)
    def _():
        o_ref[...] = ns.np.zeros(o_ref.shape, ns.np.float32)

    x = x_ref[...]
    o_ref[...] += ns.np.where(x != x, -1.0, x).sum(axis=1, keepdims=True)


def input_written(ns, x_ref, o_ref):
    """The body writes its input block; upstream carries inputs from step to step, so the
    second step sees the first step's write."""
    x_ref[...] = x_ref[...] * 2.0
    o_ref[...] = x_ref[...]


def shifted(ns, x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def compare_int8(ns, x_ref, y_ref, gt_ref, sum_ref):
    x, y = x_ref[...], y_ref[...]
    gt_ref[...] = x > y
    sum_ref[...] = x + y


# ----- the suite -----

KERNELS: list[Case] = [
    Case(
        "add", add, ((64, 256), "float32"), inputs(normal(64, 256), normal(64, 256)),
        grid=(8, 2), in_specs=[((8, 128), lambda i, j: (i, j))] * 2,
        out_specs=((8, 128), lambda i, j: (i, j)),
    ),
    Case(
        "add_partial_blocks", add, ((20, 300), "float32"), inputs(normal(20, 300), normal(20, 300)),
        grid=(3, 3), in_specs=[((8, 128), lambda i, j: (i, j))] * 2,
        out_specs=((8, 128), lambda i, j: (i, j)),
    ),
    Case(
        "bias_relu", bias_relu, ((32, 256), "float32"), inputs(normal(32, 256), normal(1, 256)),
        grid=(4, 2), in_specs=[((8, 128), lambda i, j: (i, j)), ((1, 128), lambda i, j: (0, j))],
        out_specs=((8, 128), lambda i, j: (i, j)),
    ),
    Case(
        "scale_1d", scale_1d, ((1024,), "float32"), inputs(normal(1024)),
        grid=(8,), in_specs=[((128,), lambda i: (i,))], out_specs=((128,), lambda i: (i,)),
    ),
    Case(
        "row_sum", row_sum, ((64, 1), "float32"), inputs(normal(64, 512)),
        grid=(4, 4), in_specs=[((16, 128), lambda i, j: (i, j))],
        out_specs=((16, 1), lambda i, j: (i, 0)), dimension_semantics=("parallel", "arbitrary"),
    ),
    Case(
        "masked_col_max", masked_col_max, ((1, 256), "float32"), inputs(normal(100, 256)),
        grid=(4, 2), in_specs=[((32, 128), lambda i, j: (i, j))],
        out_specs=((1, 128), lambda i, j: (0, j)),
    ),
    Case(
        "matmul", matmul, ((64, 256), "float32"), inputs(normal(64, 128), normal(128, 256)),
        grid=(2, 2, 4),
        in_specs=[((32, 32), lambda i, j, k: (i, k)), ((32, 128), lambda i, j, k: (k, j))],
        out_specs=((32, 128), lambda i, j, k: (i, j)), scratch=(((32, 128), "float32"),),
        dimension_semantics=("parallel", "parallel", "arbitrary"),
    ),
    Case(
        "softmax", softmax, ((64, 256), "float32"), inputs(normal(64, 256)),
        grid=(8,), in_specs=[((8, 256), lambda i: (i, 0))], out_specs=((8, 256), lambda i: (i, 0)),
    ),
    Case(
        "staged_run_scoped", staged, ((32, 128), "float32"), inputs(normal(32, 128)),
        grid=(2,), in_specs=[((16, 128), lambda i: (i, 0))],
        out_specs=((16, 128), lambda i: (i, 0)),
    ),
    Case(
        "batched_squeezed", batched_squeezed, ((4, 16, 256), "float32"), inputs(normal(4, 16, 256)),
        grid=(4, 2, 2), in_specs=[((None, 8, 128), lambda b, i, j: (b, i, j))],
        out_specs=((None, 8, 128), lambda b, i, j: (b, i, j)),
    ),
    Case(
        "pick_rows", pick_rows, ((3, 8, 256), "float32"), inputs(normal(3, 8, 256)),
        grid=(3, 8, 2), in_specs=[((None, None, 128), lambda b, r, j: (b, r, j))],
        out_specs=((None, None, 128), lambda b, r, j: (b, r, j)),
    ),
    Case(
        "bf16_gelu", bf16_gelu, ((32, 256), "bfloat16"), inputs(normal(32, 256, dtype=BF16)),
        grid=(2, 2), in_specs=[((16, 128), lambda i, j: (i, j))],
        out_specs=((16, 128), lambda i, j: (i, j)),
    ),
    Case(
        "bf16_matmul", bf16_matmul, ((64, 128), "float32"),
        inputs(normal(64, 64, dtype=BF16), normal(64, 128, dtype=BF16)),
        grid=(4,), in_specs=[((16, 64), lambda i: (i, 0)), ((64, 128), lambda i: (0, 0))],
        out_specs=((16, 128), lambda i: (i, 0)),
    ),
    Case(
        "grid_ids", grid_ids, ((16, 384), "int32"), inputs(),
        grid=(2, 3), in_specs=[], out_specs=((8, 128), lambda i, j: (i, j)),
    ),
    Case(
        "whole_array", whole, ((16, 32), "float32"), inputs(normal(16, 64), normal(64, 32)),
    ),
    Case(
        "transpose_blocks", transpose_blocks, ((256, 128), "float32"), inputs(normal(128, 256)),
        grid=(2, 2), in_specs=[((64, 128), lambda i, j: (i, j))],
        out_specs=((128, 64), lambda i, j: (j, i)),
    ),
    Case(
        "chunked_loop", chunked_loop, ((64, 128), "float32"), inputs(normal(64, 128)),
        grid=(2,), in_specs=[((32, 128), lambda i: (i, 0))],
        out_specs=((32, 128), lambda i: (i, 0)),
    ),
    Case(
        "sum_and_max", sum_and_max, (((32, 1), "float32"), ((32, 1), "float32")),
        inputs(normal(32, 512)),
        grid=(2, 4), in_specs=[((16, 128), lambda i, j: (i, j))],
        out_specs=[((16, 1), lambda i, j: (i, 0)), ((16, 1), lambda i, j: (i, 0))],
    ),
    Case(
        "int_ops", int_ops, ((16, 256), "int32"),
        lambda rng: tuple(rng.integers(-1000, 1000, (16, 256), dtype=np.int32) for _ in "xy"),
        grid=(2, 2), in_specs=[((8, 128), lambda i, j: (i, j))] * 2,
        out_specs=((8, 128), lambda i, j: (i, j)),
    ),
    Case(
        "reversed_blocks", reversed_blocks, ((512,), "float32"), inputs(normal(512)),
        grid=(4,), in_specs=[((128,), lambda i: (3 - i,))], out_specs=((128,), lambda i: (i,)),
    ),
    Case(
        "layer_norm_partial", layer_norm, ((50, 128), "float32"),
        inputs(normal(50, 128), normal(1, 128)),
        grid=(4,), in_specs=[((16, 128), lambda i: (i, 0)), ((1, 128), lambda i: (0, 0))],
        out_specs=((16, 128), lambda i: (i, 0)),
    ),
    Case(
        "padding_visible", padding_visible, ((40, 1), "float32"), inputs(normal(40, 300)),
        grid=(3, 3), in_specs=[((16, 128), lambda i, j: (i, j))],
        out_specs=((16, 1), lambda i, j: (i, 0)),
    ),
    Case(
        "input_written", input_written, ((16, 128), "float32"), inputs(normal(8, 128)),
        grid=(2,), in_specs=[((8, 128), lambda i: (0, 0))],
        out_specs=((8, 128), lambda i: (i, 0)),
    ),
    Case(
        "negative_block_index", shifted, ((512,), "float32"), inputs(normal(512)),
        grid=(4,), in_specs=[((128,), lambda i: (i - 2,))], out_specs=((128,), lambda i: (i,)),
    ),
    Case(
        "clamped_block_index", shifted, ((512,), "float32"), inputs(normal(512)),
        grid=(4,), in_specs=[((128,), lambda i: (i + 1,))], out_specs=((128,), lambda i: (i,)),
    ),
    Case(
        "compare_int8", compare_int8, (((16, 256), "bool"), ((16, 256), "int8")),
        lambda rng: tuple(rng.integers(-128, 128, (16, 256), dtype=np.int8) for _ in "xy"),
        grid=(2, 2), in_specs=[((8, 128), lambda i, j: (i, j))] * 2,
        out_specs=[((8, 128), lambda i, j: (i, j))] * 2,
    ),
]  # fmt: skip

BY_NAME = {case.name: case for case in KERNELS}


def upstream_running_rows(x_ref, o_ref):
    """An upstream kernel body (jax itself, not a namespace): ``ys[i] = 2 * (x[0] + ... +
    x[i])``, a ``lax.scan`` with an extensive input and output, which minipallas emits as
    register windows at the loop index on Mosaic and Triton."""
    import jax

    def step(c, row):
        c = c + row
        return c, c * 2.0

    _, ys = jax.lax.scan(step, jax.numpy.zeros((128,), jax.numpy.float32), x_ref[...])
    o_ref[...] = ys
