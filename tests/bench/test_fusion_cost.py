"""``bench/chip/fusion_cost.py``, the cost model's calibration run, on the CPU (``--cpu``): each
row runs, keeps the unfused kernel's bits and prints its grid beside the model's time."""

import re

from bench.chip import fusion_cost


def test_fusion_cost_runs_its_rows_on_the_cpu(capsys):
    assert fusion_cost.main(["--cpu", "--calls", "1", "--repeat", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ms per call on cpu") and "0.22 us a step" in lines[0]
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[1]) for r in rows] == list(fusion_cost.CPU_ROWS)
    assert all(re.fullmatch(r"[0-9x]+", r[2]) and r[-1] == "same" for r in rows)
