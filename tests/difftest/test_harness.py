"""The harness and the classifier: comparisons, reports, and each kind of finding."""

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import minipallas as mp
from minipallas.tools.difftest import KNOWN, Case, Disagreement, check, compare, ref, run
from minipallas.tools.difftest.classify import Finding, recognize_crash, unmask_loads
from minipallas.tools.difftest.divergences import (
    while_cond_reads_written_ref,
    while_cond_writes_ref,
)

F32 = np.float32


def add_one(r, x):
    r[0] = r[0] + x
    return r[1]


ADD_ONE_ARGS = (ref(np.arange(3, dtype=F32)), np.float32(2.0))


def test_agreeing_case_reports_every_way():
    report = check(Case("add_one", add_one, ADD_ONE_ARGS))
    assert report.ok and report.expected and report.difference is None
    assert set(report.outcomes) == {"upstream", "interpret", "discharge", "compile"}
    assert report.labels == ["result 0", "final value of ref 0"]
    np.testing.assert_array_equal(report.outcomes["upstream"].outputs[1], [2.0, 1.0, 2.0])


def test_inputs_are_not_mutated():
    x = np.arange(3, dtype=F32)
    run(Case("add_one", add_one, (ref(x), np.float32(2.0))))
    np.testing.assert_array_equal(x, [0.0, 1.0, 2.0])


def test_report_text_prints_both_programs():
    text = run(Case("add_one", add_one, ADD_ONE_ARGS)).text()
    assert "--- upstream jaxpr ---" in text and "Ref{f32[3]}" in text
    assert "--- minipallas IR (imported) ---" in text and "func @add_one" in text


def test_upstream_crash_is_classified_and_check_raises():
    case = Case("strided", lambda r: r[0, ::2], (ref(np.zeros((3, 4), F32)),))
    with pytest.raises(Disagreement) as info:
        check(case)
    report = info.value.report
    assert report.finding == Finding(
        "upstream-crash", "strided-slice-with-int-index", report.finding.detail
    )
    assert report.outcomes["upstream"].stage == "discharge"
    assert report.outcomes["interpret"].ok  # minipallas still runs it
    assert "strided-slice-with-int-index" in str(info.value)


def test_unrecognized_upstream_crash_names_its_stage():
    def bad(r):
        raise RuntimeError("not a jax defect")

    finding = run(Case("bad", bad, (ref(np.zeros(2, F32)),))).finding
    assert (finding.kind, finding.name) == ("upstream-crash", "unrecognized trace crash")


def counting_while(r):
    def cond(c):
        return (r[0] < 3) & (c < 5)

    def body(c):
        r[0] = r[0] + 1
        return c + 1

    return lax.while_loop(cond, body, np.int32(0))


def test_while_divergence_is_recognized_from_the_jaxpr():
    report = run(Case("w", counting_while, (ref(np.zeros(1, np.int32)),)))
    assert report.finding.kind == "upstream-divergence"
    assert report.difference.way == "upstream" and report.difference.label == "result 0"
    assert while_cond_reads_written_ref(report.jaxpr)
    assert int(report.outcomes["interpret"].outputs[0]) == 3  # sequential: 3 trips
    assert int(report.outcomes["upstream"].outputs[0]) == 5


def test_while_reading_an_unwritten_ref_is_not_the_pattern():
    import jax

    from minipallas.lowering.compat.jax_private import core as jax_core
    from minipallas.lowering.compat.jax_private import state_types

    def f(r, o):
        def body(c):
            o[0] = o[0] + 1
            return c + 1

        return lax.while_loop(lambda c: r[0] > c, body, np.int32(0))

    avals = [state_types.AbstractRef(jax_core.ShapedArray((1,), np.int32)) for _ in range(2)]
    assert not while_cond_reads_written_ref(jax.make_jaxpr(f)(*avals))


def test_wrong_reference_is_a_minipallas_bug():
    wrong = mp.trace(lambda r, x: r[2], mp.RefType((3,), "float32"), mp.ArrayType((), "float32"))
    report = run(Case("add_one", add_one, ADD_ONE_ARGS, reference=wrong))
    assert report.finding.kind == "minipallas-bug"
    assert report.finding.name == "reference disagrees with upstream and import"


def test_masked_load_fill_is_explained_by_unmasking():
    ref_t, mask_t = mp.RefType((4,), "float32"), mp.ArrayType((4,), "bool")
    fn = mp.trace(lambda r, m: mp.load(r, (slice(None),), mask=m), ref_t, mask_t)
    unmasked = unmask_loads(fn)
    (load,) = [op for op in unmasked.walk() if op.name == "load"]
    assert not load.attrs["masked"] and len(load.operands) == 1
    assert any(op.attrs.get("masked") for op in fn.walk())  # the original is untouched


