"""``lowering/compat/jax_private.py`` is the one file that names a private jax module: a scan of the
source tree holds every other file to it, and each row of its table resolves on the pinned jax.
"""

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from minipallas.ir.errors import MiniPallasError
from minipallas.lowering.compat import jax_private

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("ir", "passes", "lowering", "minipallas", "bench", "examples", "tests")
SHIM = "lowering/compat/jax_private.py"


def private_imports(text: str) -> list[int]:
    """The line of every import of a ``jax._src`` module in ``text``, however it is spelled."""

    def private(module: str) -> bool:
        return module == "jax._src" or module.startswith("jax._src.")

    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        if any(private(name) for name in names):
            lines.append(node.lineno)
    return lines


def test_only_the_shim_imports_private_jax_modules():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if str(path.relative_to(ROOT)) != SHIM
        for line in private_imports(path.read_text())
    ]
    assert not found, (
        "imports of jax._src outside lowering/compat/jax_private.py (add the module to its MODULES "
        "and import it from there: from minipallas.lowering.compat.jax_private import core as "
        "jax_core):\n" + "\n".join(found)
    )


def test_the_scan_sees_every_spelling():
    text = (
        "import jax\n"
        "from jax import _src\n"
        "import jax._src.core as c\n"
        "from jax._src.state import types\n"
        "def f():\n"
        "    from jax._src import core\n"
        "from jax.experimental import pallas\n"
    )
    assert private_imports(text) == [2, 3, 4, 6]


@pytest.mark.parametrize("name", sorted(jax_private.MODULES))
def test_every_name_resolves_on_the_pinned_jax(name):
    assert getattr(jax_private, name).__name__ == jax_private.MODULES[name]


def test_the_pinned_jax_is_the_one_the_table_was_written_for():
    assert importlib.metadata.version("jax") == jax_private.JAX_VERSION
    assert f"jax=={jax_private.JAX_VERSION}" in (ROOT / "setup.cfg").read_text()


def test_a_missing_module_names_itself_and_the_fix(monkeypatch):
    monkeypatch.setitem(jax_private.MODULES, "gone", "jax._src.no_such_module")
    with pytest.raises(MiniPallasError) as e:
        jax_private.gone  # noqa: B018
    message = str(e.value)
    assert "jax._src.no_such_module" in message
    assert f"written for jax {jax_private.JAX_VERSION}" in message
    assert f"fix: install jax=={jax_private.JAX_VERSION}" in message
    assert "MODULES['gone'] in lowering/compat/jax_private.py" in message


def test_a_module_that_fails_to_import_something_else_keeps_its_own_error(monkeypatch, tmp_path):
    (tmp_path / "mp_needs_absent.py").write_text("import mp_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(jax_private.MODULES, "needy", "mp_needs_absent")
    with pytest.raises(ModuleNotFoundError, match="mp_absent_dependency"):
        jax_private.needy  # noqa: B018


def test_an_unknown_name_is_an_attribute_error():
    assert not hasattr(jax_private, "no_such_name")


def test_the_shim_imports_nothing_until_asked_and_dir_lists_every_name():
    script = (
        "import sys\n"
        "from minipallas.lowering.compat import jax_private\n"
        "assert not any(m.startswith('jax') for m in sys.modules), 'jax imported'\n"
        "missing = set(jax_private.MODULES) - set(dir(jax_private))\n"
        "assert not missing, missing\n"
        "jax_private.state_types\n"
        "assert 'jax._src.state.types' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
