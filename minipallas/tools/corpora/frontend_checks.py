"""Checks of programs built with minipallas's own front end, which no imported jaxpr makes.

The difftest corpora start from upstream jaxprs, and some of minipallas's code is out of their
reach: the importer never emits an integer ``pow``, ``lax.switch`` clamps its index in the
jaxpr, imported gathers and scatters have no dynamic slice start (the importer turns one into
position arrays), and only minipallas's own ``pallas_call`` runs a kernel as a batched grid
(an imported one always becomes the loop program). Each check here builds such a program with
``minipallas.trace`` / ``minipallas.numpy`` / ``minipallas.pallas_call`` and computes its
outputs two ways that must agree bit for bit:

- a traced program: ``minipallas.compile`` (StableHLO on XLA:CPU) against the reference
  interpreter, outputs compared as the harness compares them (its results, then the final
  value of every ref input);
- a kernel: ``minipallas.pallas_call`` on the CPU (the batched grid, checked to be taken where
  the check says so) against the same body under upstream ``pl.pallas_call(...,
  interpret=True)``, as ``minipallas.tools.fuzz.kernels`` compares them.

``CHECKS`` holds them; ``Check.run()`` returns None on agreement, else a one-line problem.
``bench/mutation/mutate.py`` runs them as its "frontend" stage. Each takes well under 2 s.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.kernels.programs.vectorized_grid import vectorized_grid_plan
from minipallas.tools.difftest.outputs import RefArg, interpret_outputs, ref
from minipallas.tools.difftest.report import compare
from minipallas.tools.generate.check import same_bits

I32, F32 = np.int32, np.float32


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[], str | None]
    reaches: str  # the code it exercises that jaxprs do not


def program_problem(fn: Any, args: Sequence[Any], compiled: Any = None) -> str | None:  # noqa: ANN401
    """None if ``minipallas.compile(compiled or fn)`` gives the interpreter's outputs of ``fn``
    bit for bit on ``args`` (``ref(...)`` marks a ref input); else the first difference.
    ``compiled`` is a different function to compile, for showing the check's power."""
    want = interpret_outputs(fn, list(args))
    arrays = [np.array(a.value if isinstance(a, RefArg) else a) for a in args]
    got = mp.compile(fn if compiled is None else compiled)(*arrays)
    for k, (w, g) in enumerate(zip(want, got, strict=True)):
        problem = compare(w, g)
        if problem:
            return f"@{fn.name} output {k}: compile {problem} (interpret first)"
    return None


# -- traced programs --------------------------------------------------------------------------


def int_pow(x: Any, y: Any) -> Any:  # noqa: ANN401
    return x**y


POW_ARGS = (np.array([2, 3, -2, 0, 1, -1, 5, 7], I32), np.array([0, 0, 3, 0, -1, -3, 2, -2], I32))


def pow_check(compiled: Callable[..., Any] | None = None) -> str | None:
    """Integer ``x ** y`` with exponents 0, negative and positive (1 ** -n is 1, any other
    base 0; x ** 0 is 1). ``compiled``: a Python function traced and compiled in place of
    ``int_pow`` (the tests' wrong variants)."""
    t = mp.ArrayType((8,), "int32")
    other = None if compiled is None else mp.trace(compiled, t, t)
    return program_problem(mp.trace(int_pow, t, t), POW_ARGS, other)


def three_way_switch(i: Any, x: Any) -> Any:  # noqa: ANN401
    return mp.switch(i, [lambda v: v + 1, lambda v: v * 2, lambda v: v - 3], x)


def switch_check(compiled: Callable[..., Any] | None = None) -> str | None:
    """A traced switch index of three branches, in range and out (clamped as lax.switch).
    ``compiled``: as for ``pow_check``."""
    types_ = mp.ArrayType((), "int32"), mp.ArrayType((4,), "int32")
    traced = mp.trace(three_way_switch, *types_)
    other = None if compiled is None else mp.trace(compiled, *types_)
    for i in (-1, -7, 0, 1, 2, 3, 9):
        problem = program_problem(traced, (I32(i), np.arange(4, dtype=I32)), other)
        if problem:
            return f"index {i}: {problem}"
    return None


