"""Triton's power-of-2 rule, reported at what the user wrote: the op being lowered (its line)
and the block spec whose block it reads or writes, with a fix that gives the shape rounded up
to powers of 2."""

import sys

import pytest

import minipallas as mp
from minipallas.lowering.gpu.emit import TensorSizeError

F32 = mp.ArrayType((24, 256), "float32")


def lowered_error(kernel, in_spec, out_spec):
    call = mp.pallas_call(kernel, F32, grid=(2, 2), in_specs=[in_spec], out_specs=out_spec)
    with pytest.raises(TensorSizeError) as info:
        call.lower(F32, target="gpu")
    return info.value


def test_a_block_spec_is_named_with_its_shape_line_and_a_fix():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    line = sys._getframe().f_lineno - 2
    spec = mp.BlockSpec((12, 128), lambda i, j: (i, j))
    error = lowered_error(kernel, spec, spec)
    assert "got shape (12, 128): the block of in_specs[0] of kernel 'kernel'" in str(error)
    assert error.op == "get"
    assert (error.loc.file, error.loc.line) == (__file__, line)
    assert "(16, 128) instead of (12, 128)" in error.fix
    assert "^^^" in error.excerpt  # the kernel's IR around the op


def test_the_first_op_that_makes_a_bad_shape_is_named():
    """Writing an (8, 6) output block takes an (8, 6) value: its op fails first."""

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[:8, :6]

    in_spec = mp.BlockSpec((8, 128), lambda i, j: (i, j))
    error = lowered_error(kernel, in_spec, mp.BlockSpec((8, 6), lambda i, j: (i, j)))
    assert "got shape (8, 6): the result of 'get'" in str(error)
    assert "(8, 8) instead of (8, 6)" in error.fix


def test_an_intermediate_array_names_its_op_and_line():
    def kernel(x_ref, o_ref):
        o_ref[:3, :] = x_ref[:3, :] + 1.0

    line = sys._getframe().f_lineno - 2
    spec = mp.BlockSpec((8, 128), lambda i, j: (i, j))
    error = lowered_error(kernel, spec, spec)
    assert "got shape (3, 128): the result of 'get'" in str(error)
    assert error.op == "get"
    assert (error.loc.file, error.loc.line) == (__file__, line)
    assert "(4, 128) instead of (3, 128)" in error.fix and "mask" in error.fix
