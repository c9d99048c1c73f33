"""``bench`` is a package whose scripts run as modules from the repository root
(``python -m bench.chip.tpu_check``): only ``bench/__init__.py`` touches ``sys.path``, every
command the Makefile and the docs give names a module that exists, and a script finds an
installed minipallas before the checkout's ``minipallas/`` folder, as on a TPU machine."""

import ast
import json
import os
import re
import subprocess
import sys

import bench

ROOT = bench.ROOT
BENCH = ROOT / "bench"
COMMAND = re.compile(r"python -m (bench(?:\.[a-z0-9_]+)+)")  # bench.chip.NAME: the package


def test_only_the_package_sets_up_sys_path():
    wrong = []
    for path in sorted(BENCH.rglob("*.py")):
        if path == BENCH / "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "path"
                and isinstance(node.value, ast.Name)
                and node.value.id == "sys"
            ):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert wrong == []  # the corpora are modules of minipallas.tools.corpora, imported by name


def test_every_folder_of_scripts_is_a_package():
    folders = {p.parent for p in BENCH.rglob("*.py")}
    assert [str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists()] == []


def test_every_command_given_names_a_module_that_exists():
    texts = [ROOT / "Makefile", ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    texts += BENCH.rglob("*.py")
    wrong = []
    for path in texts:
        for module in COMMAND.findall(path.read_text()):
            file = ROOT / module.replace(".", "/")
            if not (file.with_suffix(".py").is_file() or (file / "__init__.py").is_file()):
                wrong.append(f"{path.relative_to(ROOT)}: {module}")
    assert wrong == []


def test_a_script_run_from_the_root_uses_the_installed_minipallas(tmp_path):
    """A TPU machine has minipallas from a wheel on ``PYTHONPATH`` and no editable install:
    the checkout's ``minipallas/`` folder, first on ``sys.path`` under ``python -m``, is not
    the package (its ``ir/`` lies beside it). Here the editable install's finder is taken off
    ``sys.meta_path`` (a ``sitecustomize``) to be in the same place: the hardware check on the
    CPU, its worker process included, runs on the installed copy."""
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    install += ["--no-build-isolation", "--target", str(site), str(ROOT)]
    done = subprocess.run(install, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    bare = tmp_path / "no_editable_finder"
    bare.mkdir()
    (bare / "sitecustomize.py").write_text(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path\n"
        "                    if 'Editable' not in getattr(f, '__name__', type(f).__name__)]\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(bare), str(site)]))
    env["JAX_PLATFORMS"] = "cpu"

    def python(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True
        )

    shadowed = python("-c", "import minipallas.ir")
    assert "No module named 'minipallas.ir'" in shadowed.stderr  # the checkout's folder
    where = python("-c", "import bench, minipallas; print(minipallas.__file__)")
    assert where.stdout.strip() == str(site / "minipallas" / "__init__.py"), where.stderr
    out = tmp_path / "check.json"
    check = python("-m", "bench.chip.tpu_check", "--cpu", "--kernels", "add", "--out", str(out))
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(out.read_text())["summary"] == {"ok": 1}
