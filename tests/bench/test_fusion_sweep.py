"""``fusion_sweep`` runs on the CPU (``--cpu``): each ``--options`` set is a row of its own,
every factor's bits compared with the unfused run's (a ``DIFF`` would say one differs)."""

from bench.benchmarks import fusion_sweep


def test_each_options_set_is_a_row_with_the_unfused_bits(capsys):
    values = "min_steps=1,discharge_carried=true,max_carried=0"
    status = fusion_sweep.main(["--cpu", "--kernels", "flash_attention", "--unrolls", "1,2",
                                "--calls", "1", "--repeat", "1", "--options", values,
                                "--options", "min_steps=1"])  # fmt: skip
    rows = [line for line in capsys.readouterr().out.splitlines() if "K=1:" in line]
    assert status == 0 and len(rows) == 2
    assert values in rows[0] and "min_steps=1 " in rows[1]
    assert all("(2x1)" in row and "DIFF" not in row for row in rows)  # fused 2x2 -> 2x1
