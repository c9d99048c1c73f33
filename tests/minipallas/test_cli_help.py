"""``minipallas-opt --help`` lists every registered pass and every lowering target, so a new
pass or target shows up there without anyone editing the help text."""

import pytest

from minipallas.cli import main
from minipallas.lowering import TARGETS
from minipallas.passes.registry import PASSES


@pytest.fixture(scope="module")
def help_text():
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    return out.getvalue()


def test_help_lists_every_pass_with_its_options(help_text):
    assert PASSES
    for name, info in PASSES.items():
        kind = " [kernel pass]" if info.subject == "kernel" else ""
        assert f"\n  {name}{kind}: " in help_text, name
        for option in info.options:
            assert f"\n      {option.name}  (" in help_text, (name, option.name)


def test_help_lists_every_target(help_text):
    listed = help_text.split("targets (--emit=NAME):")[1]
    for name, target in TARGETS.items():
        assert f"\n  {name} " in listed and target.doc in listed, name


def test_help_says_a_kernel_file_prints_its_ir(help_text):
    assert "Without --emit its kernel body's IR is printed" in help_text