def gather_dynamic_window(i: Any, idx: Any, x_ref: Any, o_ref: Any) -> None:  # noqa: ANN401
    o_ref[...] = x_ref[mp.ds(i, 3, 2), idx]


def scatter_dynamic_window(i: Any, idx: Any, x_ref: Any) -> None:  # noqa: ANN401
    x_ref[mp.ds(i, 3), idx] = mnp.full((3, 2), -1, mnp.int32)


def window_check(compiled: Callable[..., Any] | None = None) -> str | None:
    """A dynamic-start window next to an integer-array index, read (a strided window) and
    written, at starts inside, at and past the last valid one and negative: each op clamps
    its start so the window fits, and XLA's scatter would drop a window that does not.
    ``compiled``: a gather compiled in place of ``gather_dynamic_window``, as for
    ``pow_check``."""
    i32, idx2 = mp.ArrayType((), "int32"), mp.ArrayType((2,), "int32")
    refs = mp.RefType((10, 5), "int32"), mp.RefType((3, 2), "int32")
    read = mp.trace(gather_dynamic_window, i32, idx2, *refs)
    other = None if compiled is None else mp.trace(compiled, i32, idx2, *refs)
    write = mp.trace(scatter_dynamic_window, i32, idx2, refs[0])
    x = np.arange(50, dtype=I32).reshape(10, 5)
    idx = np.array([1, -1], I32)
    for i in (0, 4, 5, 6, 7, 8, 9, 30, -2, -30):
        zeros = np.zeros((3, 2), I32)
        problem = program_problem(read, (I32(i), idx, ref(x), ref(zeros)), other)
        problem = problem or program_problem(write, (I32(i), idx, ref(x)))
        if problem:
            return f"start {i}: {problem}"
    return None


def bf16_product_in_f32(a: Any, b: Any) -> Any:  # noqa: ANN401
    return (a * b).astype(mnp.float32)


def bf16_rounding_check(compiled: Callable[..., Any] | None = None) -> str | None:
    """bf16 products converted to f32: each product is rounded to bf16 first. minipallas
    compiles with ``xla_allow_excess_precision`` off; with it on, XLA:CPU drops the rounding
    and keeps the f32 product (measured: 246 of these 256 elements then differ). ``compiled``:
    as for ``pow_check``."""
    t = mp.ArrayType((16, 16), "bfloat16")
    rng = np.random.default_rng(4)
    args = [rng.standard_normal((16, 16)).astype(ml_dtypes.bfloat16) for _ in range(2)]
    other = None if compiled is None else mp.trace(compiled, t, t)
    return program_problem(mp.trace(bf16_product_in_f32, t, t), args, other)


SMALL_BF16_LOOP = """
func @body(%x: bf16[2]) -> (bf16[2]) {
  %c = constant 3.0 : bf16[2]
  %t = mul %x, %c : bf16[2]
  %s = sub %t, %x : bf16[2]
  return %s
}

func @small_loop(%x: bf16[6]) -> (bf16[6]) {
  %lo = constant 0 : i32[]
  %hi = constant 3 : i32[]
  %r = for %lo to %hi (%x) iter (%x) {
  ^(%i: i32[], %in: bf16[6], %out: bf16[6]):
    %two = constant 2 : i32[]
    %at = mul %i, %two : i32[]
    %w = dynamic_slice %in[ds(%at, 2)] : bf16[2]
    %s = call @body(%w) : bf16[2]
    %o = dynamic_update_slice %out[ds(%at, 2)], %s : bf16[6]
    yield %o
  } : bf16[6]
  return %r
}
"""