def test_known_crash_needs_the_right_stage():
    error = ValueError("Invalid type of idxer: TypedInt")
    assert recognize_crash("discharge", error) == "strided-slice-with-int-index"
    assert recognize_crash("eval", error) == "strided-slice-with-int-index"
    assert recognize_crash("trace", error) is None


def test_every_known_entry_is_complete():
    for name, known in KNOWN.items():
        assert known.reason and known.repro, name
        assert (known.kind == "upstream-crash") == bool(known.stages), name


@pytest.mark.parametrize(
    "want, got, ulps, same",
    [
        (np.array([1.0, np.nan], F32), np.array([1.0, -np.nan], F32), 0, True),
        (np.array([0.0], F32), np.array([-0.0], F32), 0, False),
        (np.array([1.0], F32), np.array([np.nextafter(F32(1), F32(2))]), 0, False),
        (np.array([1.0], F32), np.array([np.nextafter(F32(1), F32(2))]), 1, True),
        (np.array(1.0, F32), np.array(1.0, F32), 0, True),  # 0-d
        (np.array([1, 2], np.int32), np.array([1, 3], np.int32), 5, False),
        (np.array([1.0], ml_dtypes.bfloat16), np.array([1.0], F32), 0, False),  # dtype
        (np.array([True]), np.array([True]), 0, True),
    ],
)
def test_compare(want, got, ulps, same):
    assert (compare(want, got, ulps) is None) == same


def test_compare_names_the_first_difference():
    message = compare(np.array([[1, 2], [3, 4]]), np.array([[1, 2], [3, 5]]))
    assert message.startswith("at [1, 1]") and "1 of 4 elements differ" in message


def test_bf16_and_bool_inputs_round_trip():
    def f(r, m):
        r[...] = jnp.where(m, r[...], r[...] * 2)
        return jnp.sum(r[...].astype(F32))

    x = np.arange(4).astype(ml_dtypes.bfloat16)
    assert check(Case("bf16", f, (ref(x), np.array([True, False, True, False])))).ok


@pytest.mark.parametrize("args, upstream, sequential", [((0, 5, 2), 10, 12), ((1, 2, 3), 7, 10)])
def test_upstreams_while_with_state_in_cond_is_a_documented_divergence(args, upstream, sequential):
    from minipallas.tools.corpora.difftest_cases import while_with_state_in_cond

    report = run(Case("w", while_with_state_in_cond, tuple(np.int32(a) for a in args)))
    assert (report.finding.kind, report.finding.name) == (
        "upstream-divergence",
        "while-cond-writes-ref",
    )
    assert report.finding.reason == KNOWN["while-cond-writes-ref"].reason
    assert "test_while_with_state_in_cond" in KNOWN["while-cond-writes-ref"].reason
    assert int(report.outcomes["upstream"].outputs[0]) == upstream  # what upstream's test expects
    for way in ("interpret", "discharge", "compile"):  # sequential: every evaluation's writes
        assert int(report.outcomes[way].outputs[0]) == sequential, way
    assert while_cond_writes_ref(report.jaxpr) and not while_cond_reads_written_ref(report.jaxpr)


def test_a_condition_that_only_accumulates_loses_every_write_upstream():
    from minipallas.lowering.compat.jax_private import state_primitives

    def f(r):
        def cond(i):
            state_primitives.ref_addupdate(r, (), np.int32(2))
            return i < 5

        return lax.while_loop(cond, lambda i: i + 1, np.int32(0))

    report = run(Case("acc", f, (ref(np.zeros((), np.int32)),)))
    assert str(report.finding) == "upstream-divergence (while-cond-writes-ref)"
    assert int(report.outcomes["upstream"].outputs[1]) == 0
    assert int(report.outcomes["interpret"].outputs[1]) == 12


def test_a_ref_written_by_condition_and_body_is_upstreams_known_crash():
    from minipallas.tools.corpora.difftest_cases import while_ref_written_by_cond_and_body

    report = run(Case("both", while_ref_written_by_cond_and_body, (ref(np.zeros((), np.int32)),)))
    assert str(report.finding) == "upstream-crash (while-ref-written-by-cond-and-body)"
    assert int(report.outcomes["interpret"].outputs[1]) == 7  # 4 conditions + 3 bodies
