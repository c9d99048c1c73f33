"""The package layout: four source folders installed as one ``minipallas`` package."""

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("minipallas", "ir", "passes", "lowering", "tests", "examples", "bench")
BARE = {"ir", "passes", "lowering"}


def _python(code: str, cwd: pathlib.Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, env=env
    )


def test_subpackages_import_under_minipallas(tmp_path):
    done = _python(
        "import minipallas.ir, minipallas.passes, minipallas.lowering; "
        "print(minipallas.ir.ArrayType((2,), 'float32'))",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "f32[2]"


@pytest.mark.parametrize("name", sorted(BARE))
def test_bare_top_level_names_are_not_installed(tmp_path, name):
    done = _python(f"import {name}", tmp_path)
    assert done.returncode != 0
    assert "ModuleNotFoundError" in done.stderr


def test_no_module_imports_a_bare_subpackage_name():
    offenders = []
    for folder in SOURCE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                if any(n.split(".")[0] in BARE for n in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_non_editable_install_has_the_same_layout(tmp_path):
    target = tmp_path / "site"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    assert (target / "minipallas" / "ir" / "core.py").is_file()
    assert not (target / "ir").exists()
    env = dict(os.environ, PYTHONPATH=str(target))
    done = _python(
        "import minipallas.ir, minipallas.passes, minipallas.lowering; "
        "print(minipallas.ir.__file__)",
        tmp_path,
        env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(target))


def test_every_source_package_is_listed_in_setup_cfg():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    listed = set(cfg["options"]["packages"].split())
    roots = {"minipallas": "minipallas", "ir": "minipallas.ir", "passes": "minipallas.passes",
             "lowering": "minipallas.lowering"}  # fmt: skip
    found = set()
    for folder, package in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *parts)))
    assert found == listed
