"""``lowering/jaxlib_shim.py`` is the one file that imports jaxlib: a scan of the source tree holds
every other file to it, so a jaxlib upgrade touches one file. What is done with jaxlib lives by
concern beside it (``xla_cpu``, ``triton_call``, ``libtpu``); the names that moved are still
found through the shim until its last callers move (``_MOVED``)."""

import ast
import importlib
from pathlib import Path

import pytest

from minipallas.lowering import jaxlib_shim

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("ir", "passes", "lowering", "minipallas", "bench", "examples", "tests")
SHIM = "lowering/jaxlib_shim.py"


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
        "imports of jaxlib outside lowering/jaxlib_shim.py (reach it through the shim):\n"
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


@pytest.mark.parametrize("name", sorted(jaxlib_shim._MOVED))
def test_a_moved_name_is_still_the_same_object_through_the_shim(name):
    home = importlib.import_module(jaxlib_shim._MOVED[name])
    assert getattr(jaxlib_shim, name) is getattr(home, name)
    assert name not in vars(jaxlib_shim)  # found, not defined twice


def test_a_name_the_shim_never_had_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'cpu_compiled'"):
        jaxlib_shim.cpu_compiled  # noqa: B018
