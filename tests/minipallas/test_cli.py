"""``minipallas-opt``: called in-process through ``main`` (with capsys) and, once, as the
installed console script."""

import io
import os
import subprocess
import sys
import textwrap

import pytest

from minipallas.cli import main
from minipallas.passes import pipeline

KERNEL = textwrap.dedent("""
    func @kernel(%r: Ref{f32[8]}, %i: i32[]) -> (f32[]) {
      %v = get %r[%i] : f32[]
      %w = neg %v : f32[]
      store %r[%i], %w
      return %v
    }
""").lstrip()
PRINTED = textwrap.dedent("""
    func @kernel(%0: Ref{f32[8]}, %1: i32[]) -> (f32[]) effects {read 0, write 0} {
      %2 = get %0[%1] : f32[]
      %3 = neg %2 : f32[]
      store %0[%1], %3
      return %2
    }
""").lstrip()


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "kernel.mir"
    path.write_text(KERNEL)
    return path


def test_parse_verify_print(kernel_file, capsys):
    assert main([str(kernel_file)]) == 0
    out, err = capsys.readouterr()
    assert out == PRINTED
    assert err == ""


def test_reads_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(KERNEL))
    assert main(["-"]) == 0
    assert capsys.readouterr().out == PRINTED


def test_parse_error_is_reported_at_line_and_column(tmp_path, capsys):
    path = tmp_path / "bad.mir"
    path.write_text(KERNEL.replace("%w = neg %v : f32[]", "%w = neg %v f32[]"))
    assert main([str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (  # the lines around it, a caret under the column
        f"{path}:3:15: expected ':' after operand list, got 'f32'\n"
        "  func @kernel(%r: Ref{f32[8]}, %i: i32[]) -> (f32[]) {\n"
        "    %v = get %r[%i] : f32[]\n"
        "    %w = neg %v f32[]\n"
        "                ^\n"
        "    store %r[%i], %w\n"
        "    return %v\n"
    )


def test_stdin_errors_name_stdin(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("func @f() -> () {\n  %x = what\n"))
    assert main(["-"]) == 1
    assert capsys.readouterr().err == (
        "<stdin>:2:8: unknown op 'what'\n"
        "  fix: the op reference (docs/reference/ops.md) lists every op\n"
        "  func @f() -> () {\n    %x = what\n         ^\n"
    )


def test_verifier_errors_are_reported(tmp_path, capsys):
    # well formed text, every op well typed, but functions may not return refs
    path = tmp_path / "ref_result.mir"
    path.write_text("func @f(%r: Ref{f32[8]}) -> (Ref{f32[8]}) {\n  return %r\n}\n")
    assert main([str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"{path}: ")
    assert "result 0 of @f is a Ref (Ref{f32[8]})" in err
    assert "Traceback" not in err


def test_missing_file(tmp_path, capsys):
    assert main([str(tmp_path / "nope.mir")]) == 2  # a usage error
    assert "cannot read" in capsys.readouterr().err


def test_locations_flag(kernel_file, capsys):
    assert main([str(kernel_file), "--locations"]) == 0
    assert "%2 = get %0[%1] : f32[] loc(2:8)" in capsys.readouterr().out


def test_print_effects(kernel_file, capsys):
    assert main([str(kernel_file), "--print-effects"]) == 0
    out = capsys.readouterr().out
    assert out == "// effects of @kernel: {read 0, write 0}\n" + PRINTED


def fake_pipeline(monkeypatch, calls):
    """Stands in for ``minipallas.passes.pipeline.run`` to check what the CLI asks of it."""

    def run(fn, names, *, verify=False, after_each=None):
        calls.append((names, verify, after_each is not None))
        for name in names.split(","):
            if after_each is not None:
                after_each(name, fn)
        return fn

    monkeypatch.setattr(pipeline, "run", run)
    # the CLI checks the pipeline's names before reading its input: any name is one here
    monkeypatch.setattr(pipeline, "parse_pipeline", lambda p: [(n, {}) for n in p.split(",")])


def test_pipeline_and_print_ir_after_all(kernel_file, capsys, monkeypatch):
    calls = []
    fake_pipeline(monkeypatch, calls)
    assert main([str(kernel_file), "--pass-pipeline=a,b", "--print-ir-after-all"]) == 0
    assert calls == [("a,b", True, True)]
    out = capsys.readouterr().out
    assert out == (
        "// -----// IR Dump After a //----- //\n" + PRINTED + "\n"
        "// -----// IR Dump After b //----- //\n" + PRINTED + "\n" + PRINTED
    )


def test_pipeline_without_dumps(kernel_file, capsys, monkeypatch):
    calls = []
    fake_pipeline(monkeypatch, calls)
    assert main([str(kernel_file), "--pass-pipeline=a"]) == 0
    assert calls == [("a", True, False)]
    assert capsys.readouterr().out == PRINTED


def test_real_pipeline_discharges(kernel_file, capsys):
    assert main([str(kernel_file), "--pass-pipeline=collectives,discharge"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("func @kernel(%0: f32[8], %1: i32[]) -> (f32[], f32[8]) {")


def test_unknown_pass_is_a_clean_error(kernel_file, capsys):
    assert main([str(kernel_file), "--pass-pipeline=nonsense"]) == 2  # a usage error
    out, err = capsys.readouterr()
    assert "unknown pass 'nonsense'" in err
    assert "Traceback" not in err
    assert out == ""


def test_collective_axes_error_keeps_upstream_message(tmp_path, capsys):
    path = tmp_path / "shared.mir"
    path.write_text(
        textwrap.dedent("""
        func @f(%r: Ref{f32[8]}) -> () {
          run_scoped(%r) collective_axes ("x") {
          ^(%s: Ref{f32[8]}, %in: Ref{f32[8]}):
            yield
          }
          return
        }
    """)
    )
    assert main([str(path), "--pass-pipeline=collectives"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{path}: run_scoped discharge does not support collective_axes yet."
    assert "3:3" in err[1]


def test_split_input_file(tmp_path, capsys):
    path = tmp_path / "pieces.mir"
    path.write_text(
        "func @a() -> () {\n  return\n}\n// -----\nfunc @b() -> () {\n  %x = nope\n}\n"
        "// -----\nfunc @c() -> () {\n  return\n}\n"
    )
    assert main([str(path), "--split-input-file"]) == 1
    out, err = capsys.readouterr()
    assert (
        out
        == "func @a() -> () {\n  return\n}\n// -----\n// -----\nfunc @c() -> () {\n  return\n}\n"
    )
    assert err == (  # line numbers and lines of the whole file; other pieces are blank
        f"{path}:6:8: unknown op 'nope'\n"
        "  fix: the op reference (docs/reference/ops.md) lists every op\n"
        "\n  func @b() -> () {\n    %x = nope\n         ^\n  }\n"
    )


def test_bad_arguments_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--no-such-flag", "x.mir"])
    assert info.value.code == 2


def test_console_script_and_module(kernel_file):
    bindir = os.path.dirname(sys.executable)
    for command in (
        [os.path.join(bindir, "minipallas-opt"), "-"],
        [sys.executable, "-m", "minipallas.cli", "-"],
    ):
        run = subprocess.run(command, input=KERNEL, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert run.stdout == PRINTED
    run = subprocess.run(
        [os.path.join(bindir, "minipallas-opt"), "-"],
        input="func @f(",
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1
    assert (
        run.stderr == "<stdin>:1:9: expected a parameter name like %0 in the parameter "
        "list, got end of input\n  func @f(\n          ^\n"
    )


BAD_KERNELS = {  # a kernel file's mistake, and where the error says it is: (line, message)
    "index_map": (
        "spec = mp.BlockSpec((8, 128), lambda i, j: (i, j * 0.5))",
        9,
        "the index map of input 0 must return integer scalars, got f32[]",
    ),
    "index_map_rank": (
        "spec = mp.BlockSpec((8, 128), lambda i, j: (i, j, 0))",
        9,
        "the index map of input 0 returns 3 block indices, but the array has 2 dimensions",
    ),
    "block_rank": (
        "spec = mp.BlockSpec((8,), lambda i, j: (i,))",
        None,  # about the call's arguments: no line of the file, and none of minipallas-opt's
        "the block shape (8,) of input 0 has 1 dimensions, but the array f32[64,256] has 2",
    ),
}


@pytest.mark.parametrize("case", BAD_KERNELS)
def test_a_kernel_files_errors_are_located_in_the_file_not_in_minipallas_opt(tmp_path, case):
    """Traced after the file has run, a kernel's index maps are not on the stack: an index
    map's error is at its own line, and no error is located in the installed minipallas-opt
    script or in runpy (both launch the user's file)."""
    spec, line, message = BAD_KERNELS[case]
    path = tmp_path / "kernel.py"
    path.write_text(
        "import minipallas as mp\n\n\ndef add(x_ref, o_ref):\n    o_ref[...] = x_ref[...] + 1\n"
        f'\n\nf32 = mp.ArrayType((64, 256), "float32")\n{spec}\n'
        "KERNEL = mp.pallas_call(add, f32, grid=(8, 2), in_specs=[spec], out_specs=spec)\n"
        "ARGS = (f32,)\n"
    )
    bindir = os.path.dirname(sys.executable)
    for command in (
        [os.path.join(bindir, "minipallas-opt")],
        [sys.executable, "-m", "minipallas.cli"],
    ):
        run = subprocess.run(
            [*command, str(path), "--emit=stablehlo"], capture_output=True, text=True
        )
        assert run.returncode == 1
        where = f"{path}:{line}" if line else str(path)
        assert run.stderr.startswith(f"{where}: {message}\n  fix: "), run.stderr