def small_loop_check() -> str | None:
    """``x * 3 - x`` in bf16 inside a loop of a few bytes a step: XLA:CPU's small-loop route
    would compile it as one LLVM function that fuses the two ops and skips the rounding of
    ``x * 3`` (fuzz-kernels 978 and 2307); minipallas turns that route off
    (``xla_cpu.CPU_BACKEND_OPTIONS``)."""
    x = np.array([0.69140625, 0.25390625, -0.26171875, 1.203125, 0.92578125, 2.703125])
    return program_problem(mp.parse(SMALL_BF16_LOOP), [x.astype(ml_dtypes.bfloat16)])


# -- kernels on the batched grid ---------------------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    """A Pallas kernel written once over a namespace ``ns`` (``ns.np``: ``minipallas.numpy`` or
    ``jax.numpy``; ``ns.when``, ``ns.program_id``: minipallas's or Pallas's), with one input and
    one output, each with a block spec on the grid."""

    body: Callable[..., None]  # body(ns, x_ref, *more_refs, o_ref)
    x: np.ndarray
    out: tuple[tuple[int, ...], str]
    grid: tuple[int, ...]
    x_block: tuple[tuple[int, ...], Callable[..., tuple]]
    o_block: tuple[tuple[int, ...], Callable[..., tuple]]
    more: tuple[tuple[np.ndarray, tuple[tuple[int, ...], Callable[..., tuple]]], ...] = ()

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.x, *(a for a, _ in self.more))

    def _blocks(self, spec: Callable[..., Any]) -> list[Any]:  # noqa: ANN401
        return [spec(*self.x_block), *(spec(*block) for _, block in self.more)]

    def minipallas(self) -> Any:  # noqa: ANN401 - a PallasCall
        ns = types.SimpleNamespace(np=mnp, when=mp.when, program_id=mp.program_id, rsqrt=mnp.rsqrt)
        return mp.pallas_call(
            lambda *refs: self.body(ns, *refs),
            mp.ArrayType(*self.out),
            grid=self.grid,
            in_specs=self._blocks(mp.BlockSpec),
            out_specs=mp.BlockSpec(*self.o_block),
        )

    def upstream(self) -> Any:  # noqa: ANN401 - a jitted function
        import jax
        import jax.numpy as jnp
        from jax.experimental import pallas as pl

        ns = types.SimpleNamespace(
            np=jnp, when=pl.when, program_id=pl.program_id, rsqrt=jax.lax.rsqrt
        )
        return jax.jit(
            pl.pallas_call(
                lambda *refs: self.body(ns, *refs),
                out_shape=jax.ShapeDtypeStruct(self.out[0], jnp.dtype(self.out[1])),
                grid=self.grid,
                in_specs=self._blocks(pl.BlockSpec),
                out_specs=pl.BlockSpec(*self.o_block),
                interpret=True,
            )
        )


def kernel_problem(kernel: Kernel, batched: bool, upstream: Kernel | None = None) -> str | None:
    """None if minipallas's CPU run of ``kernel`` equals upstream's run of ``upstream``
    (default: the same kernel) bit for bit and the grid was batched iff ``batched``."""
    call = kernel.minipallas()
    planned = vectorized_grid_plan(call.trace(*kernel.arrays)) is not None
    if batched and not planned:
        return "the grid was not batched, so the check does not reach the batching pass"
    got = np.asarray(call(*kernel.arrays))
    want = np.asarray((upstream or kernel).upstream()(*kernel.arrays))
    if same_bits(got, want):
        return None
    differ = np.argwhere(got != want)[0]
    return f"cpu program differs from upstream at {differ.tolist()}: {got[tuple(differ)]} vs " + (
        f"{want[tuple(differ)]}"
    )


def _int_blocks(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.integers(-50, 50, shape).astype(I32)


def sum_middle(ns: Any, x: Any, o: Any) -> None:  # noqa: ANN401
    o[...] = ns.np.sum(x[...], axis=1)


def max_last(ns: Any, x: Any, o: Any) -> None:  # noqa: ANN401
    o[...] = ns.np.max(x[...], axis=2)


def reduce_kernel(body: Callable[..., None], axis: int) -> Kernel:
    """An integer reduction of (2, 4, 6) blocks over the non-leading ``axis``."""
    x = _int_blocks(np.random.default_rng(1), 8, 4, 6)
    out = tuple(n for d, n in enumerate(x.shape) if d != axis)
    block = tuple(n for d, n in enumerate((2, 4, 6)) if d != axis)
    return Kernel(body, x, (out, "int32"), (4,), ((2, 4, 6), lambda i: (i, 0, 0)),
                  (block, lambda i: (i, 0)))  # fmt: skip


def transpose_201(ns: Any, x: Any, o: Any) -> None:  # noqa: ANN401
    o[...] = ns.np.transpose(x[...], (2, 0, 1))


def transpose_kernel(body: Callable[..., None]) -> Kernel:
    """A (2, 0, 1)-shaped transpose of 3-D (2, 3, 5) blocks (the grid's axis lands at output
    dim 1)."""
    x = _int_blocks(np.random.default_rng(2), 8, 3, 5)
    return Kernel(body, x, ((5, 8, 3), "int32"), (4,), ((2, 3, 5), lambda i: (i, 0, 0)),
                  ((5, 2, 3), lambda i: (0, i, 0)))  # fmt: skip


def row_sum(ns: Any, x: Any, o: Any) -> None:  # noqa: ANN401
    o[...] = ns.np.sum(x[...], axis=1)


def float_sum_kernels(body: Callable[..., None]) -> list[Kernel]:
    """f32 row sums of (16, 128), (1, 1024) and (16, 100) blocks: XLA:CPU orders a float sum
    by the operand's shape, so batching the blocks into one (4, 16, 128) or (16, 1, 1024) sum
    changes bits (measured: the last bit of most rows; (16, 1024) blocks happen to agree).
    Exact mode batches the first two with XLA's per-block order written out (passes/batching/
    exactness.py's ``spelled_tree``) and keeps the third, rows of no whole number of windows,
    on loops: each row must still sum as upstream's block does."""
    out = []
    for rows, cols, grid in ((16, 128, 4), (1, 1024, 16), (16, 100, 4)):
        x = np.random.default_rng(3).standard_normal((rows * grid, cols)).astype(F32)
        out.append(Kernel(body, x, ((rows * grid,), "float32"), (grid,),
                          ((rows, cols), lambda i: (i, 0)), ((rows,), lambda i: (i,))))  # fmt: skip
    return out


