"""A researcher's pass under the difftest and every fuzzer (``--load``, ``--pass-pipeline``,
``Case.passes``): a correct pass gives no finding, a wrong one a finding that names it and
shows its IR before and after. Each run is short and seeded."""

from __future__ import annotations

import argparse
import os
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import minipallas.tools.fuzz.programs as fuzz
from minipallas.lowering.tpu import aot
from minipallas.tools.difftest import Case, cli, ref, run
from minipallas.tools.fuzz import kernels as fuzz_kernels
from minipallas.tools.fuzz import tpu as fuzz_tpu
from minipallas.tools.fuzz import upstream as fuzz_upstream
from minipallas.tools.user_passes import loaded

# add-to-sub (a float add becomes a sub, wrong on purpose) and noop (returns its input)
WRONG = Path(__file__).parent.parent / "tools" / "fuzz" / "fuzz_planted_passes.py"

CASES = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl

    from minipallas.tools.difftest import Case, ref

    def scale_add(r):
        r[...] = r[...] + r[...] * 2.0

    def plus_one(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    def kernel(x):
        spec = pl.BlockSpec((8, 128), lambda i: (0, i))
        out = jax.ShapeDtypeStruct((8, 512), jnp.float32)
        return pl.pallas_call(
            plus_one, out, grid=(4,), in_specs=[spec], out_specs=spec, interpret=True,
            name="plus_one",
        )(x)

    CASES = [
        Case("program", scale_add, (ref(np.arange(4, dtype=np.float32)),)),
        Case("kernel", kernel, (np.arange(8 * 512, dtype=np.float32).reshape(8, 512),)),
    ]
    """
)
FUSE = "fuse-grid-steps{min_steps=2}"  # the test kernel's 4 steps become 1


@pytest.fixture
def passes(tmp_path):
    path = tmp_path / "my_passes.py"
    path.write_text(WRONG.read_text())
    return str(path)


@pytest.fixture
def cases(tmp_path):
    path = tmp_path / "cases.py"
    path.write_text(CASES)
    return str(path)


def test_a_correct_pass_gives_no_finding_and_show_prints_the_ir_after_it(passes, cases, capsys):
    """fuse-grid-steps (a kernel pass) on the kernel; the program case, without kernels, runs
    without it and says so."""
    assert cli.main([cases, "--load", passes, "--pass-pipeline", f"noop,{FUSE}", "--show"]) == 0
    out = capsys.readouterr().out
    assert "2 agree (bit for bit)" in out and "2 cases, 0 not as expected" in out
    after = out.split(f"--- minipallas IR after the pipeline 'noop,{FUSE}' (each kernel) ---")[1]
    assert after.splitlines()[1] == "kernel plus_one: grid (1,)"
    assert "(not run: the case has no kernel, and the pipeline has a kernel pass)" in out
    assert "pass noop changed 0 of 1 cases: it was never exercised" in out
    assert f"pass {FUSE} changed 1 of 1 cases\n" in out
    missed = "the pipeline did not run on 1 of 2 cases: program (no kernel for its kernel pass)"
    assert missed in out


def _scale_add(r):
    r[...] = r[...] + r[...] * 2.0


def test_a_correct_pass_on_a_program_runs_after_discharge_and_cleanup(passes):
    """From Python: ``Case(passes=...)``, the passes registered (here loaded as --load does)."""
    with loaded(argparse.Namespace(load=[passes], pass_pipeline="")):
        args = (ref(np.arange(4, dtype=np.float32)),)
        report = run(Case("program", _scale_add, args, passes="noop"))
    ways = ("discharge", "compile", "xla-tpu")
    assert report.finding.kind == "agree" and report.pipeline_ways == ways
    assert report.outcomes["compile"].ok and report.blame is None
    assert "get" not in report.pipeline_ir and "add" in report.pipeline_ir  # discharged, cleaned


def test_a_wrong_pass_on_a_program_shows_in_every_way_it_runs_in(passes):
    """A case without kernels: the pipeline runs in the discharge way as well as compile's."""
    with loaded(argparse.Namespace(load=[passes], pass_pipeline="")):
        args = (ref(np.arange(4, dtype=np.float32)),)
        report = run(Case("program", _scale_add, args, passes="add-to-sub"))
    assert report.finding.name == "pass add-to-sub"
    assert report.difference.way == "discharge", report.text()


def test_a_wrong_pass_is_named_with_its_ir_before_and_after(passes, cases, capsys):
    """On the program after discharge and cleanup (the compile way), and on the kernel (the
    discharge and compile ways): each case's finding names the pass, the second of the
    pipeline, and shows the add before it and the sub after it."""
    argv = [cases, "--load", passes, "--pass-pipeline", "noop,add-to-sub", "--show"]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[2:4]}
    for name in ("program", "kernel"):
        assert "pass-bug (pass add-to-sub)" in rows[name]
        report = out.split(f"case {name}: pass-bug (pass add-to-sub)")[1]
        assert (
            "the pass: pass 'add-to-sub' (pass 2 of 'noop,add-to-sub'): the outputs change"
            in report
        )
        before = report.split("--- IR before pass 'add-to-sub' ---")[1].split("--- IR after")[0]
        after = report.split("--- IR after pass 'add-to-sub' ---")[1].split("\ncase ")[0]
        assert " = add " in before and " = sub " not in before and " = sub " in after
    assert "kernel plus_one: grid (4,)" in out.split("case kernel:")[1]  # the kernel, as text
    assert "pass noop changed 0 of 2 cases: it was never exercised" in out
    assert "pass add-to-sub changed 2 of 2 cases\n" in out


