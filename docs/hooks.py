"""MkDocs hooks: the pages that are generated from the code, so they cannot drift from it.

A page holds a marker, an HTML comment such as ``<!-- generated: ops -->``, that
``on_page_markdown`` replaces with Markdown built from the declarations themselves: the op
table from ``@declare`` (``ir/opset``), the passes from ``@register``, the targets from
``lowering.TARGETS``, the API from ``minipallas._PUBLIC``, ``minipallas-opt --help``, and the
tutorial's chapter list from the chapters' docstrings. A marker with no generator is an error.
``docs/tutorial/index.md`` holds its chapter list written out, not as a marker, so that the
page reads on a code host too; ``tests/test_docs.py`` checks that it is ``chapters()``.

``on_startup`` lays out ``build/docs-src/minipallas``: links to the four source folders in the
shape they are installed in (``setup.cfg``'s ``package_dir`` maps ``ir/`` to ``minipallas.ir``),
so mkdocstrings finds each module's source where its dotted name says.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "build" / "docs-src"
MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")
EMITTERS = {  # column title -> the module whose RULES table says which ops the target lowers
    "StableHLO": "minipallas.lowering.stablehlo.context",
    "Mosaic": "minipallas.lowering.tpu.context",
    "Triton": "minipallas.lowering.gpu.context",
}
EMITTER_PACKAGES = ("minipallas.lowering.stablehlo", "minipallas.lowering.tpu",
                    "minipallas.lowering.gpu")  # fmt: skip


def on_startup(**_: Any) -> None:
    """Before any plugin's ``on_config``: mkdocstrings reads its ``paths`` there."""
    package = SOURCE / "minipallas"
    package.mkdir(parents=True, exist_ok=True)  # safe when two builds run at once (xdist)
    entries = {p.name: p for p in (ROOT / "minipallas").iterdir() if p.name != "__pycache__"}
    entries.update({name: ROOT / name for name in ("ir", "passes", "lowering")})
    for name, target in entries.items():
        link = package / name
        if not link.is_symlink():
            with contextlib.suppress(FileExistsError):  # another build made it meanwhile
                link.symlink_to(target)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: no generator for marker {name!r}")
        return GENERATORS[name]()

    return MARKER.sub(replace, markdown)


def _rst_to_markdown(doc: str) -> str:
    """A docstring's ``Title::`` + indented literal block as a fenced block (Markdown reads
    the rest, ````code```` included, as it is)."""
    out: list[str] = []
    lines = inspect.cleandoc(doc).splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        k += 1
        if not line.rstrip().endswith("::"):
            out.append(line)
            continue
        out += [line.rstrip()[:-1], "", "```text"]
        while k < len(lines) and not lines[k].strip():  # the blank line after "::"
            k += 1
        while k < len(lines) and (not lines[k].strip() or lines[k].startswith(" ")):
            out.append(lines[k][4:])
            k += 1
        while out[-1] == "":
            out.pop()
        out += ["```", ""]
    return "\n".join(out)


def _operands(opdef: Any) -> str:
    from minipallas.ir.opdef import Flagged, Variadic

    parts = []
    for entry in opdef.operands:
        if isinstance(entry, Variadic):
            count = f", `{entry.count}` of them" if entry.count else ""
            parts.append(f"`{entry.name}...`{count}")
        elif isinstance(entry, Flagged):
            parts.append(f"`{entry.name}` (if `{entry.flag}`)")
        else:
            parts.append(f"`{entry}`")
    return ", ".join(parts) or "none"


def _rule_file(rule: Callable) -> str:
    path = Path(inspect.getsourcefile(rule)).resolve().relative_to(ROOT)
    return f"`{path}`"