def horner_over_two_axes(ns: Any, x: Any, o: Any) -> None:  # noqa: ANN401
    @ns.when((ns.program_id(1) == 0) & (ns.program_id(2) == 0))
    def _() -> None:
        o[...] = ns.np.zeros((1, 8), ns.np.int32)

    o[...] = o[...] * 3 + x[0, 0]


def sequential_axes_kernel(body: Callable[..., None]) -> Kernel:
    """Grid (2, 2, 3): axis 0 batched (its own output rows), axes 1 and 2 revisit the output
    block, so they stay sequential loops around the batched body, in row-major order; the
    Horner step ``o * 3 + x`` makes the result depend on that order."""
    x = _int_blocks(np.random.default_rng(4), 2, 2, 3, 8)
    return Kernel(body, x, ((2, 8), "int32"), (2, 2, 3),
                  ((1, 1, 1, 8), lambda b, i, j: (b, i, j, 0)),
                  ((1, 8), lambda b, i, j: (b, 0)))  # fmt: skip


def float_sum_check() -> str | None:
    for k in float_sum_kernels(row_sum):
        problem = kernel_problem(k, batched=k.x_block[0][1] % 32 == 0)
        if problem:
            return f"{k.x_block[0]} blocks: {problem}"
    return None


def k_steps_of_dots(ns: Any, x: Any, y: Any, o: Any) -> None:  # noqa: ANN401
    @ns.when(ns.program_id(2) == 0)
    def _() -> None:
        o[...] = ns.np.zeros(o.shape, ns.np.float32)

    o[...] += ns.np.dot(x[...], y[...], preferred_element_type=ns.np.float32)


