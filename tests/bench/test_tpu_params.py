"""The parameter corpus's chip script (``bench/chip/tpu_params.py``) on the CPU: it runs each case
both ways (upstream interpreted, minipallas's import compiled), judges them against the case's
expectation and its float64 reference, and loses nothing but the case that kills its worker."""

import json

import numpy as np

from bench.chip import tpu_params
from bench.chip.tpu_params import BY_NAME, Refused


def test_the_script_runs_each_case_both_ways_and_isolates_a_halting_one(tmp_path, capsys):
    out = tmp_path / "params.json"
    names = "exp,dot_precision_highest,roll_lanes"
    status = tpu_params.main(["--cpu", "--cases", names, "--simulate-halt", "dot_precision_highest",
                              "--out", str(out)])  # fmt: skip
    report = json.loads(out.read_text())
    rows = {r["name"]: r for r in report["rows"]}
    assert [r["name"] for r in report["rows"]] == ["dot_precision_highest", "roll_lanes", "exp"]
    assert rows["dot_precision_highest"]["verdict"] == "halted"
    assert "exit 134" in rows["dot_precision_highest"]["detail"]
    for name in ("exp", "roll_lanes"):
        assert rows[name]["verdict"] == "same-bits" and rows[name]["ok"]
        assert rows[name]["upstream_rel_err"] == rows[name]["minipallas_rel_err"] < 1e-6
    assert report["as_expected"] == 2 and status == 1
    table = capsys.readouterr().out
    assert "| exp | exp (no parameter) | runs | runs | same-bits |" in table
    assert "halted (expected same-bits)" in table


def test_a_verdict_is_judged_against_what_the_case_expects():
    """On the chip: a refusal counts only with upstream's message, in both for both-refuse."""
    x = (np.float32([1.0, 2.0]),)
    same = BY_NAME["exp"]
    assert tpu_params.outcome(x, x) == "same-bits"
    assert tpu_params.as_expected(same, x, x, "same-bits")
    other = (np.float32([1.0, 2.5]),)
    assert tpu_params.outcome(x, other) == "other-bits"
    refuse = BY_NAME["exp_accuracy"]
    theirs = Refused("NotImplementedError: Not implemented: accuracy")
    assert tpu_params.outcome(theirs, x) == "beyond-upstream"
    assert not tpu_params.as_expected(refuse, theirs, x, "beyond-upstream")
    assert tpu_params.as_expected(refuse, theirs, theirs, "both-refuse")
    assert not tpu_params.as_expected(refuse, theirs, Refused("ValueError: other"), "both-refuse")
    beyond = BY_NAME["select_n_int32"]
    upstream = Refused("NotImplementedError: select_n only supported with <= 2 arguments")
    assert tpu_params.as_expected(beyond, upstream, x, "beyond-upstream")
    assert tpu_params.relative_error((np.float32([1.0, 3.0]),), (np.float64([1.0, 4.0]),)) == 0.25
