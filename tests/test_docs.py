"""The documentation site builds with warnings as errors (a renamed function, a broken link or
anchor, a marker with no generator fails), its generated pages list every op and pass, and
every repository path the pages name exists."""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

import minipallas
import minipallas as mp
import minipallas.cli  # noqa: F401  (registers every pass minipallas-opt offers)
import minipallas.ir.opset  # noqa: F401
from minipallas.ir.opdef import OPS
from minipallas.ir.printer import print_function
from minipallas.passes import pipeline
from minipallas.passes.registry import PASSES

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").rglob("*.md"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]'; the lock has it)")
    out = tmp_path_factory.mktemp("site")
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(build, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return out


def test_the_op_reference_has_every_declared_op(site):
    page = (site / "reference" / "ops" / "index.html").read_text()
    for name in OPS:
        assert f'<h3 id="{re.sub(r"[^a-z0-9_-]", "", name)}">' in page, name


def test_the_pass_reference_has_every_registered_pass(site):
    page = (site / "reference" / "passes" / "index.html").read_text()
    for name in PASSES:
        assert f"<code>{name}</code>" in page, name


def test_the_api_reference_documents_functions_from_their_docstrings(site):
    page = (site / "reference" / "api" / "index.html").read_text()
    for name in minipallas._PUBLIC:
        assert f"minipallas.{name}</code>" in page, name
    assert "The effects of a function (at parameter positions)" in page  # effects' docstring


def test_every_repository_path_a_page_names_exists():
    pattern = re.compile(r"`((?:ir|passes|lowering|minipallas|examples|tests|bench)/[\w/.-]+)`")
    for page in [*PAGES, ROOT / "README.md"]:
        for path in pattern.findall(page.read_text()):
            assert (ROOT / path.rstrip("/")).exists(), f"{page.name}: {path}"


def test_each_discharge_rule_shown_is_what_the_pass_does():
    """docs/concepts/discharge.md: every "before" program, discharged, prints its "after"."""
    text = (ROOT / "docs" / "concepts" / "discharge.md").read_text()
    block = r"<!-- discharge: {} -->\n```text\n(.*?)```"
    befores = re.findall(block.format("before"), text, re.S)
    afters = re.findall(block.format("after"), text, re.S)
    assert len(befores) == len(afters) >= 10
    for before, after in zip(befores, afters, strict=True):
        fn = mp.parse_module(before).entry
        assert print_function(pipeline.run(fn, "discharge", verify=True)) == after.rstrip("\n")


def test_the_tutorial_index_lists_the_chapters_as_their_docstrings_say():
    """Written out (a generated marker is an empty comment on a code host), and current."""
    spec = importlib.util.spec_from_file_location("hooks", ROOT / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    page = (ROOT / "docs" / "tutorial" / "index.md").read_text()
    assert hooks.chapters() in page and "<!-- generated:" not in page


MAX_PARAGRAPH_LINES = 12
LIST_ITEM = re.compile(r"^\s*([-*+]|\d+\.)\s")


def prose_paragraphs(text: str) -> list[tuple[int, int]]:
    """(first line, lines) of each paragraph of prose in a page: runs of lines between blank
    ones, outside code blocks, tables, headings and lists (a list item and its indented lines
    are no paragraph of prose)."""
    found, start, fence = [], None, False
    lines = text.split("\n")
    for n, line in enumerate(lines):
        bare = line.lstrip()
        if bare.startswith(("```", "~~~")):
            fence = not fence
        prose = not fence and bare and not bare.startswith(("```", "~~~", "|", "#", "<", ":::"))
        prose = prose and not LIST_ITEM.match(line) and not line.startswith(" ")
        if prose and start is None:
            start = n
        elif not prose and start is not None:
            found.append((start + 1, n - start))
            start = None
    if start is not None:
        found.append((start + 1, len(lines) - start))
    return found


def list_items(text: str) -> list[tuple[int, int]]:
    """(first line, lines) of each list item in a page: a line starting with `- `, `* ` or `N. `
    and the indented lines after it, outside code blocks (a nested item starts an item of its
    own; a blank line, a fence or an unindented line ends one)."""
    found, start, fence = [], None, False
    lines = text.split("\n")
    for n, line in enumerate([*lines, ""]):
        bare = line.lstrip()
        fenced = bare.startswith(("```", "~~~"))
        fence = fence != fenced
        item = not fence and not fenced and LIST_ITEM.match(line)
        more = not fence and not fenced and bare and line.startswith(" ") and not item
        if start is not None and not more:
            found.append((start + 1, n - start))
            start = None
        if item:
            start = n
    return found


def test_no_prose_paragraph_or_list_item_is_over_12_lines():
    """Guides read as pages, not notebooks: a long paragraph or item is two ideas (issue 50)."""
    long = [
        f"{page.relative_to(ROOT)}:{line}: {n} lines"
        for page in PAGES
        for walk in (prose_paragraphs, list_items)
        for line, n in walk(page.read_text())
        if n > MAX_PARAGRAPH_LINES
    ]
    assert not long, (
        "paragraphs or list items over 12 lines (cut them where a new idea starts):\n"
        + "\n".join(long)
    )


def test_the_paragraph_walk_skips_code_tables_and_lists():
    text = "a\nb\n\n```\nx\n\ny\n```\n| t |\n- item\n  more\nc\n"
    assert prose_paragraphs(text) == [(1, 2), (12, 1)]


def test_the_list_item_walk_counts_indented_lines_and_skips_code():
    text = "- a\n  b\n  c\n* d\n    - e\n      f\n\n```\n- x\n  y\n```\n12. g\n  h\ni\n  - j\n"
    assert list_items(text) == [(1, 3), (4, 1), (5, 2), (12, 2), (15, 1)]
