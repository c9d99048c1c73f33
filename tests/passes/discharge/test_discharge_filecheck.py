"""Runs ``discharge.mir``: the discharged text form of each op kind, checked with FileCheck."""

import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent


def test_discharge_mir():
    path = HERE / "discharge.mir"
    (run,) = [line for line in path.read_text().splitlines() if line.startswith("// RUN:")]
    producer, checker = run.removeprefix("// RUN:").replace("%s", str(path)).split("|")
    produced = subprocess.run(
        [str(BIN / "minipallas-opt"), *shlex.split(producer)[1:]],
        capture_output=True,
        text=True,
        check=True,
    )
    checked = subprocess.run(
        [str(BIN / "filecheck"), *shlex.split(checker)[1:]],
        input=produced.stdout,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
