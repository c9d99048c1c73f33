"""``bench/benchmarks/vs_upstream.py`` at a tiny size: one row per size with the imported
program's equation count, both discharged op counts, and (within ``--run-max``) agreeing runs."""

from bench.benchmarks import vs_upstream


def test_rows_for_each_size_and_runs_within_run_max(capsys):
    rows = vs_upstream.main(["--sizes", "40,80", "--run-max", "40", "--seed", "2"])
    out = capsys.readouterr().out
    assert "upstream discharge_state vs minipallas discharge" in out
    assert [r["eqns"] >= n for r, n in zip(rows, (40, 80), strict=True)] == [True, True]
    for r in rows:
        assert 0 < r["cleaned ops"] <= r["discharged ops"]
        assert r["upstream ops"] > r["eqns"]
    assert "mp run" in rows[0] and "mp run" not in rows[1]  # the run results agreed (asserted)
