"""The long commands' progress bars and closing tables: on stderr, drawn only on a terminal,
never changing stdout (which tests and scripts parse)."""

import io
import sys

import pytest

from minipallas.tools import progress
from minipallas.tools.fuzz import kernels as fuzz_kernels
from minipallas.tools.progress import Progress, summary_table


def test_summary_table_aligns_names_and_values():
    text = summary_table("fuzz, seed 0", {"programs": 30, "failures: discharge": 2})
    assert text.splitlines() == [
        "fuzz, seed 0",
        "-----------------------",
        "programs             30",
        "failures: discharge  2",
        "-----------------------",
    ]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_bar_is_drawn_on_a_terminal_and_counts(monkeypatch):
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    with Progress("fuzz", 10, unit="program") as bar:
        bar.update(4, failures=1)
        bar.update(6, failures=1)
    assert bar.done == 10
    drawn = err.getvalue()
    assert "fuzz" in drawn and "10/10" in drawn and "failures=1" in drawn


def test_a_time_bound_shrinks_the_total_to_what_will_fit(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Terminal())
    clock = iter([0.0, 10.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    bar = Progress("fuzz", 1000, seconds=20.0)
    bar.update(5)  # 5 in 10 s of 20: about 10 in all, not 1000
    assert bar.bar.total == 10
    bar.close()


def test_nothing_is_drawn_off_a_terminal(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with Progress("fuzz", 3) as bar:
        bar.update(3)
    assert err.getvalue() == ""


def test_fuzz_kernels_keeps_its_stdout_and_adds_a_table_on_stderr(capsys, monkeypatch):
    monkeypatch.setattr(fuzz_kernels, "campaign", _one_kernel)
    assert fuzz_kernels.main(["--count", "1", "--seconds", "5"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("1 kernels (1 ran batched), 0 disagreements, ")
    assert "kernels        1" in err and "disagreements  0" in err


def _one_kernel(count, seconds, seed, progress=None, **options):  # passes, targets, skip
    summary = fuzz_kernels.Summary()
    summary.kernels, summary.batched = 1, 1
    if progress is not None:
        progress.update()
    return summary


@pytest.mark.parametrize(
    "module", ["minipallas.tools.fuzz.programs", "minipallas.tools.fuzz.upstream"]
)
def test_the_fuzzers_import_the_bar(module):
    import importlib

    assert importlib.import_module(module).Progress is Progress


class _NoIsatty:
    """A stream that cannot say whether it is a terminal (a logger's or a harness's)."""

    def __init__(self):
        self.text = ""

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_nothing_is_drawn_on_a_stream_that_cannot_say_it_is_a_terminal(monkeypatch):
    err = _NoIsatty()
    monkeypatch.setattr(sys, "stderr", err)
    with Progress("fuzz", 3) as bar:
        bar.update(3)
    assert err.text == ""
