"""``minipallas-opt`` and pass options: ``--help`` lists the passes and their options, options are
parsed with their types, and a bad option is a clean error naming the pass and the option."""

import subprocess
import sys

import numpy as np
import pytest

import minipallas as mp
from minipallas.cli import main
from minipallas.passes.pipeline import PASSES

F8 = mp.RefType((8,), "float32")


@pytest.fixture
def scoped_file(tmp_path):
    """A program whose scratch lives in a ``run_scoped``, as text IR."""

    def k(x, o):
        def body(s):
            s[...] = x[...] * 2.0
            o[...] = s[...]

        mp.run_scoped(body, F8)

    path = tmp_path / "scoped.mir"
    path.write_text(str(mp.trace(k, F8, F8)))
    return path


def test_help_lists_every_pass_and_option(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for name, pass_info in PASSES.items():
        assert f"\n  {name}: {pass_info.doc}\n" in out
        for option in pass_info.options:
            assert f"      {option.name}={option.type.example}  ({option.type.accepts}" in out
    assert "discharge_scoped=false  (true or false; default true)" in out


def test_discharge_scoped_false_keeps_the_scratch_a_ref(scoped_file, capsys):
    """Once ``TypeError: 'str' object is not callable``."""
    assert main([str(scoped_file), "--pass-pipeline=discharge{discharge_scoped=false}"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    fn = mp.parse(out)
    assert fn.params[0].type == mp.ArrayType((8,), "float32")
    (scoped,) = [op for op in fn.walk() if op.name == "run_scoped"]
    assert scoped.regions[0].params[0].type == F8
    assert str(fn) == str(mp.discharge(mp.parse(scoped_file.read_text()), discharge_scoped=False))
    _, o = mp.interpret(fn, np.arange(8, dtype=np.float32), np.zeros(8, np.float32))
    np.testing.assert_array_equal(o, np.arange(8, dtype=np.float32) * 2)


@pytest.mark.parametrize(
    "pipeline, message",
    [
        (
            "discharge{discharge_scoped=maybe}",
            "pass 'discharge': option 'discharge_scoped' takes true or false, got 'maybe' in "
            "'discharge{discharge_scoped=maybe}'\n  fix: e.g. discharge{discharge_scoped=false} "
            "(false keeps run_scoped allocations as refs)",
        ),
        (
            "cleanup,discharge{scoped=false}",
            "pass 'discharge' has no option 'scoped'\n"
            "  fix: its options: discharge_scoped (true or false)",
        ),
    ],
)
def test_a_bad_option_is_a_clean_error_before_anything_runs(scoped_file, capsys, pipeline, message):
    assert main([str(scoped_file), f"--pass-pipeline={pipeline}", "--print-ir-after-all"]) == 1
    out, err = capsys.readouterr()
    assert out == ""  # not even cleanup ran
    assert err == f"{scoped_file}: {message}\n"


def test_the_installed_script_rejects_a_bad_option(scoped_file):
    script = [sys.executable, "-m", "minipallas.cli"]
    done = subprocess.run(
        [*script, str(scoped_file), "--pass-pipeline=batch{sizes=4y}"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(
        f"{scoped_file}: pass 'batch': option 'sizes' takes non-negative integers joined by 'x', "
        "got '4y'"
    )
