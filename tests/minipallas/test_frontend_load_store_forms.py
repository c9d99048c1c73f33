"""``load``/``store`` in both Pallas spellings: the old ``load(ref, idx, mask=, other=)`` /
``store(ref, idx, value, mask=)`` and jax 0.10.2's ``load(ref.at[idx], mask=, other=)`` /
``store(ref.at[idx], value, mask=)`` (``plgpu.load``/``plgpu.store``). A kernel written either
way computes the same thing, interpreted and compiled, and discharges to the same program."""

import numpy as np
import pytest
from frontend_helpers import arr, find, raises_at, ref, run, same, traced

import minipallas as mp
import minipallas.numpy as jnp


def old_form(x, o, i):
    mask = jnp.arange(8) < 5
    a = mp.load(x, (mp.ds(i, 8), 1), mask=mask, other=-1.0)
    b = mp.load(x, (slice(0, 8), 2))
    mp.store(o, (1, slice(None)), a * 2.0 + b, mask=mask)
    mp.store(o, 0, b)


def new_form(x, o, i):
    mask = jnp.arange(8) < 5
    a = mp.load(x.at[mp.ds(i, 8), 1], mask=mask, other=-1.0)
    b = mp.load(x.at[:8, 2])
    mp.store(o.at[1, :], a * 2.0 + b, mask=mask)
    mp.store(o.at[0], b)


TYPES = (ref((16, 3)), ref((2, 8)), arr((), "int32"))
X = np.arange(48, dtype=np.float32).reshape(16, 3)


def results(fn, i):
    o = np.full((2, 8), 7, np.float32)
    run(fn, X, o, np.int32(i))
    compiled = mp.compile(fn)(X, np.full((2, 8), 7, np.float32), np.int32(i))
    return o, compiled[-1]


@pytest.mark.parametrize("i", [0, 3, 8])
def test_both_forms_give_the_same_results(i):
    old, new = traced(old_form, *TYPES), traced(new_form, *TYPES)
    (old_interp, old_compiled), (new_interp, new_compiled) = results(old, i), results(new, i)
    same(new_interp, old_interp)
    same(new_compiled, old_compiled)
    same(old_compiled, old_interp)
    mask = np.arange(8) < 5
    expected_row1 = np.where(mask, X[i : i + 8, 1] * 2 + X[:8, 2], 7).astype(np.float32)
    same(old_interp[1], expected_row1)
    same(old_interp[0], X[:8, 2])


def test_the_new_form_loads_and_stores_through_views():
    fn = traced(new_form, *TYPES)
    assert len(find(fn, "ref.at")) == 4
    assert [op.attrs["masked"] for op in find(fn, "load")] == [True, False]
    assert [op.attrs["masked"] for op in find(fn, "store")] == [True, False]


def test_both_forms_discharge_to_the_same_program():
    old, new = traced(old_form, *TYPES), traced(new_form, *TYPES)
    clean = lambda fn: mp.count_ops(mp.cleanup(mp.discharge(fn)))  # noqa: E731
    assert clean(old) == clean(new)


def test_load_and_store_of_a_whole_ref():
    def f(x, o):
        mp.store(o, mp.load(x) + 1.0)
        mp.store(o, None, mp.load(o, None) * 2.0)

    fn = traced(f, ref((4,)), ref((4,)))
    o = np.zeros(4, np.float32)
    run(fn, np.arange(4, dtype=np.float32), o)
    same(o, (np.arange(4, dtype=np.float32) + 1) * 2)


def test_store_with_too_many_arguments_shows_both_forms():
    def f(o):
        mp.store(o, 0, 1.0, 2.0)

    with raises_at(f.__code__.co_firstlineno + 1, match="positional arguments") as info:
        mp.trace(f, ref((4,)))
    assert "ref.at[idx]" in info.value.fix
