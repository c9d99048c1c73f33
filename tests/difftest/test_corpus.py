"""The corpus, each program checked three ways (interpret, compile, upstream) bit for bit.

Known upstream defects are strict xfails carrying the defect's reason; known semantic
differences must be classified as such. ``test_known_findings_are_recognized`` checks that the
xfails fail for their stated reason and no other.
"""

import pytest

from minipallas.tools.corpora.difftest_cases import CASES
from minipallas.tools.difftest import KNOWN, Disagreement, check, run

UPSTREAM_DEFECTS = ("upstream-crash", "upstream-divergence")


def _is_defect(case):
    return case.expect is not None and KNOWN[case.expect].kind in UPSTREAM_DEFECTS


def _param(case):
    marks = ()
    if _is_defect(case):
        known = KNOWN[case.expect]
        reason = f"jax 0.10.2 {known.kind} ({case.expect}): {known.reason}"
        marks = (pytest.mark.xfail(strict=True, raises=Disagreement, reason=reason),)
    return pytest.param(case, id=case.name, marks=marks)


def test_corpus_is_large_enough():
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [_param(c) for c in CASES if c.expect is None or _is_defect(c)])
def test_three_ways_agree(case):
    report = check(case)
    for way in ("upstream", "interpret", "compile"):
        assert report.outcomes[way].ok, way
    assert report.labels  # at least one output compared


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.name) for c in CASES if c.expect is not None]
)
def test_known_findings_are_recognized(case):
    report = run(case)
    assert report.finding.name == case.expect, report.text()
    assert report.finding.kind == KNOWN[case.expect].kind


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.name) for c in CASES if c.reference is not None and c.expect is not None],
)
def test_semantic_differences_leave_minipallas_in_agreement(case):
    """Against a minipallas reference, only the reference differs: upstream and the import
    (which keeps upstream's meaning), interpreted and compiled, agree."""
    from minipallas.tools.difftest.report import agree

    report = run(case)
    assert report.finding.kind == "semantic-difference"
    for way in ("upstream", "discharge", "compile"):
        assert agree(report, way, "interpret"), way
    assert not agree(report, "reference", "interpret")


def test_every_known_upstream_defect_has_a_case():
    expected = {c.expect for c in CASES}
    defects = {name for name, k in KNOWN.items() if k.kind in UPSTREAM_DEFECTS}
    assert defects <= expected, defects - expected
