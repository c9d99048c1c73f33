"""The README is a newcomer's ten minutes: short, its first lines give ``make demo`` and
``make test``, and its first program prints exactly what the README shows, as chapter 1 does."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _first_program() -> tuple[str, str]:
    """The python block of "A first program" and the text block after it."""
    section = README.split("## A first program")[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shown = re.search(r"prints.*?```text\n(.*?)```", section, re.S).group(1)
    return code, shown


def test_short_and_starts_with_the_two_commands():
    lines = README.splitlines()
    assert len(lines) <= 200
    head = "\n".join(lines[:6])
    assert "make demo" in head and "make test" in head
    assert "Python ≥ 3.11" in README and "pip install -e ." in README


def test_the_first_program_prints_what_the_readme_shows():
    code, shown = _first_program()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == shown


def test_chapter_one_is_the_readme_program_and_writes_its_ir_for_the_cli(tmp_path):
    code, shown = _first_program()
    chapter = (ROOT / "examples" / "ch01_first_program.py").read_text()
    body = chapter.split("def main() -> None:")[1]
    for line in code.split("ref = mp.RefType")[1].splitlines()[1:]:
        assert line.strip() in body, line
    run = [sys.executable, str(ROOT / "examples" / "ch01_first_program.py")]
    assert subprocess.run(run, capture_output=True, text=True, check=True).stdout == shown
    ir = subprocess.run([*run, "--ir"], capture_output=True, text=True, check=True).stdout
    assert ir == shown.split("}\n{read")[0] + "}\n"
    path = tmp_path / "first.mir"
    path.write_text(ir)
    cli = [sys.executable, "-m", "minipallas.cli", str(path), "--pass-pipeline=discharge,cleanup"]
    out = subprocess.run(cli, capture_output=True, text=True, check=True).stdout
    cleaned = "func @kernel" + shown.split("}\nfunc @kernel")[-1].split("(array")[0]
    assert out == cleaned


def test_readme_links_go_to_files_that_exist():
    for target in re.findall(r"\]\(([^)#]+)", README):
        assert (ROOT / target).exists(), target


def test_the_discharge_picture_is_what_discharge_prints():
    import minipallas as mp
    from minipallas.passes import pipeline

    section = README.split("## Discharge in one picture")[1]
    picture = re.search(r"```text\n(.*?)```", section, re.S).group(1)
    before, after = picture.split("  v\n")
    before = before.split("                  |")[0]

    def plain(text: str) -> str:
        return "\n".join(line.split("//")[0].rstrip() for line in text.strip().splitlines())

    fn = mp.parse(before)
    assert plain(str(fn)) == plain(before)
    assert str(pipeline.run(fn, "discharge", verify=True)) == plain(after)


def test_every_make_target_is_phony_and_the_readme_names_the_ones_to_run():
    """``make tpu-check`` was neither: a file of that name would have stopped it running."""
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    phony = set(re.search(r"^\.PHONY: (.*)$", makefile, re.M).group(1).split())
    assert targets == phony
    for target in targets - {"clean", "docs-serve"}:
        assert re.search(rf"make {target}(?![\w-])", README), target


def test_the_readme_says_how_to_put_the_commands_on_the_path():
    """``make demo`` installs into .venv; ``minipallas-opt`` is on the PATH once it is active."""
    assert "source .venv/bin/activate" in README
    commands = README.split("## Seeing what a pass did")[1].split("##")[0]
    assert "source .venv/bin/activate" in commands
