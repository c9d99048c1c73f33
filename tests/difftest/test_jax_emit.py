"""The emitter: a minipallas program as upstream JAX computes what the program computes."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import minipallas as mp
from minipallas.tools.difftest import EmitError, emit, run, trace
from minipallas.tools.fuzz.upstream import case_for
from minipallas.tools.generate import programs

F32 = "float32"


def emitted_case(fn, seed=0):
    return case_for(fn, seed, fn.name)


def test_emitted_program_traces_to_state_primitives():
    fn = mp.parse(
        """
        func @f(%r: Ref{f32[4,8]}, %i: i32[]) -> (f32[8]) {
          %v = get %r[%i, :] : f32[8]
          %w = ref.at %r[1:3, :] : Ref{f32[2,8]}
          %old = swap %w[0, :], %v : f32[8]
          return %old
        }
        """
    )
    text = str(trace(fn))
    assert "c:i32[] = max b 0:i32[]" in text  # the negative-index guard
    assert "d:f32[8] <- a[c,:]" in text  # get
    assert "a[1:3,:][0,:] <- a[1:3,:][0,:], d" in text  # swap through an at[] view
    report = run(emitted_case(fn))
    assert report.ok, report.text()


def test_negative_and_out_of_range_indices_keep_minipallas_meaning():
    fn = mp.trace(
        lambda r, i, j: (r[i], r[mp.ds(j, 2, 2)]),
        mp.RefType((5,), F32),
        mp.ArrayType((), "int32"),
        mp.ArrayType((), "int32"),
    )
    for i, j in [(-3, -1), (9, 4), (2, 1)]:
        case = emitted_case(fn)
        case.args = (case.args[0], np.int32(i), np.int32(j))
        report = run(case)
        assert report.ok, report.text()


def test_loops_scratch_and_calls():
    def kernel(x, o):
        def body(s):
            s[...] = x[...]

            def step(i, acc):
                s[i] = s[i] * 2.0
                return acc + s[i]

            return mp.fori_loop(0, 4, step, mp.numpy.float32(0.0))

        total = mp.run_scoped(body, mp.RefType((4,), F32))
        o[0] = total
        return total

    fn = mp.trace(kernel, mp.RefType((4,), F32), mp.RefType((2,), F32))
    report = run(emitted_case(fn))
    assert report.ok, report.text()
    assert "run_scoped" in str(report.jaxpr) and "scan" in str(report.jaxpr)


def test_kernel_queries_are_not_emitted():
    fn = mp.parse(
        """
        func @f() -> (i32[]) {
          %p = program_id axis 0 : i32[]
          return %p
        }
        """
    )
    with pytest.raises(EmitError, match="outside a pallas_call"):
        trace(fn)


def test_emit_returns_a_function_named_like_the_program():
    fn = mp.trace(lambda r: r[0], mp.RefType((2,), F32), name="first")
    assert emit(fn).__name__ == "first"


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(programs(transcendental=False, max_stmts=6))
def test_generated_programs_are_never_minipallas_bugs(fn):
    """Generated programs, emitted: whatever upstream does, minipallas's import and the
    generated program agree (compile is checked by the corpus and the fuzzer)."""
    report = run(emitted_case(fn), compile=False)
    assert report.finding.kind != "minipallas-bug", report.text()


@pytest.mark.parametrize("i", [-4, -1, 0, 2, 3, 7])
def test_a_masked_load_and_store_at_a_0d_array_index_keep_minipallas_meaning(i):
    """The upstream fuzzer's program 140 (seed 47467): a masked ``load`` of a ``u16[3,3]`` ref
    at a 0-d integer array equal to 3 on a dimension of 3. Upstream takes a 0-d array as a
    scalar of its padded window (past the end it reads the fill value, 0 for u16), minipallas
    gathers and clamps; the emitted program clamps it first, so the two agree, and a store
    there is dropped on both sides."""
    fn = mp.parse(
        """
        func @f(%r: Ref{u16[3,3]}, %i: i32[]) -> (u16[3]) {
          %m = constant true : bool[3]
          %o = constant 32768 : u16[]
          %v = load %r[:, array(%i)], mask %m, other %o : u16[3]
          %w = constant 7 : u16[3]
          store %r[array(%i), :], %w, mask %m
          return %v
        }
        """
    )
    case = emitted_case(fn)
    case.args = (case.args[0], np.int32(i))
    report = run(case)
    assert report.ok, report.text()
    column = min(max(i, 0), 2)
    (got, final) = report.outcomes["reference"].outputs[:2]
    np.testing.assert_array_equal(got, case.args[0].value[:, column])
    rows_written = (final != case.args[0].value).any(axis=1)
    assert rows_written.sum() <= 1 and (not rows_written.any() or 0 <= i < 3)
