"""Every example runs, checks itself against numpy (its own asserts), and prints each stage."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from minipallas.lowering.runtime.libtpu import LIBTPU_NO_CHIP

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _run(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_tour_shows_every_stage():
    out = _run("tour.py")
    stateful, pure = out.split("== 4. Discharge")
    assert "run_scoped" in stateful and "swap" in stateful
    # o_ref is only written (upstream: {ReadEffect(0), WriteEffect(1)}): no read of it anywhere
    trace, effects = stateful.split("== 3. Effects")
    assert "func @running_sum(%0: Ref{f32[8,128], tpu.vmem}, %1: Ref{f32[8,128], tpu.vmem}) -> " \
        "(i32[]) effects {read 0, write 1} {" in trace  # fmt: skip
    assert effects.split("\n")[1:3] == ["{read 0, write 1}", ""]
    assert "read 1" not in stateful
    program = pure.split("  | ")[0]  # the discharged program, before the chapter's "why"
    assert "run_scoped" not in program and "swap" not in program and "get " not in program
    assert "dynamic_update_slice" in program
    assert "the cleaned pure program gives the same bits: True" in out
    assert "Why regions are closed" in trace and "Why a swap leaves a dead read" in pure
    collective = out.split("== 9.")[1]
    assert "by default, upstream's error: run_scoped interpret rule" in collective
    assert "simulated, every program's row holds the sum of all rows: True" in collective
    assert "The results convention" in pure.split("== 5. Cleanup")[0]
    assert "stablehlo.while" in out and "func.func @main" in out
    assert "XLA's result equals the interpreter's, bit for bit: True" in out
    kernels = out.split("== 7.")[1]
    assert "pallas_call on CPU equals numpy: True" in kernels
    cpu, devices = kernels.split("-- Mosaic TPU --")
    program = cpu.split("no loop --")[1]
    assert "@scaled_add_batched" in program and " for " not in program
    assert "f32[2,8,2,128]" in program
    tpu, gpu = devices.split("-- Triton GPU --")
    assert "window_params" in tpu and "tpu.vector_store" in tpu
    assert "tt.get_program_id" in gpu and "tt.store" in gpu


# Each example with a test of its own below runs there; the others only need to run (a chapter
# checks its own claims with asserts): each runs once, to keep the suite quick.
CHECKED = set(re.findall(r'_run\("([\w.]+)"\)', pathlib.Path(__file__).read_text()))
CHECKED.add("ch01_first_program.py")  # tests/test_readme.py checks its output line by line


@pytest.mark.parametrize(
    "path", sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in CHECKED)
)
def test_example_runs(path):
    assert _run(path).strip()


def test_discharge_chapter_shows_carries_and_cond_results():
    out = _run("ch04_discharge.py")
    stateful, rest = out.split("--- effects (at positions")
    effects, discharged = rest.split("--- discharged")
    assert "addupdate" in stateful and "ref.at" in stateful
    # out is only written; x only read (a loop constant), acc accumulated (a carry)
    assert "function: {read 0, read 1, accum 1, write 2} = read x_ref, read acc_ref, " \
        "accum acc_ref, write out_ref" in effects  # fmt: skip
    assert re.search(r"for at line \d+: \{read 2, accum 3\} = read x_ref, accum acc_ref", effects)
    assert re.search(
        r"cond at line \d+: \{read 1, write 2\} = read acc_ref, write out_ref", effects
    )
    # x is only read: a loop constant; acc is accumulated: a carry; out: the cond's only result.
    assert "for %4 to %5 (%0) iter (%6, %1)" in discharged
    assert "}] : f32[8]" in discharged
    assert "addupdate" not in discharged and "ref.at" not in discharged
    assert "agree bit for bit: True" in out


def test_new_pass_chapter_rewrites_and_keeps_the_bits():
    out = _run("ch13_new_pass.py")
    before, after = out.split("--- after mul-by-two,discharge,cleanup ---")
    assert before.count(" mul ") == 2 and " mul " not in after
    assert "add %0, %0" in after  # x * 2.0 became x + x, before the loop and inside it
    assert "same bits as before the pass (interpreter, XLA), inf/-0.0/NaN included: True" in out


def test_new_discharge_rule_chapter_discharges_fill():
    out = _run("ch14_new_op.py")
    stateful, pure = out.split("--- discharged and cleaned")
    assert "effects {write 0}" in stateful and "fill %0[ds(%1, 2), :], %2" in stateful
    program = pure.split("---\n")[1].split("interpreter (stateful)")[0]
    assert "fill" not in program and "dynamic_update_slice %0[ds(%1, 2), :]" in program
    assert "interpreter (stateful) == interpreter (discharged) == XLA == numpy: True" in out


def test_collectives_chapter_runs_and_reports_the_races_and_the_deadlocks():
    out = _run("ch17_collectives.py")
    default, simulated = out.split("--- collectives='simulate'")
    assert "run_scoped interpret rule does not support collective axes" in default
    assert "every row holds the sum of all rows, bit for bit: True" in simulated
    assert "the same bits under random interleavings too: True" in simulated
    race, deadlock = simulated.split("--- program 5 skips the barrier")
    assert "first access: 'swap' at ch17_collectives.py:" in race and "program (1,)" in race
    assert "second access: 'get' at ch17_collectives.py:" in race
    deadlock, ring = deadlock.split("--- semaphores: a ring, no barrier ---")
    assert "(5,) finished without reaching it" in deadlock
    assert "each program holds its left neighbour's row: True" in ring
    assert "without the wait: program (0,) reads element [7, 0]" in ring
    assert "waiting for 2 signals: deadlock: program (0,) waits for 2" in ring


def test_mesh_kernels_chapter_runs_upstreams_kernel_and_reports_its_bugs():
    out = _run("ch18_mesh_kernels.py")
    upstream, rest = out.split("--- imported: a mesh_call over the cores ---")
    assert "NotImplementedError: run_scoped interpret rule does not support collective" in upstream
    imported, rest = rest.split("--- by default: upstream's error ---")
    assert 'mesh_call @kernel_core(%0), mesh ("core") (2)' in imported
    assert 'barrier ("core")' in imported and "tpu.vmem_shared" in imported
    assert "CollectiveAxesUnsupported: run_scoped interpret rule does not support" in rest
    assert "both cores' rows, bit for bit: True" in rest and "the same bits: True" in rest
    race = rest.split("--- without core_barrier: a race ---")[1]
    assert "program (1,) reads element [0, 0] of a shared float32[16,128] buffer that " \
        "program (0,) writes at" in race  # fmt: skip
    assert "program (1,) skips the barrier over ('core',) at" in race
    assert "simulated and compiled (core 0 first): True" in out


def test_grid_steps_chapter_fuses_fuzzes_and_keeps_the_bits():
    out = _run("ch19_grid_steps.py")
    before, after = out.split("--- after fuse-pairs ---")
    assert "grid (64,)" in before and "in blocks [8x256]" in before
    assert "grid (32,)" in after and "in blocks [16x256]" in after
    assert after.count("call @softmax_substep(") == 2 and "ref.at %0[8:16, :]" in after
    assert "as upstream's interpret mode: True" in out
    assert "6 kernels" in out and "0 disagreements" in out
    # the chapter's own pass, registered by the script, directs the kernels (it changed 1 of 6
    # plain ones)
    assert "pass-directed: fuse-pairs" in out and "pass fuse-pairs changed 6 of 6 kernels" in out
    assert "fuse-pairs     1.274 ms   1.76x upstream, same bits: True" in out


def test_devices_chapter_finds_the_race_fixes_it_and_compiles_with_the_same_bits():
    out = _run("ch20_devices.py")
    racy, fixed = out.split("== 2. Fixed")
    assert 'mesh_call @kernel_device(%1), mesh ("x") (4)' in racy
    assert "the simulator names the race:" in racy and "program (0,)" in racy
    assert racy.count("ch20_devices.py:") >= 2  # both accesses' lines
    assert fixed.count("every device holds the sum of all shards: True") == 4
    assert "collective-permutes in XLA's program: 3" in fixed
    assert "the compiled kernel gives the simulator's bits: True" in fixed
    assert "upstream's TPU interpret mode gives numpy's result: True" in fixed
    assert "upstream/compiled " in fixed  # timed, never asserted on


def test_patterns_chapter_rewrites_inside_the_loop_too():
    """A pattern registered after cleanup was imported is tried, in regions as well."""
    out = _run("ch15_patterns.py")
    discharged, cleaned = out.split("--- cleaned, with the pattern registered ---")
    assert discharged.count(" mul ") == 2 and " mul " not in cleaned
    assert "%2 = add %0, %0 : f32[4]" in cleaned and "%9 = add %8, %8 : f32[4]" in cleaned
    assert "inf/-0.0/NaN included: True" in out


def test_text_ir_chapter_parses_reports_and_runs_the_cli():
    out = _run("ch02_text_ir.py")
    assert "func @scale(%0: Ref{f32[8]}, %1: Ref{f32[8]}, %2: i32[]) -> () effects " in out
    assert "bad.mir:6:8: 'get': result types are (f32[]), but the text says (f32[8])" in out
    assert "// effects of @scale: {read 0, write 1}" in out
    assert "// -----// IR Dump After discharge //----- //" in out
    assert "interpreted: o = [0.0, 2.0, 4.0, 3.0, 8.0, 10.0, 12.0, 14.0]" in out


def test_effects_chapter_shows_regions_and_scopes():
    out = _run("ch03_effects.py")
    assert "--- copy(x_ref, o_ref): {read 0, write 1}" in out  # a swap only writes
    assert "for: on its operands {read 2, accum 3}, its body on its parameters " \
        "{read 1, accum 2}" in out  # fmt: skip
    assert "--- scoped(x_ref, o_ref): {read 0, write 1}" in out  # the scratch is invisible
    assert "--- increment(o_ref): {read 0, write 0}" in out


def test_cleanup_chapter_removes_what_discharge_leaves():
    """What the chapter says discharge leaves is in the discharged program it prints, and
    the cleaned program has none of it."""
    out = _run("ch05_cleanup.py")
    discharged, cleaned = out.split("--- cleaned: 4 ops ---")
    cleaned = cleaned.split("---")[0]
    assert "uninitialized" in discharged and "uninitialized" not in cleaned
    # the swap's old contents, sliced and unused: o's [0:4] before it is written
    assert (
        "%13 = slice %1[0:4] : f32[4]" in discharged and "%13" not in discharged.split("\n  %14")[1]
    )
    # the read of the window just written, and the write of what was just read
    assert (
        "%11 = dynamic_update_slice %5[0:4], %9" in discharged
        and "%12 = slice %11[0:4]" in discharged
    )
    assert "%16 = dynamic_update_slice %14[4:8], %15" in discharged
    assert "dynamic_update_slice %1[0:4], %5" in cleaned  # x[:4] * 2 straight into o
    assert cleaned.count(" slice ") == 1 and "return %0, %6, %2" in cleaned  # n * 1 + 0 is n
    assert "same bits before and after cleanup: True" in out


def test_stablehlo_chapter_lowers_and_runs_bit_for_bit():
    out = _run("ch06_stablehlo.py")
    assert "the target's pipeline ran: collectives, discharge, cleanup" in out
    assert "stablehlo.while" in out and "loc(" not in out
    assert "equal the interpreter's, bit for bit: True" in out


def test_kernels_chapter_shows_body_index_map_and_batched_program():
    out = _run("ch07_kernels.py")
    assert "--- the kernel: grid (8, 2), blocks Ref{f32[8,128]} ---" in out
    assert "func @add_input0_index_map(%0: i32[], %1: i32[]) -> (i32[], i32[])" in out
    program = out.split("--- the CPU program: every grid point at once, no loop ---")[1]
    assert "func @add_batched(%0: i32[8], %1: i32[2]" in program and " for " not in program
    assert "constant 0 : i32[]" not in program  # cleaned: the grid's constant offsets are gone
    assert "pallas_call on the CPU equals numpy: True" in out


def test_dimension_semantics_chapter_prints_a_cleaned_program_and_says_why_the_barrier():
    out = _run("ch09_dimension_semantics.py")
    program = out.split("== 4.")[1].split("== 5.")[0]
    grid = program.split("func @row_sum_kernel_grid")[1]
    assert grid.count("call @row_sum_kernel_post_batched") == 4
    assert "output0_index_map" not in grid  # its results were unused: cleaned away
    assert grid.count("constant 0 : i32[]") == 1 and grid.count("optimization_barrier") == 4
    chapter = (EXAMPLES / "ch09_dimension_semantics.py").read_text()
    assert "through an\n``optimization_barrier``: traced inline the index is a constant" in chapter


def test_mosaic_and_triton_chapter_emits_both_without_locations():
    out = _run("ch11_mosaic_and_triton.py")
    tpu, gpu = out.split("--- Triton GPU (--emit=gpu) ---")
    assert "window_params" in tpu and "iteration_bounds = array<i64: 8, 2>" in tpu
    assert "tt.get_program_id x" in gpu and "tt.load" in gpu and "#loc" not in out


def test_tpu_chapter_compiles_with_libtpu():
    out = _run("ch12_running_on_a_tpu.py")
    assert "on the CPU: equals numpy: True" in out
    assert "libtpu compiled the Mosaic kernel for a v5e, ahead of time: True" in out


def test_the_chapters_are_numbered_in_order_and_each_says_its_idea():
    chapters = sorted(EXAMPLES.glob("ch[0-9][0-9]_*.py"))
    numbers = [int(p.name[2:4]) for p in chapters]
    assert numbers == list(range(1, len(chapters) + 1))
    for path in chapters:
        first = path.read_text().splitlines()[0]
        assert first.startswith(f'"""Chapter {int(path.name[2:4])}: '), path.name


