"""Rules apart from engines: every package that holds rules keeps them in its ``rules/`` room.

The lowering targets, the reference interpreter, the jaxpr importer and the exporter are each
an engine (context, tables, the walk over ops or equations) and a set of rules, one file per op
family.
- ``<package>/rules/`` holds the rule files: each registers rules (``@rule``, ``rule(...)(f)``,
  ``RULES.register``), every one is imported when the package is, and no module outside
  ``rules/`` registers any;
- the machinery beside it imports no rule file, so it reads on its own.
"""

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import minipallas.interop
import minipallas.ir
import minipallas.lowering

LOWERING = Path(minipallas.lowering.__file__).resolve().parent
ROOMS = {
    "minipallas.lowering.stablehlo": LOWERING / "stablehlo",
    "minipallas.lowering.tpu": LOWERING / "tpu",
    "minipallas.lowering.gpu": LOWERING / "gpu",
    "minipallas.ir.interpret": Path(minipallas.ir.__file__).resolve().parent / "interpret",
    "minipallas.interop.importer": Path(minipallas.interop.__file__).resolve().parent / "importer",
    "minipallas.interop.exporter": Path(minipallas.interop.__file__).resolve().parent / "exporter",
}
# Modules in a rules/ room that register no rule: parts of a rule that call other rule files'
# helpers, so they live beside them.
HELPERS = {"minipallas.interop.importer": {"devices", "devices_cores", "devices_grid"}}


def _is_rule(node: ast.expr) -> bool:
    """``rule(...)``, ``scoped_rule(...)`` or ``RULES.register(...)``: what registers a rule."""
    f = node.func if isinstance(node, ast.Call) else None
    return (isinstance(f, ast.Name) and f.id in ("rule", "scoped_rule")) or (
        isinstance(f, ast.Attribute) and f.attr == "register"
    )


def _registrations(path: Path) -> list[int]:
    """The lines of ``@rule(...)`` decorators and of ``rule(...)(f)`` calls."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.FunctionDef):
            lines += [d.lineno for d in node.decorator_list if _is_rule(d)]
        elif isinstance(node, ast.Call) and _is_rule(node.func):
            lines.append(node.lineno)
    return lines


def _in_rules(root: Path, path: Path) -> bool:
    return path.parent == root / "rules" and path.name != "__init__.py"


def _where(path: Path) -> str:
    return str(path.relative_to(Path(__file__).resolve().parents[1]))


@pytest.mark.parametrize("package", ROOMS)
def test_only_the_rule_files_register_rules(package):
    root, wrong = ROOMS[package], []
    for path in sorted(root.rglob("*.py")):
        lines = _registrations(path)
        if _in_rules(root, path) and not lines and path.stem not in HELPERS.get(package, ()):
            wrong.append(f"{_where(path)}: in rules/ but registers no rule (machinery?)")
        if not _in_rules(root, path):
            wrong += [f"{_where(path)}:{n}: registers a rule outside rules/" for n in lines]
    assert wrong == []


@pytest.mark.parametrize("package", ROOMS)
def test_every_rule_file_registers_when_its_package_is_imported(package):
    """A rule file nobody imports is a set of rules that silently never fire."""
    rules = importlib.import_module(package).rules
    names = [m.name for m in pkgutil.iter_modules(rules.__path__)]
    assert names
    assert [n for n in names if f"{package}.rules.{n}" not in sys.modules] == []


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


@pytest.mark.parametrize("package", ROOMS)
def test_machinery_imports_no_rule_file(package):
    root, rules = ROOMS[package], f"{package}.rules"
    wrong = []
    for path in sorted(root.rglob("*.py")):
        if path.parent == root / "rules" or path == root / "__init__.py":
            continue
        for line, name in _imports(path):
            if name == rules or name.startswith(rules + "."):
                wrong.append(f"{_where(path)}:{line}")
    assert wrong == []