def ops() -> str:
    """Every declared op: a table (family, operands, effect, regions, rules), then each op's
    own documentation, its printed form first."""
    import minipallas.ir.opset  # noqa: F401  (each family declares its ops)
    from minipallas.ir.opdef import OPS
    from minipallas.passes.discharge.engine import RULES as DISCHARGE

    for package in EMITTER_PACKAGES:
        importlib.import_module(package)
    emitters = {title: importlib.import_module(m).RULES for title, m in EMITTERS.items()}
    head = ["op", "family", "operands", "effect", "regions", "discharge rule", *emitters]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    sections = []
    for name, opdef in sorted(OPS.items()):
        family = opdef.infer.__module__.rsplit(".", 1)[-1]
        regions = "1+" if opdef.regions is None else str(opdef.regions or "")
        effect = f"{opdef.effect} `ref`" if opdef.effect else ""
        rule = _rule_file(DISCHARGE[name]) if name in DISCHARGE else ""
        lowered = ["yes" if name in table else "" for table in emitters.values()]
        cells = [f"[`{name}`](#{_anchor(name)})", family, _operands(opdef), effect, regions,
                 rule, *lowered]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
        flags = "pure" if opdef.pure else "stateful" if not opdef.observable else "observable"
        sections += [
            f"### {name}",
            "",
            f"*{family}* · operands: {_operands(opdef)} · {flags}"
            + (f" · effect: {effect}" if effect else ""),
            "",
            _rst_to_markdown(opdef.doc),
            "",
        ]
    intro = f"{len(OPS)} ops, declared in `ir/opset/` (one file per family)."
    return "\n".join([intro, "", *rows, "", "## Each op", "", *sections])


def _anchor(name: str) -> str:
    """The id MkDocs's toc gives the heading ``### name``."""
    return re.sub(r"[^a-z0-9_-]+", "", name.lower().replace(" ", "-"))


def passes() -> str:
    """Every registered pass with its options, as ``--pass-pipeline`` takes them."""
    import minipallas.cli  # noqa: F401  (its imports register every pass it offers)
    from minipallas.passes.registry import PASSES, REQUIRED, _text

    out = []
    for info in sorted(PASSES.values(), key=lambda i: i.name):
        out += [f"### `{info.name}`", "", info.doc, ""]
        module = Path(inspect.getsourcefile(info.run)).resolve().relative_to(ROOT)
        out += [f"Defined in `{module}` (`{info.run.__module__}.{info.run.__name__}`).", ""]
        for o in info.options:
            default = info.defaults[o.name]
            shown = "required" if default is REQUIRED else f"default `{_text(default)}`"
            out.append(f"- `{o.name}` ({o.type.accepts}; {shown}): {o.doc}")
        out.append("")
    return "\n".join(out)


def targets() -> str:
    from minipallas.lowering import TARGETS

    rows = ["| target | lowers | pipeline | emitter |", "|---|---|---|---|"]
    for t in TARGETS.values():
        what = "a traced `Kernel`" if t.kernel else "a `Function`"
        rows.append(f"| `{t.name}` | {what} | `{t.pipeline}` | `{t.emitter}` |")
    return "\n".join(rows)


def cli_help() -> str:
    from minipallas.cli import _arguments

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        _arguments().print_help()
    return "```text\n" + buffer.getvalue().rstrip() + "\n```"


def api() -> str:
    """``minipallas.NAME`` for every public name, documented from its own module."""
    import minipallas

    out = []
    for name, module in minipallas._PUBLIC.items():
        out += [f"### `minipallas.{name}`", "", f"::: {module}.{name}", "    options:",
                "      show_root_heading: false", ""]  # fmt: skip
    return "\n".join(out)


def chapters() -> str:
    """The tutorial's chapters in order, each with the first line of its docstring."""
    rows = ["| chapter | what it shows |", "|---|---|"]
    for path in sorted((ROOT / "examples").glob("ch[0-9][0-9]_*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        rows.append(f"| `examples/{path.name}` | {doc.splitlines()[0] if doc else ''} |")
    return "\n".join(rows)


GENERATORS: dict[str, Callable[[], str]] = {
    "ops": ops,
    "passes": passes,
    "targets": targets,
    "cli-help": cli_help,
    "api": api,
    "chapters": chapters,
}
