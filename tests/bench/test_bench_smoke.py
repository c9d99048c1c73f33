"""The benchmarks run at a tiny size and print the rows they should: one per size, whose op
counts are those of the generated (and discharged, cleaned) programs, and a ratio row."""

import os
import subprocess
import sys

import pytest

import bench
from bench import common
from bench.benchmarks import cleanup_counts, collectives_bench, discharge_bench, ir_bench
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge

SIZES = [150, 300]


def _rows(text, title):
    """The data rows (split into cells) of the table printed after the line starting ``title``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    rows = []
    for line in lines[start + 3 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_ir_bench_prints_one_row_per_size_with_the_generated_op_counts(capsys):
    ir_bench.main(["--sizes", ",".join(map(str, SIZES)), "--seed", "3"])
    out = capsys.readouterr().out
    rows = _rows(out, "generated programs")
    expected = [common.op_count(common.generated(n, 3)) for n in SIZES]
    assert [int(r[0]) for r in rows[:-1]] == expected
    assert all(abs(ops - n) <= n // 5 for ops, n in zip(expected, SIZES, strict=True))
    assert rows[-1][:2] == ["ratio", f"{expected[-1]}/{expected[0]}"]
    assert all(float(cell) > 0 for row in rows[:-1] for cell in row[1:])

    traced = _rows(out, "traced Python kernel")
    assert len(traced) == len(SIZES) + 1
    assert int(traced[0][0]) < int(traced[1][0])


def test_discharge_bench_prints_op_counts_before_and_after(capsys):
    discharge_bench.main(["--sizes", ",".join(map(str, SIZES))])
    rows = _rows(capsys.readouterr().out, "discharge of generated programs")
    assert len(rows) == len(SIZES) + 1 and rows[-1][0] == "ratio"
    for row, n in zip(rows, SIZES, strict=False):
        fn = common.generated(n, 0)
        pure = discharge(fn)
        counts = [common.op_count(f) for f in (fn, pure, cleanup(pure))]
        assert [int(c) for c in row[:3]] == counts


def test_cleanup_counts_compare_the_cleanup_with_and_without_folding(capsys):
    rows = cleanup_counts.main(["--sizes", "300"])
    assert len(rows) == 8 and "op" in capsys.readouterr().out
    assert all(row[4] <= row[3] for row in rows)  # folding never adds ops
    even = next(row for row in rows if row[0].startswith("i % 2"))
    assert even[4] < even[3]


@pytest.mark.parametrize("bad", ["x", "10,y"])
def test_sizes_flag_rejects_non_integers(bad):
    with pytest.raises(SystemExit):
        common.parse_args("bench", ["--sizes", bad])


def test_collectives_bench_times_both_detectors(capsys):
    rows, upstream_rows, pure_rows = collectives_bench.main(["--small", "--repeat", "1"])
    out = capsys.readouterr().out
    assert "multi-program interpreter" in out and "upstream TPU interpret mode" in out
    assert [r[:4] for r in rows] == [[2, 2, 8, 12]]  # 2 programs x 2 rounds x 3 accesses
    assert [r[0] for r in upstream_rows] == [4]
    assert all(float(cell) > 0 for cell in (*rows[0][4:7], *upstream_rows[0][1:4]))
    assert [r[:3] for r in pure_rows] == [["rows", 4, 128], ["tanh", 4, 128]]
    assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in pure_rows)


def test_call_overhead_prints_each_layer_of_a_call_and_its_ratio_to_jit(capsys):
    from bench.benchmarks import call_overhead

    call_overhead.main(["--kernels", "reduce_8k", "--calls", "2", "--blocks", "1"])
    rows = _rows(capsys.readouterr().out, "µs per call")
    assert [r[0] for r in rows] == ["reduce_8k"]
    python, dispatch, run, total, jit_run, jit, ratio = map(float, rows[0][1:])
    assert min(run, total, jit_run, jit) > 0 and min(python, dispatch) >= 0
    assert ratio == pytest.approx(total / jit, rel=0.01, abs=0.01)


def test_devices_bench_times_a_kernel_three_ways_with_the_same_bits():
    """Kernels that span devices need 8 CPU devices, set before jax starts: a process of its own."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    run = subprocess.run(
        [sys.executable, "-m", "bench.benchmarks.devices_bench", "--repeat", "1",
         "--cases", "guide_right_permute"],
        capture_output=True, text=True, timeout=300, env=env, cwd=bench.ROOT, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    row = next(line.split() for line in run.stdout.splitlines()[::-1]
               if line.strip().startswith("guide_right_permute"))  # fmt: skip
    assert row[1] == "4" and row[-1] == "same"
    assert all(float(cell) > 0 for cell in row[2:7])
    assert "upstream/compiled over 1 kernels" in run.stdout
