"""A numpy call runs the emitted module behind ``jax.jit``'s dispatch
(``lowering/runtime/jax_dispatch``): the same bits as the same module compiled and run through
jaxlib's Python bindings, on every suite kernel; a ``debug_print``'s callbacks keep the
bindings; results are writable and never share an argument's memory."""

import jax
import numpy as np
import pytest

import minipallas
from minipallas.ir import dtypes
from minipallas.lowering.runtime import xla_cpu
from minipallas.tools.corpora.suite import KERNELS


@pytest.mark.parametrize("case", KERNELS, ids=lambda c: c.name)
def test_a_kernel_gives_the_bits_jaxlibs_bindings_give(case):
    args = case.inputs()
    call = case.minipallas()
    compiled = call.compiled(*args)
    assert compiled.jitted is not None
    text = compiled.lowered.as_text(debug_info=False)
    expected = xla_cpu.cpu_execute(xla_cpu.cpu_compile(text), args)
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


class _Result:
    """A result that is computed after ``polls`` polls, or by blocking; logs what it saw."""

    def __init__(self, polls: int, log: list[str]) -> None:
        self.polls, self.log = polls, log

    def is_ready(self) -> bool:
        self.log.append("poll")
        self.polls -= 1
        return self.polls < 0

    def block_until_ready(self) -> None:
        self.log.append("block")


class _Clock:
    """A clock that advances ``step`` seconds at each reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_wait_polls_for_about_as_long_as_the_last_one_took():
    from minipallas.lowering.runtime import jax_dispatch

    log: list[str] = []
    wait = jax_dispatch.Wait(clock=_Clock(5e-6))
    assert wait.poll == jax_dispatch.FIRST_POLL
    results = [_Result(2, log), _Result(0, log)]
    assert wait(results) is results
    assert log == ["poll"] * 4  # computed within the first poll: never blocked
    # the clock read twice while polling, so the wait ended 3 steps after it began: twice that
    assert wait.poll == pytest.approx(2 * 3 * 5e-6)

    log.clear()  # a result slower than the poll: blocked, every result waited for
    wait(results := [_Result(10**6, log), _Result(10**6, log)])
    assert log[-2:] == ["block", "block"] and "block" not in log[:-2]


def test_a_wait_longer_than_the_cap_blocks_at_once_next_time():
    from minipallas.lowering.runtime import jax_dispatch

    log: list[str] = []
    wait = jax_dispatch.Wait(clock=_Clock(jax_dispatch.POLL_CAP))
    wait([_Result(10**6, log)])
    assert wait.poll == 0.0
    log.clear()
    wait([_Result(10**6, log)])
    assert log == ["poll", "block"]  # one look, then asleep: no core held by a poll


def test_a_numpy_call_learns_its_wait_and_gives_the_right_values():
    fn = minipallas.parse(
        """func @twice(%x: f32[1024]) -> (f32[1024], f32[1024]) {
  %y = add %x, %x : f32[1024]
  %z = mul %y, %x : f32[1024]
  return %y, %z
}"""
    )
    compiled = minipallas.compile(fn)
    x = np.arange(1024, dtype=np.float32)
    for _ in range(3):
        y, z = compiled(x)
        np.testing.assert_array_equal(y, 2 * x)
        np.testing.assert_array_equal(z, 2 * x * x)
    from minipallas.lowering.runtime import jax_dispatch

    assert isinstance(compiled.wait, jax_dispatch.Wait)
    assert 0.0 <= compiled.wait.poll <= jax_dispatch.POLL_CAP
