"""``minipallas-opt --emit=gpu`` / ``--emit=ptx`` on a kernel file."""

import pytest

from minipallas.cli import main

KERNEL = """\
import minipallas as mp
def add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]
f32 = mp.ArrayType((20, 300), "float32")
spec = mp.BlockSpec((8, 128), lambda i, j: (i, j))
KERNEL = mp.pallas_call(add, f32, grid=(3, 3), in_specs=[spec, spec], out_specs=spec)
ARGS = (f32, f32)
"""


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "add_kernel.py"
    path.write_text(KERNEL)
    return str(path)


def test_emit_gpu_prints_the_triton_module(kernel_file, capsys):
    assert main([kernel_file, "--emit=gpu", "--locations"]) == 0
    out = capsys.readouterr().out
    assert "tt.func public @add(" in out and "tt.store" in out
    assert "add_kernel.py" in out  # the kernel file's lines as locations


def test_emit_ptx_prints_ptx(kernel_file, capsys):
    pytest.importorskip("triton")
    assert main([kernel_file, "--emit=ptx"]) == 0
    assert ".visible .entry add(" in capsys.readouterr().out


def test_emit_gpu_needs_a_kernel_file(tmp_path, capsys):
    path = tmp_path / "f.mir"
    path.write_text("func @f() {\n  return\n}\n")
    assert main([str(path), "--emit=gpu"]) == 2
    assert "--emit=gpu takes a kernel file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "passes", "emitted"),
    [
        ("gpu", ["collectives", "discharge", "cleanup"], "tt.func public @add("),
        ("tpu", ["collectives", "fuse-grid-steps"], "func.func @add("),
        # the CPU program is built from the kernel body by stages of their own (the body's
        # passes, its batched form, the program), before the target's pipeline
        (
            "stablehlo",
            [
                *("bind-grid", "discharge", "cleanup", "drop-inputs", "cleanup", "batch-grid"),
                *("cpu-program", "collectives", "discharge", "cleanup"),
            ],
            "func.func @main(",
        ),
    ],
)
def test_print_ir_after_all_dumps_a_kernels_pipeline(kernel_file, capsys, target, passes, emitted):
    """The target table's pipeline for the kernel, each pass's result, then the module."""
    assert main([kernel_file, f"--emit={target}", "--print-ir-after-all"]) == 0
    out = capsys.readouterr().out
    dumps = [line for line in out.splitlines() if line.startswith("// -----// IR Dump After")]
    assert dumps == [f"// -----// IR Dump After {name} //----- //" for name in passes]
    assert out.index(dumps[-1]) < out.index(emitted)