# The trap of issue 48: a pass that matches the divisor ``constant 2.0`` itself never fires on
# a traced kernel, which divides by its broadcast, and the case still read as "1 agree".
DIV_PASSES = textwrap.dedent(
    """
    import numpy as np

    from minipallas.ir.core import Block, Function, Op, Value
    from minipallas.ir.literal import Literal
    from minipallas.passes.registry import register


    def _halved(block, splats):
        defs, ops = {}, []
        for op in block.ops:
            d = defs.get(op.operands[1]) if op.name == "div" else None
            b = d if splats and d is not None and d.name == "broadcast_in_dim" else None
            c = defs.get(b.operands[0]) if b is not None else d
            if c is not None and c.name == "constant" and np.all(c.attrs["value"].array() == 2):
                t = c.results[0].type
                half = Op("constant", (), (Value(t),), {"value": Literal.of(0.5, t.dtype)})
                ops.append(half)
                y = half.results[0]
                if b is not None:
                    ops.append(b.replace(operands=(y,), results=(Value(b.results[0].type),)))
                    y = ops[-1].results[0]
                op = op.replace(name="mul", operands=(op.operands[0], y))
            defs.update((r, op) for r in op.results)
            ops.append(op)
        return Block(block.params, tuple(ops), block.results)


    @register("div-to-mul", doc="x / 2.0 -> x * 0.5, the divisor a constant")
    def div_to_mul(fn):
        return Function(fn.name, _halved(fn.body, splats=False))


    @register("div-to-mul-splat", doc="the same, the divisor a constant or its broadcast")
    def div_to_mul_splat(fn):
        return Function(fn.name, _halved(fn.body, splats=True))
    """
)
HALVE = textwrap.dedent(
    """
    import jax
    import numpy as np
    from jax.experimental import pallas as pl

    from minipallas.tools.difftest import Case

    def halve(x_ref, o_ref):
        o_ref[...] = x_ref[...] / 2.0

    def kernel(x):
        return pl.pallas_call(halve, jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=True)(x)

    CASES = [Case("halve", kernel, (np.arange(8 * 128, dtype=np.float32).reshape(8, 128),))]
    """
)


def test_the_difftest_says_when_a_pass_never_fired(tmp_path, capsys):
    """Both passes agree; only the counts under the table tell the one that did nothing."""
    (tmp_path / "my_pass.py").write_text(DIV_PASSES)
    (tmp_path / "halve_cases.py").write_text(HALVE)
    argv = [str(tmp_path / "halve_cases.py"), "--load", str(tmp_path / "my_pass.py")]
    assert cli.main([*argv, "--pass-pipeline=div-to-mul,div-to-mul-splat", "--show"]) == 0
    out = capsys.readouterr().out
    assert "1 agree (bit for bit)" in out
    assert "pass div-to-mul changed 0 of 1 cases: it was never exercised" in out
    assert "pass div-to-mul-splat changed 1 of 1 cases\n" in out
    after = out.split("--- minipallas IR after the pipeline")[1]
    assert " = div " not in after and " = mul " in after


def test_a_wrong_loaded_pattern_is_counted_and_blamed(cases, capsys):
    """A ``@pattern`` (``x * 2.0 -> x + 2.0``, wrong) is counted on the case it rewrites in,
    and the finding is its own: the cleanup before the pipeline applies it too, so no pass of
    the pipeline changes the outputs (the case read as ``minipallas-bug`` before)."""
    patterns = str(Path(__file__).parent.parent / "tools" / "fuzz" / "fuzz_planted_patterns.py")
    argv = [cases, "-k", "program", "--load", patterns, "--pass-pipeline=cleanup", "--show"]
    assert cli.main(argv) == 1
    out = capsys.readouterr().out
    assert "pattern twice_is_plus_two rewrote 1 of 1 cases\n" in out
    assert "program  pass-bug (pass pattern twice_is_plus_two)  NO" in out.splitlines()[2]
    without = out.split("--- IR after the pipeline without pattern twice_is_plus_two ---")[1]
    without, with_it = without.split("--- IR after the pipeline with pattern twice_is_plus_two ---")
    assert " = mul " in without and " = mul " not in with_it
    # without a pipeline, files that register patterns run under cleanup, and are blamed too
    assert cli.main(argv[:5]) == 1
    out, err = capsys.readouterr()
    assert "program  pass-bug (pass pattern twice_is_plus_two)  NO" in out.splitlines()[2]
    assert "@pattern rewrites run as --pass-pipeline=cleanup" in err


