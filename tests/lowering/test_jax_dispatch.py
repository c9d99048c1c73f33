"""A numpy call runs the emitted module behind ``jax.jit``'s dispatch (``lowering/jax_dispatch``):
the same bits as the same module compiled and run through jaxlib's Python bindings, on every
suite kernel; a ``debug_print``'s callbacks keep the bindings; results are writable and never
share an argument's memory."""

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
from suite import KERNELS  # noqa: E402

import minipallas  # noqa: E402
from minipallas.ir import dtypes  # noqa: E402
from minipallas.lowering import jaxlib_shim  # noqa: E402


@pytest.mark.parametrize("case", KERNELS, ids=lambda c: c.name)
def test_a_kernel_gives_the_bits_jaxlibs_bindings_give(case):
    args = case.inputs()
    call = case.minipallas()
    compiled = call.compiled(*args)
    assert compiled.jitted is not None
    text = compiled.lowered.as_text(debug_info=False)
    expected = jaxlib_shim.cpu_execute(jaxlib_shim.cpu_compile(text), args)
    got = compiled(*args)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape and g.tobytes() == e.tobytes()


def test_jax_carries_every_minipallas_dtype_unchanged():
    """Else ``jax.jit`` would convert such arguments (as it narrows 64-bit ones without x64)."""
    for name in dtypes.SHORT:
        numpy_dtype = dtypes.to_numpy(name)
        assert jax.dtypes.canonicalize_dtype(numpy_dtype) == numpy_dtype


def test_a_debug_print_keeps_jaxlibs_bindings(capfd):
    fn = minipallas.parse(
        """func @show(%x: f32[2]) -> (f32[2]) {
  debug_print %x, fmt "x={}", names ("")
  return %x
}"""
    )
    compiled = minipallas.compile(fn)
    assert compiled.jitted is None
    (y,) = compiled(np.array([1.5, -2.0], np.float32))
    assert y.tolist() == [1.5, -2.0] and "x=[ 1.5 -2. ]" in capfd.readouterr().out


def test_results_are_writable_and_never_an_arguments_memory():
    fn = minipallas.parse(
        """func @same(%x: f32[4096]) -> (f32[4096], f32[4096]) {
  %y = add %x, %x : f32[4096]
  return %x, %y
}"""
    )
    compiled = minipallas.compile(fn)
    assert compiled.jitted is not None
    x = np.arange(4096, dtype=np.float32)
    same, doubled = compiled(x)
    assert not np.shares_memory(same, x) and not np.shares_memory(doubled, x)
    same[:] = -1  # writing a result leaves the argument and the other result alone
    np.testing.assert_array_equal(x, np.arange(4096, dtype=np.float32))
    np.testing.assert_array_equal(doubled, 2 * np.arange(4096, dtype=np.float32))


@pytest.mark.parametrize("poll", [0.0, 1.0])
def test_a_call_polls_for_its_results_then_blocks(monkeypatch, poll):
    """Within the poll every result is computed on return; with no poll at all the values
    are still right (converting a result blocks until it is)."""
    from minipallas.lowering import jax_dispatch

    monkeypatch.setattr(jax_dispatch, "POLL_SECONDS", poll)
    fn = minipallas.parse(
        """func @twice(%x: f32[1024]) -> (f32[1024], f32[1024]) {
  %y = add %x, %x : f32[1024]
  %z = mul %y, %x : f32[1024]
  return %y, %z
}"""
    )
    compiled = minipallas.compile(fn)
    x = np.arange(1024, dtype=np.float32)
    results = compiled.jitted(x)
    assert jax_dispatch.ready(results) is results
    if poll:
        assert all(r.is_ready() for r in results)
    y, z = compiled(x)
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(z, 2 * x * x)
