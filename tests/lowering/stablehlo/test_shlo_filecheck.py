"""FileCheck tests of the emitted StableHLO: each ``filecheck/*.mpir`` file holds a minipallas
text module (its last function is the entry) and ``// CHECK`` lines matched against
``str(minipallas.lower(entry))``, the module text with source locations."""

import pathlib
import subprocess
import sys

import pytest

import minipallas
from minipallas.ir.parser import parse_module

HERE = pathlib.Path(__file__).parent / "filecheck"
FILECHECK = pathlib.Path(sys.executable).parent / "filecheck"


def run_filecheck(text: str, check_file: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(FILECHECK), str(check_file)], input=text, capture_output=True, text=True
    )


@pytest.mark.parametrize("path", sorted(HERE.glob("*.mpir")), ids=lambda p: p.stem)
def test_filecheck(path):
    module = parse_module(path.read_text())
    lowered = minipallas.lower(module.entry)
    done = run_filecheck(str(lowered), path)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n--- emitted:\n{lowered}"


def test_filecheck_can_fail(tmp_path):
    """The runner itself: a CHECK line that is not in the output fails."""
    check = tmp_path / "bad.mpir"
    check.write_text("// CHECK: stablehlo.no_such_op\n")
    assert run_filecheck("module {}\n", check).returncode != 0
