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
    assert main([str(kernel_file), "--pass-pipeline=mul-by-two"]) == 2
    assert "unknown pass 'mul-by-two'" in capsys.readouterr().err


def test_load_of_a_missing_file_is_a_clean_error(kernel_file, capsys):
    assert main([str(kernel_file), "--load", "nope.py"]) == 2
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


def test_each_step_from_kernel_body_to_cpu_program_is_a_stage(capsys):
    """The kernel body is the input of the first stage; each pass that binds and discharges it
    shows by name, then the batched body and the CPU program, then the target's passes."""
    assert main([str(KERNEL_FILE), "--emit=stablehlo", "--print-ir-before-all",
                 "--print-ir-after-all"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    dumps = [line.split()[4:6] for line in out.splitlines() if line.startswith("// -----// IR")]
    stages = ["bind-grid", "discharge", "cleanup", "drop-inputs", "cleanup", "batch-grid",
              "cpu-program", "collectives", "discharge", "cleanup"]  # fmt: skip
    assert dumps == [[when, s] for s in stages for when in ("Before", "After")]
    body, rest = out.split("// -----// IR Dump After bind-grid //----- //\n")
    assert body.startswith("// -----// IR Dump Before bind-grid //----- //\nfunc @scale(")
    assert "program_id" in body and "program_id" not in rest.split("\n\n")[0]
    program = out.split("// -----// IR Dump After cpu-program //----- //\n")[1]
    assert "func @scale_grid(" in program.split("IR Dump Before collectives")[0]


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


def test_hoisting_is_a_stage_and_the_same_pipeline_prints_the_same_body(capsys):
    """The row sum's loop over j keeps only the add: hoist-invariant shows as a stage of
    --emit=stablehlo, and --pass-pipeline with the same passes prints the same IR."""
    kernel_file = str(ROOT / "tests" / "kernels" / "filecheck" / "stages.py")
    assert main([kernel_file, "--emit=stablehlo", "--print-ir-after-all"]) == 0
    out = capsys.readouterr().out
    hoisted = out.split("// -----// IR Dump After hoist-invariant //----- //\n")[1]
    hoisted = hoisted.split("// -----//")[0]
    passes = ("bind-grid{grid=2x4},discharge,cleanup,drop-inputs{count=1},cleanup,"
              "hoist-invariant{grid=2x4,inputs=1}")  # fmt: skip
    assert main([kernel_file, f"--pass-pipeline={passes}"]) == 0
    assert capsys.readouterr().out + "\n" == hoisted
    assert "call @row_sum_pre(" in hoisted


def test_promote_scratch_is_a_stage_of_the_tpu_path(tmp_path, capsys):
    """--promote-scratch appends the registered pass to the TPU pipeline: its dump is the body
    the emitter takes, as --pass-pipeline=promote-scratch prints it."""
    path = tmp_path / "staged.py"
    path.write_text(STAGED)
    assert main([str(path), "--emit=tpu", "--promote-scratch", "--print-ir-after-all"]) == 0
    out = capsys.readouterr().out
    dumps = [line.split()[5] for line in out.splitlines() if line.startswith("// -----// IR")]
    assert dumps == ["collectives", "fuse-grid-steps", "promote-scratch"]
    promoted = out.split("// -----// IR Dump After promote-scratch //----- //\n")[1]
    promoted, module = promoted.split("\n\n", 1)
    assert "run_scoped" not in promoted and "memref.alloca" not in module
    assert main([str(path), "--pass-pipeline=promote-scratch"]) == 0
    # without --emit, the kernel's blocks name no memory space; the TPU path puts them in VMEM
    assert capsys.readouterr().out == promoted.replace(", tpu.vmem", "") + "\n"


STAGED = textwrap.dedent("""
    import minipallas as mp
    from minipallas.tpu import VMEM

    f32 = mp.ArrayType((16, 128), "float32")
    spec = mp.BlockSpec((8, 128), lambda i: (i, 0))

    def staged(x_ref, o_ref):
        def scoped(t_ref):
            t_ref[...] = x_ref[...] * 2.0
            t_ref[0:1, :] = t_ref[1:2, :]
            o_ref[...] = t_ref[...] + 1.0

        mp.run_scoped(scoped, VMEM((8, 128), "float32"))

    KERNEL = mp.pallas_call(staged, f32, grid=(2,), in_specs=[spec], out_specs=spec)
    ARGS = (f32,)
""")
