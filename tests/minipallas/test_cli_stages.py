"""``minipallas-opt`` shows every stage: the IR before each pass, the effects before and after
each, the kernel body and the CPU program built from it; ``--load`` runs a user's own pass;
``lower(verify=...)`` verifies between passes without the environment variable."""

import pathlib
import textwrap

import pytest

import minipallas as mp
from minipallas.cli import main
from minipallas.passes.registry import PASSES

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNEL = textwrap.dedent("""
    func @kernel(%r: Ref{f32[8]}, %i: i32[]) -> (f32[]) {
      %v = get %r[%i] : f32[]
      %two = constant 2.0 : f32[]
      %w = mul %v, %two : f32[]
      store %r[%i], %w
      return %v
    }
""").lstrip()


@pytest.fixture
def kernel_file(tmp_path):
    (tmp_path / "doubled.mir").write_text(KERNEL)
    return tmp_path / "doubled.mir"


def test_print_ir_before_all_shows_each_pass_input(kernel_file, capsys):
    assert main([str(kernel_file), "--pass-pipeline=discharge,cleanup",
                 "--print-ir-before-all"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    before_discharge, rest = out.split("// -----// IR Dump Before cleanup //----- //\n")
    assert before_discharge.startswith("// -----// IR Dump Before discharge //----- //\n")
    assert "store %0[%1]" in before_discharge  # the stateful input
    assert "dynamic_update_slice" in rest.split("\n\n")[0]  # cleanup's input: discharged
    assert "IR Dump After" not in out


def test_print_effects_before_and_after_each_pass(kernel_file, capsys):
    assert main([str(kernel_file), "--pass-pipeline=discharge,cleanup", "--print-effects"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:6] == [
        "// -----// Effects Before discharge //----- //",
        "// effects of @kernel: {read 0, write 0}",
        "// -----// Effects After discharge //----- //",
        "// effects of @kernel: {}",
        "// -----// Effects After cleanup //----- //",
        "// effects of @kernel: {}",
    ]
    assert lines[6].startswith("func @kernel(%0: f32[8]")


def test_load_registers_a_users_pass_for_one_command(kernel_file, capsys):
    """The new-pass chapter's pass runs from the command line, and is gone afterwards."""
    chapter = str(ROOT / "examples" / "ch13_new_pass.py")
    assert main([str(kernel_file), "--load", chapter, "--pass-pipeline=mul-by-two"]) == 0
    out = capsys.readouterr().out
    assert "add %2, %2 : f32[]" in out and " mul " not in out
    assert "mul-by-two" not in PASSES
    assert main([str(kernel_file), "--pass-pipeline=mul-by-two"]) == 1
    assert "unknown pass 'mul-by-two'" in capsys.readouterr().err


def test_load_of_a_missing_file_is_a_clean_error(kernel_file, capsys):
    assert main([str(kernel_file), "--load", "nope.py"]) == 1
    assert "minipallas-opt: cannot load nope.py" in capsys.readouterr().err


def test_text_ir_pipeline_runs_before_emit_and_both_show(kernel_file, capsys):
    """For text IR, --pass-pipeline goes with --emit: its passes, then the target's."""
    args = [str(kernel_file), "--pass-pipeline=discharge", "--emit=stablehlo"]
    assert main([*args, "--print-ir-after-all"]) == 0
    out = capsys.readouterr().out
    dumps = [line for line in out.splitlines() if "IR Dump After" in line]
    assert [d.split()[5] for d in dumps] == ["discharge", "collectives", "discharge", "cleanup"]
    assert "func.func public @main" in out or "func.func @main" in out


KERNEL_FILE = ROOT / "tests" / "minipallas" / "filecheck" / "kernel_file.py"


def test_a_kernels_cpu_program_is_a_stage_of_its_own(capsys):
    assert main([str(KERNEL_FILE), "--emit=stablehlo", "--print-ir-before-all",
                 "--print-ir-after-all"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    body, rest = out.split("// -----// IR Dump After cpu-program //----- //\n")
    assert body.startswith("// -----// IR Dump Before cpu-program //----- //\nfunc @scale(")
    assert "program_id" in body and "program_id" not in rest.split("\n\n")[0]
    assert "func @scale_grid(" in rest.split("IR Dump Before collectives")[0]


def test_lower_verify_is_an_argument(monkeypatch):
    """A malformed function (a result no op defines) is caught before the first pass with
    verify=True, whatever MINIPALLAS_VERIFY says; verify=False does not check it."""
    from minipallas.ir.core import Block, Function, Value

    monkeypatch.setenv("MINIPALLAS_VERIFY", "0")
    bad = Function("bad", Block((), (), (Value(mp.ArrayType((), "float32")),)))
    with pytest.raises(mp.VerificationError) as e:
        mp.lower(bad, verify=True)
    assert "failed to verify before the first pass" in "\n".join(e.value.__notes__)
    try:
        mp.lower(bad, verify=False)
    except mp.MiniPallasError as e:
        assert "failed to verify" not in "\n".join(getattr(e, "__notes__", []))


def test_bind_grid_is_a_pass_on_a_kernel_body(capsys):
    """A kernel body at one grid point, as the CPU runs it: program_id becomes a parameter."""
    pipeline = "--pass-pipeline=bind-grid{grid=8x2},discharge,cleanup"
    assert main([str(KERNEL_FILE), pipeline, "--print-ir-after-all"]) == 0
    bound = capsys.readouterr().out.split("// -----// IR Dump After discharge")[0]
    assert "func @scale(%0: i32[], %1: i32[], %2: Ref{f32[8,128]}" in bound
    assert "program_id" not in bound and "%6 = add %0, %5 : i32[]" in bound
