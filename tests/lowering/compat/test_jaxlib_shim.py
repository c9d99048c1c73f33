"""``lowering/compat/jaxlib_shim.py`` is the one file that imports jaxlib: a scan of the source
tree holds every other file to it, so a jaxlib upgrade touches one file. What is done with
jaxlib lives by concern in the runtime room (``xla_cpu``, ``triton_call``, ``libtpu``),
imported from there."""

import ast
from pathlib import Path

import pytest

from minipallas.lowering.compat import jaxlib_shim
from minipallas.lowering.runtime import libtpu, triton_call, xla_cpu

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("ir", "passes", "lowering", "minipallas", "bench", "examples", "tests")
SHIM = "lowering/compat/jaxlib_shim.py"


def jaxlib_imports(text: str) -> list[int]:
    """The line of every import of a jaxlib module in ``text``, however it is spelled."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name == "jaxlib" or name.startswith("jaxlib.") for name in names):
            lines.append(node.lineno)
    return lines


def test_only_the_shim_imports_jaxlib():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if str(path.relative_to(ROOT)) != SHIM
        for line in jaxlib_imports(path.read_text())
    ]
    assert not found, (
        "imports of jaxlib outside lowering/compat/jaxlib_shim.py (reach it through the shim):\n"
        + "\n".join(found)
    )


def test_the_scan_sees_every_spelling():
    text = (
        "import jaxlib\n"
        "from jaxlib import xla_client\n"
        "import jax\n"
        "def f():\n"
        "    from jaxlib.mlir import ir\n"
        "import jaxlib_extra\n"
    )
    assert jaxlib_imports(text) == [1, 2, 5]


@pytest.mark.parametrize("home", [xla_cpu, triton_call, libtpu], ids=lambda m: m.__name__)
def test_what_is_done_with_jaxlib_is_found_in_its_own_file_only(home):
    """The shim forwards nothing: a name of ``xla_cpu``, ``triton_call`` or ``libtpu`` is
    imported from there, and is no attribute of the shim."""
    assert [name for name in home.__all__ if hasattr(jaxlib_shim, name)] == []
