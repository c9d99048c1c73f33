"""The front end's out-of-bounds and broadcast errors say how to fix the code (issue 14)."""

from frontend_helpers import arr, raises_at, ref

import minipallas as mp
import minipallas.numpy as jnp


def test_an_out_of_bounds_static_index_gives_the_valid_range():
    def f(r):
        return r[10]

    with raises_at(f.__code__.co_firstlineno + 1, match="index 10 is out of bounds") as info:
        mp.trace(f, ref((8,)))
    assert info.value.fix.startswith("use an index from -8 to 7")


def test_an_out_of_bounds_ds_says_where_it_may_start():
    def f(r):
        return r[mp.ds(6, 4)]

    with raises_at(f.__code__.co_firstlineno + 1, match=r"ds\(6, 4, 1\) is out of bounds") as info:
        mp.trace(f, ref((8,)))
    assert info.value.fix == "start at most 4, or take fewer elements (size)"


def test_a_broadcast_mismatch_says_how_shapes_line_up():
    def f(x, y):
        return x + y

    with raises_at(f.__code__.co_firstlineno + 1, match=r"shapes \(4, 3\), \(4,\)") as info:
        mp.trace(f, arr((4, 3)), arr((4,)))
    assert "x[:, None]" in info.value.fix


def test_broadcast_to_a_smaller_shape_has_the_fix_too():
    def f(x):
        return jnp.broadcast_to(x, (3,))

    with raises_at(f.__code__.co_firstlineno + 1, match="cannot broadcast") as info:
        mp.trace(f, arr((4,)))
    assert "equal or one of them 1" in info.value.fix
