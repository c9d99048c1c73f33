"""Each lowering target is laid out alike, and its names mean one thing.

- ``lowering/<target>/rules/`` holds the rule files: each registers rules (``@rule``, or
  ``rule(...)(f)`` for a shared one), every one is imported when the target is, and no module
  outside ``rules/`` registers any; the support modules beside it (context, ``emit``, the
  emitter's own steps) import no rule file, so they read on their own.
- A package's attribute named like one of its modules is that module: a function ``emit``
  beside ``emit.py`` would be one or the other by import order.
- No two targets define a public function of the same name (three ``lower_kernel`` made a
  reader open all three).
"""

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import minipallas.lowering

LOWERING = Path(minipallas.lowering.__file__).resolve().parent
TARGETS = ("stablehlo", "tpu", "gpu")


def _is_rule(node: ast.expr) -> bool:
    """``rule(...)`` or ``RULES.register(...)``: what registers the function it is given."""
    f = node.func if isinstance(node, ast.Call) else None
    return (isinstance(f, ast.Name) and f.id == "rule") or (
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


def _modules(target: str) -> list[Path]:
    return sorted((LOWERING / target).rglob("*.py"))


def _in_rules(target: str, path: Path) -> bool:
    return path.parent == LOWERING / target / "rules" and path.name != "__init__.py"


@pytest.mark.parametrize("target", TARGETS)
def test_only_the_rule_files_register_rules(target):
    wrong = []
    for path in _modules(target):
        where = path.relative_to(LOWERING.parent)
        lines = _registrations(path)
        if _in_rules(target, path) and not lines:
            wrong.append(f"{where}: in rules/ but registers no rule (a support module?)")
        if not _in_rules(target, path):
            wrong += [f"{where}:{n}: registers a rule outside rules/" for n in lines]
    assert wrong == []


@pytest.mark.parametrize("target", TARGETS)
def test_every_rule_file_registers_when_its_target_is_imported(target):
    """A rule file nobody imports is a set of rules that silently never fire."""
    package = importlib.import_module(f"minipallas.lowering.{target}")
    names = [m.name for m in pkgutil.iter_modules(package.rules.__path__)]
    assert names
    missing = [n for n in names if f"minipallas.lowering.{target}.rules.{n}" not in sys.modules]
    assert missing == []


@pytest.mark.parametrize("target", TARGETS)
def test_support_modules_import_no_rule_file(target):
    rules = f"minipallas.lowering.{target}.rules"
    wrong = []
    for path in _modules(target):
        if path.parent == LOWERING / target / "rules" or path == LOWERING / target / "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(n == rules or n.startswith(rules + ".") for n in names):
                wrong.append(f"{path.relative_to(LOWERING.parent)}:{node.lineno}")
    assert wrong == []


def test_a_packages_attribute_named_like_its_module_is_that_module():
    for info in pkgutil.walk_packages(minipallas.lowering.__path__, "minipallas.lowering."):
        importlib.import_module(info.name)
    wrong = []
    for name, package in sorted(sys.modules.items()):
        if not name.startswith("minipallas.lowering") or not hasattr(package, "__path__"):
            continue
        for info in pkgutil.iter_modules(package.__path__):
            module = sys.modules[f"{name}.{info.name}"]
            if getattr(package, info.name) is not module:
                got = type(getattr(package, info.name)).__name__
                wrong.append(f"{name}.{info.name} is a {got}, not the module {info.name}.py")
    assert wrong == []


def test_no_two_targets_define_a_function_of_the_same_name():
    files = {t: [LOWERING / t / "__init__.py"] for t in TARGETS}
    files["gpu"].append(LOWERING / "gpu" / "ptx.py")
    owners: dict[str, list[str]] = {}
    for target, paths in files.items():
        for path in paths:
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                    owners.setdefault(node.name, []).append(target)
    assert {n: ts for n, ts in owners.items() if len(ts) > 1} == {}
    emitters = [t.emitter.partition(":")[2] for t in minipallas.lowering.TARGETS.values()]
    assert len(set(emitters)) == len(emitters), emitters
