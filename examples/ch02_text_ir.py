"""Chapter 2: the text IR and minipallas-opt: write a program as text, check it, run passes on it.

Every program prints as text, and the text parses back to the same program: so a program can be
written by hand, kept in a file, and handed to ``minipallas-opt``, the compiler's command line
(as ``mlir-opt`` is MLIR's). This chapter parses a small kernel, shows a mistake caught at its
line and column, and runs ``minipallas-opt`` on the file: the IR before and after each pass.
The grammar is in docs/guides/text-syntax.md.
"""

import contextlib
import io
import pathlib
import tempfile

import numpy as np

import minipallas as mp
from minipallas.cli import main as minipallas_opt

TEXT = """\
func @scale(%x: Ref{f32[8]}, %o: Ref{f32[8]}, %i: i32[]) -> () {
  %v = get %x[:] : f32[8]
  %two = constant 2.0 : f32[8]
  %w = mul %v, %two : f32[8]
  store %o[:], %w
  %e = get %x[%i] : f32[]
  store %o[%i], %e
  return
}
"""


def run_cli(*args: str) -> str:
    """``minipallas-opt ARGS`` in this process; what it prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        minipallas_opt(list(args))
    return out.getvalue()


def main() -> None:
    print("--- 1. parsed and printed back: the printer names values %0, %1, ... ---")
    fn = mp.parse(TEXT)
    print(fn)
    assert str(mp.parse(str(fn))) == str(fn)  # text -> IR -> text is stable

    with tempfile.TemporaryDirectory() as folder:
        print("--- 2. minipallas-opt on a mistake: its line and column, the line, a caret ---")
        bad = pathlib.Path(folder) / "bad.mir"
        bad.write_text(TEXT.replace("%e = get %x[%i] : f32[]", "%e = get %x[%i] : f32[8]"))
        print(run_cli(str(bad)).replace(folder + "/", ""))
        path = pathlib.Path(folder) / "scale.mir"
        path.write_text(TEXT)
        print("\n--- 3. minipallas-opt scale.mir --print-effects ---")
        print(run_cli(str(path), "--print-effects"))
        print("--- 4. minipallas-opt scale.mir --pass-pipeline=discharge,cleanup "
              "--print-ir-after-all ---")  # fmt: skip
        print(run_cli(str(path), "--pass-pipeline=discharge,cleanup", "--print-ir-after-all"))

    x = np.arange(8, dtype=np.float32)
    o = np.zeros(8, np.float32)
    mp.interpret(fn, x, o, np.int32(3))
    print(f"interpreted: o = {o.tolist()}")  # 2 * x, except o[3] = x[3]


if __name__ == "__main__":
    main()
