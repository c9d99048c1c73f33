"""Each lowering target is laid out alike, and its names mean one thing.

- ``lowering/<target>/rules/`` holds the rule files apart from the support modules (checked
  with the interpreter's and the importer's rules in ``tests/test_rule_rooms.py``).
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

import minipallas.lowering

LOWERING = Path(minipallas.lowering.__file__).resolve().parent
TARGETS = ("stablehlo", "tpu", "gpu")


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