def test_mesh_kernels_chapter_starts_libtpu_quietly():
    """Its mesh asks jax for devices, which loads libtpu: on a machine without a chip that
    logged start-up errors (``E0000 ... unexpected worker hostname``) (issue 48 §4). Run as a
    user runs it: without the settings the tests' own start-up made."""
    tests_own = {*LIBTPU_NO_CHIP, "JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL"}
    env = {k: v for k, v in os.environ.items() if k not in tests_own}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "ch18_mesh_kernels.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "E0000" not in done.stderr and "worker hostname" not in done.stderr, done.stderr


def test_partial_blocks_chapter_shows_a_program_with_nothing_dead():
    """Its blocks are batched along the rows and whole along the columns: no block index is
    read from an index map, so the CPU program calls none (it called them, results unused),
    and every value it defines is used (it printed two dead ``constant 0``: the builder's
    program before the target's cleanup, no longer what the chapter shows)."""
    out = _run("ch10_partial_blocks.py")
    program = out.split("== 3.")[1].split("== 4.")[0]
    assert "func @softmax_kernel_grid" in program and "index_map" not in program, program
    body = program.split("func @softmax_kernel_grid")[1].split("\n}")[0]
    for value in re.findall(r"^  (%\d+) = ", body, re.MULTILINE):
        assert re.search(rf"{value}\b(?! =)", body), f"{value} is never used:{body}"
    assert "constant 0 : i32[]" not in body and body.count("constant nan") == 2, body
