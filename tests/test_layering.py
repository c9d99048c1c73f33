"""The floors of the source tree: imports run one way, ``ir`` <- ``passes`` <- ``lowering`` <- the
rest of ``minipallas``, and no source file grows past 600 lines.

A module may import its own floor or one below it. Every import counts: module-level,
function-level, and those under ``if TYPE_CHECKING`` (a type annotation is a dependency too), so
a function-level import cannot hide an arrow up a floor. The walk reads the files with ``ast``
and imports nothing.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# floor order, and where each floor's files are (setup.cfg's package_dir)
FLOORS = {"ir": 0, "passes": 1, "lowering": 2, "minipallas": 3}
PACKAGE = {"ir": "minipallas.ir", "passes": "minipallas.passes", "lowering": "minipallas.lowering"}
MAX_LINES = 600


def source_files() -> list[Path]:
    return sorted(p for folder in FLOORS for p in (ROOT / folder).rglob("*.py"))


def floor_of_module(module: str) -> int | None:
    """The floor of a ``minipallas...`` module name; None for modules outside the project."""
    parts = module.split(".")
    if parts[0] != "minipallas":
        return None
    if len(parts) > 1 and parts[1] in PACKAGE:
        return FLOORS[parts[1]]
    return FLOORS["minipallas"]


def module_name(path: Path) -> str:
    """``ir/opset/state.py`` -> ``minipallas.ir.opset.state`` (a package is its ``__init__``)."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    head = PACKAGE.get(parts[0], parts[0])
    return ".".join([head, *parts[1:]])


def imported_modules(path: Path, text: str) -> list[tuple[int, str]]:
    """(line, module) for every import in ``text``, the source of ``path``. ``from a import b``
    gives ``a.b``, since ``b`` may be a submodule (``from minipallas import kernels``)."""
    package = module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def arrows_up(path: Path, text: str) -> list[str]:
    """``file:line: import`` for each import in ``path`` (source ``text``) of a module on a floor
    above the file's own."""
    own = FLOORS[path.relative_to(ROOT).parts[0]]
    arrows = []
    for line, module in imported_modules(path, text):
        floor = floor_of_module(module)
        if floor is not None and floor > own:
            where = path.relative_to(ROOT)
            arrows.append(f"{where}:{line}: imports {module} (floor {floor} > {own})")
    return arrows


def test_imports_point_down_the_floors() -> None:
    arrows = [a for path in source_files() for a in arrows_up(path, path.read_text())]
    assert not arrows, "imports up a floor (ir=0 < passes=1 < lowering=2 < minipallas=3):\n" + (
        "\n".join(arrows)
    )


def test_the_walk_sees_function_level_and_relative_imports() -> None:
    """The walk itself: an arrow up inside a function, or spelled relatively, is still found."""
    fake = ROOT / "passes" / "discharge" / "fake.py"
    text = (
        "import numpy\n"
        "from minipallas.ir import core\n"
        "def f():\n"
        "    from minipallas.kernels import grid\n"
        "    from ...lowering import emit\n"
    )
    assert imported_modules(fake, text) == [
        (1, "numpy"),
        (2, "minipallas.ir.core"),
        (4, "minipallas.kernels.grid"),
        (5, "minipallas.lowering.emit"),
    ]
    assert arrows_up(fake, text) == [
        "passes/discharge/fake.py:4: imports minipallas.kernels.grid (floor 3 > 1)",
        "passes/discharge/fake.py:5: imports minipallas.lowering.emit (floor 2 > 1)",
    ]
    assert floor_of_module("minipallas") == 3
    assert module_name(ROOT / "ir" / "opset" / "__init__.py") == "minipallas.ir.opset"


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_file_over_the_line_cap(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (cap {MAX_LINES})"
