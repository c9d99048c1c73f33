"""Pallas primitives imported from upstream: ``run_scoped`` (scratch, nesting, collective
axes), masked ``load``/``store``/``swap`` with upstream's padded windows, ``program_id`` and
``num_programs``; checked against upstream's discharge bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import I32, arr, assert_all_same, check, interpreted, ref, upstream
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu

import minipallas
from minipallas.interop import from_jaxpr
from minipallas.lowering.compat.jax_private import pallas_core, pallas_primitives, state_discharge

load, store, swap = pallas_primitives.load, pallas_primitives.store, pallas_primitives.swap

STARTS = [-13, -9, -5, -1, 0, 3, 5, 8, 20]


def _line(x):
    return np.arange(8.0, dtype=np.float32) + x


@pytest.mark.parametrize("i", STARTS)
def test_windows_past_the_end_read_fill_values_and_drop_writes(i):
    def f(x_ref, o_ref, i):
        a = load(x_ref, (pl.ds(i, 4),))
        store(o_ref, (pl.ds(i, 4),), a * 2.0)
        return a

    check(f, ref((8,)), ref((8,)), I32, args=[_line(0), _line(100), np.int32(i)])


@pytest.mark.parametrize("i", STARTS)
def test_masks_and_other(i):
    def f(x_ref, o_ref, i):
        m = jnp.arange(4) < 2
        a = load(x_ref, (pl.ds(i, 4),), mask=m, other=-1.0)
        b = load(x_ref, (pl.ds(i, 4),), mask=m)  # no other: upstream ignores the mask
        store(o_ref, (pl.ds(i, 4),), a + b, mask=m)
        old = swap(o_ref, (pl.ds(0, 4),), b, mask=~m)
        return a, b, old

    check(f, ref((8,)), ref((8,)), I32, args=[_line(0), _line(100), np.int32(i)])


@pytest.mark.parametrize("i", [-3, -1, 0, 2, 4])
def test_scalar_and_two_dimensional_windows(i):
    def f(x_ref, i):
        row = load(x_ref, (i, pl.ds(1, 3)))
        store(x_ref, (pl.ds(i, 2), i), jnp.array([7.0, 8.0]))
        return row

    check(f, ref((4, 4)), I32, args=[np.arange(16.0, dtype=np.float32).reshape(4, 4), np.int32(i)])


def test_literal_scalar_index_which_upstream_cannot_discharge():
    # upstream's Pallas discharge asks a literal index for its shape and crashes
    # (AttributeError: 'TypedInt' object has no attribute 'shape'); minipallas imports it as
    # the static index it is, meaning what the same program with a dynamic index means
    def literal(x_ref):
        store(x_ref, (pl.ds(0, 2), 3), load(x_ref, (1, pl.ds(1, 2))))

    def dynamic(x_ref, one, three):
        store(x_ref, (pl.ds(0, 2), three), load(x_ref, (one, pl.ds(1, 2))))

    with pytest.raises(AttributeError):
        upstream(jax.make_jaxpr(literal)(ref((4, 4))), [np.zeros((4, 4), np.float32)])
    fn = from_jaxpr(jax.make_jaxpr(literal)(ref((4, 4))))
    x = np.arange(16.0, dtype=np.float32).reshape(4, 4)
    want = upstream(jax.make_jaxpr(dynamic)(ref((4, 4)), I32, I32), [x, np.int32(1), np.int32(3)])
    assert_all_same(interpreted(fn, [x]), want[:1])


def test_static_negative_start_reads_past_the_end():
    def f(x_ref):
        return load(x_ref, (pl.ds(-2, 4),)), load(x_ref, (pl.ds(2, 4),))

    fn = check(f, ref((8,)))
    assert "iota" not in str(fn).split("\n")[2]  # the in-bounds window stays a plain one


def test_windows_known_to_fit_stay_plain_loads():
    def f(x_ref):
        store(x_ref, (pl.ds(4, 4),), load(x_ref, (pl.ds(0, 4),)))

    fn = check(f, ref((8,)))
    assert "iota" not in str(fn) and "select" not in str(fn)


@pytest.mark.parametrize("idx", [[0, 3, 1], [-1, 9, -20]])
def test_integer_array_windows_with_masks(idx):
    def f(x_ref, idx):
        m = jnp.array([True, False, True])
        a = load(x_ref, (idx,), mask=m, other=0.5)
        store(x_ref, (idx,), a + 1.0, mask=m)
        return a

    check(f, ref((6,)), arr((3,), jnp.int32), args=[_line(0)[:6], np.array(idx, np.int32)])


@pytest.mark.parametrize("i", [-6, 0, 3, 6])
def test_public_tpu_and_triton_entry_points_through_views(i):
    def f(x_ref, o_ref, i):
        m = jnp.arange(4) % 2 == 0
        a = pltpu.load(x_ref.at[pl.ds(i, 4)], mask=m)
        b = plgpu.load(x_ref.at[pl.ds(i, 4)], mask=m, other=3.0)
        pltpu.store(o_ref.at[pl.ds(i, 4)], a + b, mask=m)
        plgpu.store(o_ref.at[pl.ds(0, 2)], b[:2])
        return a, b

    check(f, ref((8,)), ref((8,)), I32, args=[_line(0), _line(100), np.int32(i)])


@pytest.mark.parametrize("i", [-13, -1, 3, 20])
def test_clamp_mode_treats_pallas_windows_like_ref_indexing(i):
    def pallas_version(x_ref, o_ref, i):
        m = jnp.arange(4) < 3
        a = load(x_ref, (pl.ds(i, 4),), mask=m, other=0.0)
        store(o_ref, (pl.ds(i, 4),), a, mask=m)
        return a

    def ref_version(x_ref, o_ref, i):
        m = jnp.arange(4) < 3
        a = jnp.where(m, x_ref[pl.ds(i, 4)], 0.0)
        o_ref[pl.ds(i, 4)] = jnp.where(m, a, o_ref[pl.ds(i, 4)])
        return a

    avals = (ref((8,)), ref((8,)), I32)
    fn = from_jaxpr(jax.make_jaxpr(pallas_version)(*avals), pallas_oob="clamp")
    assert "load %0[ds(" in str(fn) and "store %1[ds(" in str(fn)
    args = [_line(0), _line(100), np.int32(i)]
    assert_all_same(interpreted(fn, args), upstream(jax.make_jaxpr(ref_version)(*avals), args))


def test_unknown_pallas_oob_mode_is_an_error():
    with pytest.raises(minipallas.MiniPallasError, match="pallas_oob"):
        from_jaxpr(jax.make_jaxpr(lambda x: x)(1.0), pallas_oob="wrap")


# --- run_scoped ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32, jnp.int8, jnp.bool_])
def test_scratch_reads_the_fill_value_before_it_is_written(dtype):
    def f(x_ref):
        def body(s_ref):
            first = s_ref[...]
            s_ref[1:] = x_ref[1:]
            return first, s_ref[...]

        return pl.run_scoped(body, pltpu.VMEM((3,), dtype))

    fn = check(f, ref((3,), dtype))
    assert "Ref{" + minipallas.ir.dtypes.SHORT[np.dtype(dtype).name] + "[3], tpu.vmem}" in str(fn)


def test_nested_scopes_with_closed_over_refs():
    def f(x_ref, y_ref, n):
        def outer(a_ref):
            a_ref[...] = x_ref[...] * 2.0

            def inner(b_ref):
                b_ref[...] = a_ref[...] + y_ref[...]
                y_ref[...] = b_ref[...] * 3.0
                a_ref[pl.ds(n, 2)] = b_ref[:2]
                return b_ref[0]

            first = pl.run_scoped(inner, pltpu.VMEM((4,), jnp.float32))
            x_ref[...] = a_ref[...]
            return first

        return pl.run_scoped(outer, pltpu.SMEM((4,), jnp.float32))

    check(f, ref((4,)), ref((4,)), I32, args=[_line(0)[:4], _line(10)[:4], np.int32(1)])


def test_collective_axes_carry_over_and_discharge_raises_upstreams_error():
    def f(x_ref):
        def body(s_ref):
            s_ref[...] = x_ref[...]
            return s_ref[0]

        return pl.run_scoped(body, pltpu.VMEM((2,), jnp.float32), collective_axes="x")

    closed = jax.make_jaxpr(f)(ref((2,)))
    fn = from_jaxpr(closed)
    (op,) = [op for op in fn.walk() if op.name == "run_scoped"]
    assert op.attrs["collective_axes"] == ("x",)

    with pytest.raises(NotImplementedError) as theirs:
        state_discharge.discharge_state(closed)
    with pytest.raises(minipallas.MiniPallasError) as ours:
        minipallas.discharge(fn)
    assert str(theirs.value) in str(ours.value)


# --- program_id / num_programs ---------------------------------------------------------------


@pytest.mark.parametrize("ids", [(0, 0), (1, 2)])
def test_program_id_and_num_programs(ids):
    grid = (2, 3)

    def kernel(x_ref):
        i, j = pl.program_id(0), pl.program_id(1)
        x_ref[i, j] = (pl.num_programs(1) * 10 + i * 3 + j).astype(jnp.float32)
        return pl.num_programs(1)

    with pallas_core.tracing_grid_env((2, pallas_core.dynamic_grid_dim), ()):
        closed = jax.make_jaxpr(kernel)(ref(grid))
    fn = from_jaxpr(closed)
    assert {op.name for op in fn.walk()} >= {"program_id", "num_programs"}
    x = np.zeros(grid, np.float32)
    (n,) = minipallas.interpret(fn, x, program_ids=ids, grid=grid)
    env = [pallas_core.GridAxis(jnp.int32(p), g) for p, g in zip(ids, grid, strict=True)]
    with pallas_core.grid_env(env):
        want = upstream(jax.make_jaxpr(kernel)(ref(grid)), [np.zeros(grid, np.float32)])
    assert_all_same([n, x], want)
