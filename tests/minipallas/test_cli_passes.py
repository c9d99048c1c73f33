"""``minipallas-opt`` and pass options: ``--help`` lists every declared pass with its options
(type, default, doc) and every target, options are parsed with their types, and a bad option is a
clean error naming the pass and the option."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minipallas as mp
import minipallas.passes
from minipallas.cli import EMIT_TARGETS, main
from minipallas.passes.registry import PASSES, REQUIRED

F8 = mp.RefType((8,), "float32")
SOURCES = ("ir", "passes", "lowering", "minipallas")  # setup.cfg's package_dir


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


def declared_passes() -> dict[str, list[str]]:
    """Pass name -> option names, read from the ``@register(...)`` decorators in the passes'
    source (under whatever name the module imports ``registry.register``), not from ``PASSES``:
    so a declared pass that never reaches the registry is caught."""
    declared = {}
    root = Path(__file__).resolve().parents[2]  # the source tree: every floor
    for path in (p for folder in SOURCES for p in (root / folder).rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "minipallas.passes.registry"
            for alias in node.names
            if alias.name == "register"
        }
        for node in ast.walk(tree):
            for deco in getattr(node, "decorator_list", ()):
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) in names:
                    options = [a.args[0].value for a in deco.args[1:]]
                    declared[deco.args[0].value] = options
    return declared


def test_help_lists_every_declared_pass_and_option_and_every_target():
    """``--help`` in a fresh process: only the CLI's own imports fill the registry."""
    done = subprocess.run(
        [sys.executable, "-m", "minipallas.cli", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    declared = declared_passes()
    assert set(declared) == set(PASSES)
    assert set(PASSES) == {"batch", "bind-grid", "cleanup", "collectives", "discharge",
                           "drop-inputs", "fuse-grid-steps", "hoist-invariant",
                           "promote-scratch", "reassociate-sums"}  # fmt: skip
    listing = out[out.index("passes (") : out.index("\n\ntargets (")].splitlines()[1:]
    names = [line[2:].partition(":")[0].split()[0] for line in listing if line[2] != " "]
    assert names == sorted(declared)
    assert "\n  fuse-grid-steps [kernel pass]: " in out
    for name, options in declared.items():
        info = PASSES[name]
        assert [o.name for o in info.options] == options
        kind = " [kernel pass]" if info.subject == "kernel" else ""
        assert f"\n  {name}{kind}: {info.doc}\n" in out
        for o in info.options:
            default = info.defaults[o.name]
            shown = "required, e.g. " if default is REQUIRED else "default "
            assert f"\n      {o.name}  ({o.type.accepts}; {shown}" in out
            assert f"\n          {o.doc}\n" in out
    assert "discharge_scoped  (true or false; default true)" in out  # no example as a default
    assert "sizes  (non-negative integers joined by 'x'; required, e.g. sizes=4x2)" in out
    for target, doc in EMIT_TARGETS.items():
        assert f"\n  {target:<9}  {doc}\n" in out


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
            "  fix: its options: discharge_scoped (true or false), keep_params (an integer), "
            "collectives (one of reject, simulate)",
        ),
    ],
)
def test_a_bad_option_is_a_clean_error_before_anything_runs(scoped_file, capsys, pipeline, message):
    assert main([str(scoped_file), f"--pass-pipeline={pipeline}", "--print-ir-after-all"]) == 2
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
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(
        f"{scoped_file}: pass 'batch': option 'sizes' takes non-negative integers joined by 'x', "
        "got '4y'"
    )