def test_every_tool_takes_the_flags_and_checks_the_pipeline_first(passes, capsys):
    """An unknown pass stops each command before it runs anything (exit 2, as a bad argument)."""
    flags = ["--load", passes, "--pass-pipeline", "noop,no-such-pass"]
    mains = [
        lambda: cli.main(["no_cases.py", *flags]),
        lambda: fuzz.main(["--count", "1", *flags]),
        lambda: fuzz_upstream.main(["--count", "1", *flags]),
        lambda: fuzz_kernels.main(["--count", "1", *flags]),
        lambda: fuzz_tpu.main(["--aot", "--count", "1", *flags]),
    ]
    for main in mains:
        assert main() == 2
        assert "unknown pass 'no-such-pass'" in capsys.readouterr().err


def test_the_discharge_fuzzer_checks_the_pipeline_after_discharge_and_cleanup(passes, capsys):
    flags = ["--seed", "4", "--batch", "10", "--max-stmts", "4", "--seconds", "1e9"]
    assert fuzz.main([*flags, "--count", "10", "--load", passes, "--pass-pipeline", "noop"]) == 0
    assert "fuzzing discharge, then 'noop'" in capsys.readouterr().out
    argv = [*flags, "--count", "30", "--max-failures", "1", "--load", passes]
    assert fuzz.main([*argv, "--pass-pipeline", "cleanup,add-to-sub"]) == 1
    out = capsys.readouterr().out
    assert "=== failure 1: pass add-to-sub ===" in out and "# pipeline: cleanup,add-to-sub" in out
    assert (
        "--- IR before pass 'add-to-sub' ---" in out and "--- IR after pass 'add-to-sub' ---" in out
    )


def test_the_upstream_fuzzer_names_the_pass(passes, capsys, tmp_path):
    argv = ["--count", "5", "--batch", "5", "--seed", "3", "--max-stmts", "5"]
    argv += ["--shrink-seconds", "1", "--save", str(tmp_path / "found"), "--load", passes]
    assert fuzz_upstream.main([*argv, "--pass-pipeline", "add-to-sub"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^pass add-to-sub +pass-bug +\d+ ", out, re.M)
    assert re.search(r"^pass add-to-sub changed [1-9]\d* of 5 programs$", out, re.M)
    assert "--- IR after pass 'add-to-sub' ---" in out
    (saved,) = (tmp_path / "found").glob("*pass-add-to-sub.txt")
    assert "# pipeline: add-to-sub" in saved.read_text()
    assert fuzz_upstream.main(["--replay", str(saved), "--load", passes]) == 1
    assert f"case {saved.stem}: pass-bug (pass add-to-sub)" in capsys.readouterr().out


def test_the_kernel_fuzzer_runs_the_pipeline_on_every_kernel(passes, capsys):
    """Seed 3's first kernel adds floats."""
    argv = ["--count", "1", "--seconds", "1e9", "--seed", "3", "--load", passes]
    assert fuzz_kernels.main([*argv, "--pass-pipeline", FUSE]) == 0
    assert fuzz_kernels.main([*argv, "--pass-pipeline", "noop,add-to-sub"]) == 1
    out = capsys.readouterr().out
    assert "pass noop changed 0 of 1 kernels: it was never exercised" in out
    assert "pass add-to-sub changed 1 of 1 kernels\n" in out
    assert "the pass: pass 'add-to-sub' (pass 2 of 'noop,add-to-sub'): the outputs change" in out
    assert "--- IR before pass 'add-to-sub' ---\nkernel random_kernel: grid" in out


@pytest.mark.skipif(
    not aot.libtpu_available() and not os.environ.get("CI"), reason="libtpu is not installed"
)
def test_the_tpu_fuzzer_runs_the_pipeline_on_minipallas_side(passes, capsys):
    """--aot: libtpu compiles the module of the kernel after the pipeline, and the CPU runs the
    kernel with and without it."""
    argv = ["--aot", "--count", "1", "--seconds", "1e9", "--seed", "1", "--load", passes]
    assert fuzz_tpu.main([*argv, "--pass-pipeline", FUSE]) == 0
    assert fuzz_tpu.main([*argv, "--pass-pipeline", "add-to-sub"]) == 1
    out = capsys.readouterr().out
    assert "pass add-to-sub changed 1 of 1 kernels\n" in out
    assert "FINDING pass-bug (kernel 0" in out and "--- IR after pass 'add-to-sub' ---" in out
