"""State primitives imported from upstream (``get``, ``swap``, ``addupdate``, views,
``broadcast_to``, ``run_state``), each checked against upstream's ``discharge_state`` bit for
bit through the interpreter, XLA (``compile``) and ``to_jax`` under ``jax.jit``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import I32, arr, check, interpreted, ref, sample
from jax.experimental import pallas as pl

import minipallas
from minipallas.interop import from_jaxpr
from minipallas.lowering.compat.jax_private import state_discharge

F32 = jnp.float32

# --- one indexer form per case; dynamic values cover negative and out-of-range indices ------

INDEX_VALUES = [-9, -4, -1, 0, 2, 3, 7]


@pytest.mark.parametrize("i", INDEX_VALUES)
def test_dynamic_integer_and_slice_starts_wrap_negatives_then_clamp(i):
    def f(x_ref, i):
        a = x_ref[i, pl.ds(i, 2)]
        x_ref[pl.ds(i, 3), i] = jnp.arange(3.0)
        x_ref[i, :] += 1.0
        return a

    check(f, ref((4, 5)), I32, args=[np.arange(20.0, dtype=np.float32).reshape(4, 5), np.int32(i)])


def test_literal_indices_fold_to_static_ones():
    def f(x_ref):
        x_ref[-1, 0] = 3.0
        x_ref[1, -2] = 4.0
        return x_ref[-1, -1], x_ref[0, 1:3], x_ref[-2]

    fn = check(f, ref((4, 5)))
    text = str(fn)
    assert "swap %0[3, 0]" in text and "swap %0[1, 3]" in text
    assert "select" not in text  # nothing left to wrap at run time


def test_static_strided_slices():
    def f(x_ref):
        a = x_ref[::2, 1::3]
        x_ref[1::2, ::2] = jnp.zeros((2, 3))
        return a

    check(f, ref((4, 6)))


@pytest.mark.parametrize("i", [-6, -1, 0, 3, 5])
def test_strided_slice_with_a_dynamic_integer_is_a_gather_form(i):
    # upstream turns this into a gather / scatter: reads clamp the row, writes drop it
    def f(x_ref, i):
        a = x_ref[i, ::2]
        x_ref[i, 1::2] = a * 10.0
        return a

    check(f, ref((4, 6)), I32, args=[np.arange(24.0, dtype=np.float32).reshape(4, 6), np.int32(i)])


@pytest.mark.parametrize("i", [-9, -2, 0, 1, 4])
def test_strided_dynamic_slice_becomes_position_arrays(i):
    def f(x_ref, j, i):
        a = x_ref[j, pl.ds(i, 3, stride=2)]
        x_ref[j, pl.ds(i, 2, stride=3)] = jnp.ones((2, 2))
        return a

    idx = np.array([0, -1], np.int32)
    check(
        f,
        ref((4, 6)),
        arr((2,), jnp.int32),
        I32,
        args=[np.arange(24.0, dtype=np.float32).reshape(4, 6), idx, np.int32(i)],
    )


@pytest.mark.parametrize(
    "idx", [[0, 2, 1], [-1, -4, 3], [5, -7, 0], [1, 1, 2]], ids=["plain", "negative", "out", "dup"]
)
def test_integer_array_indices_wrap_then_clamp_reads_and_drop_writes(idx):
    def f(x_ref, idx):
        a = x_ref[idx]
        b = x_ref[idx, 1]
        x_ref[idx, 2] = jnp.arange(3.0) + 100.0
        x_ref[idx] += jnp.ones((3, 5))
        return a, b

    check(
        f,
        ref((4, 5)),
        arr((3,), jnp.int32),
        args=[np.zeros((4, 5), np.float32), np.array(idx, np.int32)],
    )


def test_array_indices_around_a_slice_move_to_the_front():
    def f(x_ref, idx):
        a = x_ref[idx, :, idx]
        x_ref[idx, 1:3, idx] = jnp.zeros((2, 2))
        return a

    check(
        f,
        ref((3, 4, 3)),
        arr((2,), jnp.int32),
        args=[np.arange(36.0, dtype=np.float32).reshape(3, 4, 3), np.array([2, -1], np.int32)],
    )


def test_two_dimensional_index_arrays():
    def f(x_ref, idx):
        x_ref[idx, 0] = x_ref[idx, 1] * 2.0
        return x_ref[:, idx]

    check(
        f,
        ref((3, 3)),
        arr((2, 2), jnp.int32),
        args=[
            np.arange(9.0, dtype=np.float32).reshape(3, 3),
            np.array([[0, 2], [1, -1]], np.int32),
        ],
    )


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32, jnp.bool_])
def test_dtypes(dtype):
    def f(x_ref, i):
        a = x_ref[i]
        x_ref[0] = x_ref[1]
        x_ref[pl.ds(i, 2)] = jnp.full((2, 3), a[0], dtype)
        return a

    check(f, ref((4, 3), dtype), I32)


def test_zero_dimensional_refs():
    def f(x_ref, n_ref):
        x_ref[...] = x_ref[...] * 2.0
        n_ref[...] += 1
        return x_ref[...] + n_ref[...].astype(F32)

    check(f, ref((), F32), ref((), jnp.int32))


def test_addupdate_with_slices_and_arrays():
    def f(x_ref, idx, i):
        x_ref[pl.ds(i, 2), 1:] += jnp.ones((2, 3))
        x_ref[idx, 0] += 5.0
        x_ref[...] += 1.0

    check(
        f,
        ref((4, 4)),
        arr((3,), jnp.int32),
        I32,
        args=[np.zeros((4, 4), np.float32), np.array([0, 0, -1], np.int32), np.int32(3)],
    )


def test_unused_swap_result_and_used_one():
    def f(x_ref):
        old = x_ref.swap(jnp.ones((3,)))
        x_ref[0] = 7.0
        return old

    check(f, ref((3,)))


# --- views -----------------------------------------------------------------------------------


@pytest.mark.parametrize("i", [-3, 0, 1, 5])
def test_chained_at_views_with_dynamic_indices(i):
    def f(x_ref, i):
        view = x_ref.at[pl.ds(i, 2)].at[1]
        a = view[1:3]
        view[pl.ds(i, 2)] = jnp.array([8.0, 9.0])
        return a, x_ref.at[i][2]

    check(f, ref((4, 5)), I32, args=[np.arange(20.0, dtype=np.float32).reshape(4, 5), np.int32(i)])


def test_reshape_and_bitcast_views_read():
    def f(x_ref):
        a = x_ref.reshape(3, 4)[1]
        b = x_ref.bitcast(jnp.int32)[0, 2:]
        return a, b

    check(f, ref((2, 6)))


def test_writes_through_reshape_bitcast_and_transpose_views():
    # upstream's discharge rejects writes through these views; minipallas gives them their
    # meaning (writes land in the underlying buffer), checked against numpy
    def f(x_ref):
        x_ref.reshape(3, 4)[1] = jnp.full((4,), 5.0)
        x_ref.bitcast(jnp.int32)[0, 0] = jnp.int32(1)
        x_ref.T[2] = jnp.array([7.0, 8.0])
        return x_ref.T[1:3]

    import jax

    fn = from_jaxpr(jax.make_jaxpr(f)(ref((2, 6))))
    x = np.arange(12.0, dtype=np.float32).reshape(2, 6)
    (result, final) = interpreted(fn, [x])
    want = x.copy()
    want.reshape(3, 4)[1] = 5.0
    want.view(np.int32)[0, 0] = 1
    want.T[2] = [7.0, 8.0]
    np.testing.assert_array_equal(final, want)
    np.testing.assert_array_equal(result, want.T[1:3])
    compiled = minipallas.compile(fn)(x)
    np.testing.assert_array_equal(compiled[1], want)


def test_transpose_view_read_matches_a_transposed_read():
    import jax

    def viewed(x_ref):
        return x_ref.T[1:3, 0]

    def plain(x_ref):
        return x_ref[0, 1:3]

    fn = from_jaxpr(jax.make_jaxpr(viewed)(ref((4, 4))))
    assert "ref.transpose" in str(fn)
    x = sample(ref((4, 4)), np.random.default_rng(1))
    want = check(plain, ref((4, 4)), args=[x])
    np.testing.assert_array_equal(interpreted(fn, [x])[0], interpreted(want, [x])[0])


def test_a_view_with_an_integer_array_index_is_an_error():
    import jax

    def f(x_ref, idx):
        return x_ref.at[idx][0]

    with pytest.raises(minipallas.MiniPallasError, match="integer-array index"):
        from_jaxpr(jax.make_jaxpr(f)(ref((4, 3)), arr((2,), jnp.int32)))


@pytest.mark.parametrize(
    "view",
    [
        lambda r: r.bitcast(jnp.int16),
        lambda r: r.bitcast(jnp.bfloat16)[2:6],
        lambda r: r.at[2:6].bitcast(jnp.int8)[:, 1:],
        lambda r: r.reshape(4, 8).bitcast(jnp.int16).at[1:5][1],
        lambda r: r.bitcast(jnp.int16).reshape(32, 2)[3:9],
        lambda r: r.bitcast(jnp.int16).bitcast(jnp.uint8).at[4:12],
    ],
)
def test_reads_through_bitcast_views_that_change_width_agree(view):
    """Upstream's TPU rule: the second-minor dim scales by the width ratio (rows ``2i`` and
    ``2i + 1`` of an int16 view are the low and high halves of row ``i``)."""

    def f(x_ref):
        return view(x_ref)[...]

    fn = check(f, ref((8, 4), jnp.int32))
    assert "ref.bitcast" in str(fn)


def test_writes_through_a_narrowing_bitcast_view_land_in_the_halves():
    """Upstream's discharge rejects writes through a bitcast view; minipallas gives them their
    meaning (checked against numpy's packing)."""
    import jax

    def f(x_ref):
        x_ref.bitcast(jnp.int16)[1] = jnp.full((4,), 7, jnp.int16)
        x_ref.at[2:4].bitcast(jnp.int8)[3, 1:3] = jnp.array([-1, 5], jnp.int8)

    fn = from_jaxpr(jax.make_jaxpr(f)(ref((4, 4), jnp.int32)))
    x = np.arange(16, dtype=np.int32).reshape(4, 4) * 0x01010101
    want = x.copy()
    want.view(np.int16).reshape(4, 4, 2)[0, :, 1] = 7  # row 1 of the view: row 0's high halves
    want[2:4].view(np.int8).reshape(2, 4, 4)[0, 1:3, 3] = [-1, 5]  # view row 3: row 0, byte 3
    (final,) = interpreted(fn, [x])
    np.testing.assert_array_equal(final, want)
    (compiled,) = minipallas.compile(fn)(x)
    np.testing.assert_array_equal(compiled, want)


# --- run_state -------------------------------------------------------------------------------


def test_run_state_allocates_initializes_and_returns_final_values():
    def f(x, y):
        def body(refs):
            a, b = refs
            a[0] = b[1] * 2.0
            b[...] += a[...]

        return state_discharge.run_state(body)((x, y))

    fn = check(f, arr((3,)), arr((3,)))
    assert [op.name for op in fn.body.ops].count("run_scoped") == 1


def test_nested_run_state_closing_over_an_outer_ref_works_on_that_ref():
    def f(x, n):
        def outer(refs):
            a_ref, b_ref = refs

            def inner(c_ref):
                c_ref[...] = a_ref[...] + 1
                a_ref[...] = c_ref[...] * 2

            b_ref[...] = state_discharge.run_state(inner)(b_ref[...])

        return state_discharge.run_state(outer)((x, n))

    fn = check(f, I32, I32, args=[np.int32(3), np.int32(-5)])
    inner = fn.body.ops[-1].regions[0].ops
    (nested,) = [op for op in inner if op.name == "run_scoped"]
    assert len(nested.regions[0].params) == 3  # one allocation, the outer ref, the value


def test_run_state_on_a_ref_parameter_and_inside_a_loop():
    def f(x_ref):
        def body(i, carry):
            def inner(acc_ref):
                x_ref[i] = x_ref[i] * 2.0 + acc_ref[...]
                acc_ref[...] += x_ref[i]

            return state_discharge.run_state(inner)(carry)

        return jax.lax.fori_loop(0, 3, body, 1.0)

    check(f, ref((4,)))


@pytest.mark.parametrize(
    "view",
    [
        lambda r: r.bitcast(jnp.int32),
        lambda r: r.bitcast(jnp.float32)[1:3],
        lambda r: r.at[2:6].bitcast(jnp.int32)[:, 1:],
        lambda r: r.bitcast(jnp.int32).reshape(2, 2, 4).at[1][0],
        lambda r: r.bitcast(jnp.int32).bitcast(jnp.uint32).at[1:3],
    ],
)
def test_reads_through_widening_bitcast_views_agree(view):
    """A wide element of an int16 ref seen as int32 joins rows ``2i`` (low half) and
    ``2i + 1``: the interpreter's view lists both pieces of each element."""

    def f(x_ref):
        return view(x_ref)[...]

    check(f, ref((8, 4), jnp.int16))


def test_writes_through_a_widening_bitcast_view_land_in_both_rows():
    import jax

    def f(x_ref):
        x_ref.bitcast(jnp.int32)[1, 1:3] = jnp.array([0x00050007, -1], jnp.int32)
        x_ref.at[4:8].bitcast(jnp.int32)[0] += jnp.int32(0x10001)

    fn = from_jaxpr(jax.make_jaxpr(f)(ref((8, 4), jnp.int16)))
    x = np.arange(32, dtype=np.int16).reshape(8, 4)
    want = x.copy()
    want[2:4, 1:3] = [[7, -1], [5, -1]]  # row 1 of the view: rows 2 (low) and 3 (high)
    want[4:6] += 1
    (final,) = interpreted(fn, [x])
    np.testing.assert_array_equal(final, want)
    (compiled,) = minipallas.compile(fn)(x)
    np.testing.assert_array_equal(compiled, want)


def test_a_widening_view_of_a_joined_view_narrowed_again_is_refused_with_a_fix():
    import jax

    def f(x_ref):
        return x_ref.bitcast(jnp.int32).bitcast(jnp.int16)[...]

    fn = from_jaxpr(jax.make_jaxpr(f)(ref((8, 4), jnp.int16)))
    with pytest.raises(minipallas.MiniPallasError, match="joined narrower elements") as info:
        interpreted(fn, [np.zeros((8, 4), np.int16)])
    assert "minipallas.tpu.bitcast" in str(info.value)
    assert minipallas.compile(fn)(np.ones((8, 4), np.int16))[0].tolist() == [[1] * 4] * 8