def deep_dots_check() -> str | None:
    """A blocked matmul's k steps, each dot's output added into the output block. Its dots are
    hoisted out of the k loop as one dot with a batch dimension: 128 deep it runs in XLA's own
    dot kernel (passes/xla_cpu/exactness.py's ``own_dot``), 512 deep in YNNPACK's, which adds
    it up in another order than XLA's kernel does (measured: 90% of the elements)."""
    rng = np.random.default_rng(5)
    for depth in (128, 512):
        x = rng.standard_normal((256, 3 * depth)).astype(F32)
        y = rng.standard_normal((3 * depth, 256)).astype(F32)
        kernel = Kernel(k_steps_of_dots, x, ((256, 256), "float32"), (2, 2, 3),
                        ((128, depth), lambda i, j, k: (i, k)),
                        ((128, 128), lambda i, j, k: (i, j)),
                        more=((y, ((depth, 128), lambda i, j, k: (k, j))),))  # fmt: skip
        problem = kernel_problem(kernel, batched=True)
        if problem:
            return f"{depth} deep: {problem}"
    return None


def rows_past_an_exp(ns: Any, x: Any, o: Any) -> None:  # noqa: ANN401
    e = ns.np.exp(x[...] - ns.np.max(x[...], axis=1, keepdims=True))
    o[...] = e * ns.rsqrt(ns.np.sum(e, axis=1, keepdims=True))


def recompute_check() -> str | None:
    """Rows scaled by the rsqrt of their sum of ``exp``: batched, the rsqrt runs in chunks, a
    break in YNNPACK's graph, and past it the values of ``exp`` are read as the first half's
    YNNPACK graph computed them, not computed again by XLA, whose ``exp`` rounds otherwise
    (passes/xla_cpu/recompute.py)."""
    x = np.random.default_rng(6).standard_normal((64 * 64, 64)).astype(F32)
    kernel = Kernel(rows_past_an_exp, x, ((64 * 64, 64), "float32"), (64,),
                    ((64, 64), lambda i: (i, 0)), ((64, 64), lambda i: (i, 0)))  # fmt: skip
    return kernel_problem(kernel, batched=True)


CHECKS: tuple[Check, ...] = (
    Check("int_pow", pow_check, "integer pow (lowering/stablehlo/rules/arrays.py)"),
    Check("switch_out_of_range", switch_check, "a cond of 3+ branches with a traced index"),
    Check("dynamic_window_next_to_array", window_check, "gather/scatter with a dynamic start"),
    Check("bf16_product_in_f32", bf16_rounding_check, "per-op bf16 rounding in XLA"),
    Check("bf16_small_loop", small_loop_check, "per-op bf16 rounding in a small loop"),
    Check(
        "batched_int_sum_middle_axis",
        lambda: kernel_problem(reduce_kernel(sum_middle, 1), batched=True),
        "batched reduction",
    ),
    Check(
        "batched_int_max_last_axis",
        lambda: kernel_problem(reduce_kernel(max_last, 2), batched=True),
        "batched reduction",
    ),
    Check(
        "batched_transpose_3d",
        lambda: kernel_problem(transpose_kernel(transpose_201), batched=True),
        "batched transpose",
    ),
    Check("wide_f32_row_sum", float_sum_check, "a float reduction kept off the batched grid"),
    Check("deep_hoisted_dots", deep_dots_check, "who runs a batched dot (XLA's kernel or YNNPACK)"),
    Check("exp_past_a_break", recompute_check, "values read past a chunked approximate op"),
    Check(
        "sequential_axes_in_order",
        lambda: kernel_problem(sequential_axes_kernel(horner_over_two_axes), batched=True),
        "the loops around a batched body (kernels/programs/vectorized_grid.py)",
    ),
)
