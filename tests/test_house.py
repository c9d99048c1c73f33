"""The house rules that keep each thing in one room (issue 50): no function over 80 lines, no
import loop between modules at import time, and no package exporting a name that hides one of
its modules. Like ``test_layering``, the walks read the files with ``ast`` and import nothing.
"""

import ast
from collections.abc import Iterable
from pathlib import Path

from test_layering import ROOT, _resolved, module_name, source_files

MAX_FUNCTION_LINES = 80
# (file, function): why it stays longer. Each entry is a decision, not a default.
LONG_FUNCTIONS = {
    ("minipallas/tools/corpora/multi_device/guide.py", "_reduce_scatter"): (
        "upstream's distributed-TPU guide kernel, ported as the guide writes it (with its "
        "nested kernel) so the two read side by side"
    ),
    ("minipallas/tools/corpora/multi_device/guide.py", "kernel"): "the guide's kernel, as above",
}


def all_sources() -> list[Path]:
    """Every Python file of the compiler, the tools and bench/."""
    return [*source_files(), *sorted((ROOT / "bench").rglob("*.py"))]


def long_functions(path: Path, text: str) -> list[tuple[str, int]]:
    """(name, lines) of each function in ``text`` (nested ones too) over the limit."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(text, str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_function_over_80_lines_but_the_listed_ones() -> None:
    found = {
        (str(path.relative_to(ROOT)), name): lines
        for path in all_sources()
        for name, lines in long_functions(path, path.read_text())
    }
    unlisted = [f"{f}: {name} has {n} lines" for (f, name), n in found.items()
                if (f, name) not in LONG_FUNCTIONS]  # fmt: skip
    assert not unlisted, (
        f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps that read top "
        "to bottom):\n" + "\n".join(unlisted)
    )
    assert set(LONG_FUNCTIONS) <= set(found), f"stale entries: {set(LONG_FUNCTIONS) - set(found)}"


def test_the_length_walk_counts_nested_functions() -> None:
    body = "\n".join(["        x = 1"] * MAX_FUNCTION_LINES)
    text = f"def outer():\n    def inner():\n{body}\n"
    assert long_functions(Path("fake.py"), text) == [("outer", 82), ("inner", 81)]


def import_time_nodes(tree: ast.Module) -> list[ast.AST]:
    """The import statements that run when the module is imported: at its top level, under
    ``if``/``try``, but not under ``if TYPE_CHECKING`` (annotations only) nor in functions."""
    found: list[ast.AST] = []

    def visit(body: Iterable[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.append(node)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for part in (node.body, *(h.body for h in node.handlers), node.orelse):
                    visit(part)
                visit(node.finalbody)

    visit(tree.body)
    return found


def import_graph(paths: Iterable[Path]) -> dict[str, set[str]]:
    """module -> the project's modules it imports at import time (``from a import b`` is an
    arrow to ``a.b`` where that is a module, else to ``a``)."""
    files = {module_name(p): p for p in paths}
    graph = {}
    for name, path in files.items():
        arrows = set()
        for _, target in _resolved(path, import_time_nodes(ast.parse(path.read_text()))):
            parent = target.rpartition(".")[0]
            if target in files:
                arrows.add(target)
            elif parent in files:
                arrows.add(parent)
        graph[name] = arrows - {name}
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative so a deep chain of imports cannot overflow the stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, arrows = work[-1]
            step = next(arrows, None)
            if step is not None and step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                work.append((step, iter(sorted(graph.get(step, ())))))
            elif step is not None:
                if step in stack:
                    low[node] = min(low[node], index[step])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_loop_at_import_time() -> None:
    """A loop works only by the order in which its modules happen to be imported; move what
    both sides need below both."""
    found = loops(import_graph(all_sources()))
    assert not found, "import loops:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_loop_walk_finds_a_loop_and_skips_annotation_imports() -> None:
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse(
        "import x\nif TYPE_CHECKING:\n    import y\nelse:\n    import z\n"
        "try:\n    import w\nexcept ImportError:\n    pass\ndef f():\n    import v\n"
    )
    names = [n.names[0].name for n in import_time_nodes(tree)]
    assert names == ["x", "z", "w"]


def shadowed_modules(path: Path, text: str, modules: set[str]) -> list[str]:
    """Names a package's ``__init__`` (``path``) binds to something other than its submodule
    of that name: ``minipallas.tools.difftest.classify`` was a function, hiding the module."""
    package = module_name(path)
    children = {m.rpartition(".")[2] for m in modules if m.rpartition(".")[0] == package}
    found = []
    for node in ast.parse(text, str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound = [(node.name, None)]
        elif isinstance(node, ast.ImportFrom):
            bound = [(a.asname or a.name, (node.module, a.name)) for a in node.names]
        elif isinstance(node, ast.Assign):
            bound = [(t.id, None) for t in node.targets if isinstance(t, ast.Name)]
        else:
            continue
        for name, source in bound:
            the_module = source is not None and source == (package, name)
            if name in children and not the_module:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {package}.{name}")
    return found


def test_no_package_exports_a_name_that_hides_its_module() -> None:
    paths = all_sources()
    modules = {module_name(p) for p in paths}
    found = [
        s
        for p in paths
        if p.name == "__init__.py"
        for s in shadowed_modules(p, p.read_text(), modules)
    ]
    assert not found, "names that hide a module of the package (rename one):\n" + "\n".join(found)
