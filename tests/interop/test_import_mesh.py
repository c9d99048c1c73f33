"""Upstream's mesh kernels (``pl.kernel`` over ``pltpu.create_tensorcore_mesh``, the
``mpmd_map`` primitive) imported as ``mesh_call`` (issue 38): refused by default with
upstream's messages, run together under ``collectives="simulate"`` on both CPU paths with
numpy's bits, races and deadlocks named."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.interop import JaxprImportError
from minipallas.ir.collectives import INTERPRET_MESSAGE, CollectiveAxesError
from minipallas.tools import difftest

ROWS = 8


def _kernel(cores: int, barrier: str = "all", remote_wait: bool = True):
    """Each core copies its rows into one VMEM_SHARED buffer, meets the others at
    ``core_barrier``, then writes the sum of every core's rows into its own output rows (the
    issue's kernel); ``barrier``: "all", "none" (a race) or "core0" (the others skip it)."""
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)
    shape = (cores * ROWS, 128)

    def body(x_ref, o_ref):
        def scoped(shared, sem):
            c = jax.lax.axis_index("core")
            pltpu.sync_copy(x_ref.at[pl.ds(c * ROWS, ROWS)], shared.at[pl.ds(c * ROWS, ROWS)])
            if barrier == "all":
                pltpu.core_barrier(sem, core_axis_name="core")
            elif barrier == "core0":
                pl.when(c == 0)(lambda: pltpu.core_barrier(sem, core_axis_name="core"))
            total = shared[pl.ds(0, ROWS), :]
            for k in range(1, cores):
                total = total + shared[pl.ds(k * ROWS, ROWS), :]
            o_ref[pl.ds(c * ROWS, ROWS), :] = total

        pl.run_scoped(scoped, pltpu.VMEM_SHARED(shape, jnp.float32), pltpu.SemaphoreType.REGULAR,
                      collective_axes="core")  # fmt: skip

    out = jax.ShapeDtypeStruct(shape, jnp.float32)
    return jax.jit(lambda x: pl.kernel(body, out_type=out, mesh=mesh)(x))


def _x(cores: int) -> np.ndarray:
    return np.arange(cores * ROWS * 128, dtype=np.float32).reshape(cores * ROWS, 128) / 7


def _expected(x: np.ndarray, cores: int) -> np.ndarray:
    total = x[:ROWS]
    for k in range(1, cores):
        total = total + x[k * ROWS : (k + 1) * ROWS]
    return np.concatenate([total] * cores)


def _import(f, *args):
    return mp.from_jaxpr(jax.make_jaxpr(f)(*args))


def test_a_mesh_kernel_imports_as_a_mesh_call_over_its_cores():
    fn = _import(_kernel(2), _x(2))
    text = str(fn)
    assert 'mesh_call @kernel_core(%0), mesh ("core") (2) : f32[16,128]' in text
    # the shared buffer is one; the semaphore has a row per core; core_barrier is a barrier
    assert "Ref{f32[16,128], tpu.vmem_shared}" in text and "Ref{i32[2], semaphore}" in text
    assert 'barrier ("core")' in text and "semaphore_wait" not in text
    assert "program_id axis 0" in text  # lax.axis_index("core")
    mp.verify(fn)
    again = mp.parse_module(text)  # the text form round-trips
    assert str(again.functions[-1]) == str(fn)


def test_by_default_every_path_refuses_with_upstreams_message():
    fn, x = _import(_kernel(2), _x(2)), _x(2)
    for run in (
        lambda: mp.interpret(fn, x),
        lambda: mp.discharge(fn),
        lambda: mp.compile(fn),
        lambda: mp.to_jax(fn)(x),
    ):
        with pytest.raises(CollectiveAxesError) as e:
            run()
        assert str(e.value) == INTERPRET_MESSAGE  # upstream's pallas_call interpret rule
        assert "kernel_core" in "".join(e.value.__notes__)


@pytest.mark.parametrize("cores", [1, 2, 4])
def test_simulated_cores_give_numpys_bits_under_every_schedule(cores):
    fn, x = _import(_kernel(cores), _x(cores)), _x(cores)
    for schedule in ("lockstep", 0, 1, 2):
        (out,) = mp.interpret(fn, x, collectives="simulate", schedule=schedule)
        np.testing.assert_array_equal(out, _expected(x, cores))


@pytest.mark.parametrize("cores", [1, 2, 4])
def test_the_compiled_path_gives_the_same_bits(cores):
    fn, x = _import(_kernel(cores), _x(cores)), _x(cores)
    pure = mp.discharge(fn, collectives="simulate")
    mp.verify(pure)
    assert "mesh_call" not in str(pure)
    (out,) = mp.compile(pure)(x)
    np.testing.assert_array_equal(np.asarray(out), _expected(x, cores))
    (jitted,) = jax.jit(mp.to_jax(pure))(x)  # inside jax.jit on the CPU: the pure program
    np.testing.assert_array_equal(np.asarray(jitted), _expected(x, cores))


def test_a_missing_barrier_is_a_race_naming_both_accesses_and_both_cores():
    fn, x = _import(_kernel(2, barrier="none"), _x(2)), _x(2)
    with pytest.raises(mp.RaceError) as e:
        mp.interpret(fn, x, collectives="simulate")
    first, second = e.value.first, e.value.second
    assert {first[2], second[2]} == {"(0,)", "(1,)"}
    # the copy in (at its start, or its wait: it may land any time in between), the read
    assert {first[0], second[0]} in ({"dma_start", "get"}, {"dma_wait", "get"})
    assert all(at.file == __file__ for _, at, _ in (first, second))


def test_a_barrier_some_cores_skip_is_a_deadlock_naming_the_skipper():
    fn, x = _import(_kernel(2, barrier="core0"), _x(2)), _x(2)
    with pytest.raises(mp.DeadlockError) as e:
        mp.interpret(fn, x, collectives="simulate")
    assert "program (1,) skips the barrier" in str(e.value)
    assert e.value.loc.file == __file__ and e.value.op == "barrier"


def _handoff(wait: bool = True):
    """Core 0 writes a tile into shared memory and signals core 1's semaphore (core_index);
    core 1 waits on its own, then reads."""
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=2)

    def body(x_ref, o_ref):
        def scoped(shared, sem):
            c = jax.lax.axis_index("core")

            @pl.when(c == 0)
            def _():
                shared[...] = x_ref[...] * 2
                pl.semaphore_signal(sem, 1, core_index=1)

            @pl.when(c == 1)
            def _():
                if wait:
                    pl.semaphore_wait(sem, 1)
                o_ref[...] = shared[...] + 1

        pl.run_scoped(scoped, pltpu.VMEM_SHARED((8, 128), jnp.float32),
                      pltpu.SemaphoreType.REGULAR, collective_axes="core")  # fmt: skip

    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    return lambda x: pl.kernel(body, out_type=out, mesh=mesh)(x)


def test_a_signal_to_another_core_reaches_that_cores_semaphore():
    x = _x(1)
    fn = _import(_handoff(), x)
    assert "ref.at" in str(fn.callees()[0])  # row 1 of the per-core semaphores
    for schedule in ("lockstep", 0, 1, 2, 3):
        (out,) = mp.interpret(fn, x, collectives="simulate", schedule=schedule)
        np.testing.assert_array_equal(out, x * 2 + 1)
    unsynchronized = _import(_handoff(wait=False), x)
    # without the wait, core 1 reads before core 0 writes (lockstep), or races with the write
    found = set()
    for schedule in ("lockstep", *range(12)):
        with pytest.raises(mp.InterpretError) as e:
            mp.interpret(unsynchronized, x, collectives="simulate", schedule=schedule)
        found.add("race" if isinstance(e.value, mp.RaceError) else "unwritten")
        assert "no barrier or semaphore wait between them" in str(
            e.value
        ) or "never written" in str(e.value)
    assert found == {"race", "unwritten"}
    (compiled,) = mp.compile(mp.discharge(fn, collectives="simulate"))(x)  # core 0, then 1
    np.testing.assert_array_equal(np.asarray(compiled), x * 2 + 1)


def test_cores_that_share_nothing_run_in_turn_by_default():
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=4)

    def body(x_ref, o_ref):
        c = jax.lax.axis_index("core")
        rows = pl.ds(c * 2, 2)
        o_ref[rows, :] = x_ref[rows, :] * (c + 1).astype(jnp.float32)

    def f(x):
        return pl.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh)(x)

    x = _x(1)
    fn = _import(f, x)
    expected = x * np.repeat(np.arange(1, 5, dtype=np.float32), 2)[:, None]
    np.testing.assert_array_equal(mp.interpret(fn, x)[0], expected)
    np.testing.assert_array_equal(mp.interpret(fn, x, collectives="simulate")[0], expected)
    np.testing.assert_array_equal(np.asarray(mp.compile(fn)(x)[0]), expected)


def test_scratch_types_and_aliases_carry_over():
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=2)

    def body(x_ref, o_ref, shared, own):
        c = jax.lax.axis_index("core")
        own[...] = x_ref[pl.ds(c * ROWS, ROWS), :] + 1  # each core's own VMEM
        shared[pl.ds(c * ROWS, ROWS), :] = own[...]
        o_ref[pl.ds(c * ROWS, ROWS), :] = (
            o_ref[pl.ds(c * ROWS, ROWS), :] + shared[pl.ds(c * ROWS, ROWS), :]
        )

    def f(x):
        return pl.kernel(
            body,
            out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
            mesh=mesh,
            scratch_types=[pltpu.VMEM_SHARED(x.shape, x.dtype), pltpu.VMEM((ROWS, 128), x.dtype)],
        )(x)

    x = _x(2)
    fn = _import(f, x)
    text = str(fn.callees()[0])
    assert 'collective_axes ("core")' in text and "Ref{f32[8,128], tpu.vmem}" in text
    with pytest.raises(CollectiveAxesError):  # the shared scratch is a collective allocation
        mp.interpret(fn, x)
    (out,) = mp.interpret(fn, x, collectives="simulate")
    np.testing.assert_array_equal(out, np.full_like(x, np.nan))  # the output starts undefined


def test_the_difftest_calls_a_simulated_mesh_kernel_beyond_upstream():
    case = difftest.Case("two cores", _kernel(2), (_x(2),), collectives="simulate")
    report = difftest.run(case)
    assert report.finding.kind == "beyond-upstream"
    for way in ("interpret", "discharge", "compile"):
        np.testing.assert_array_equal(report.outcomes[way].outputs[0], _expected(_x(2), 2))
    assert not report.outcomes["upstream"].ok


def test_what_minipallas_cannot_import_is_refused_naming_the_primitive():
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=2)

    def remote(x_ref, o_ref):
        pl.run_scoped(lambda s: pl.semaphore_signal(s, 1, device_id=0),
                      pltpu.SemaphoreType.REGULAR)  # fmt: skip

    out = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    with pytest.raises(JaxprImportError, match="to another device") as e:
        _import(lambda x: pl.kernel(remote, out_type=out, mesh=mesh)(x), _x(1))
    assert e.value.op == "semaphore_signal" and e.value.loc.file == __file__

    def private(x_ref, o_ref):  # a signal to another core's (not collective) semaphore
        pl.run_scoped(lambda s: pl.semaphore_signal(s, 1, core_index=1),
                      pltpu.SemaphoreType.REGULAR)  # fmt: skip

    # upstream allocates every semaphore at one place on every core: a row per core here
    fn = _import(lambda x: pl.kernel(private, out_type=out, mesh=mesh)(x), _x(1))
    assert 'collective_axes ("core")' in str(fn) and "Ref{i32[2], semaphore}" in str(fn)


def _gather(cores: int, by_data: bool = False):
    """Every core but 0 writes its doubled rows into shared memory and signals core 0, which
    waits for all of them and sums; ``by_data``: the signal's target is read from memory."""
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=cores)

    def body(x_ref, t_ref, o_ref):
        def scoped(shared, sem):
            c = jax.lax.axis_index("core")

            @pl.when(c != 0)
            def _():
                shared[pl.ds(c * ROWS, ROWS), :] = x_ref[pl.ds(c * ROWS, ROWS), :] * 2
                target = t_ref[0] if by_data else 0
                pl.semaphore_signal(sem, 1, core_index=target)

            @pl.when(c == 0)
            def _():
                pl.semaphore_wait(sem, cores - 1)
                total = shared[pl.ds(ROWS, ROWS), :]
                for k in range(2, cores):
                    total = total + shared[pl.ds(k * ROWS, ROWS), :]
                o_ref[...] = total

        pl.run_scoped(scoped, pltpu.VMEM_SHARED((cores * ROWS, 128), jnp.float32),
                      pltpu.SemaphoreType.REGULAR, collective_axes="core")  # fmt: skip

    out = jax.ShapeDtypeStruct((ROWS, 128), jnp.float32)
    return lambda x, t: pl.kernel(body, out_type=out, mesh=mesh)(x, t)


def test_handoffs_run_in_the_order_their_signals_ask_for_on_the_compiled_path():
    cores = 4
    x, t = _x(cores), np.zeros((1,), np.int32)
    fn = _import(_gather(cores), x, t)
    doubled = x * 2
    expected = doubled[ROWS : 2 * ROWS]
    for k in range(2, cores):
        expected = expected + doubled[k * ROWS : (k + 1) * ROWS]
    np.testing.assert_array_equal(mp.interpret(fn, x, t, collectives="simulate")[0], expected)
    (out,) = mp.compile(mp.discharge(fn, collectives="simulate"))(x, t)  # 1, 2, 3, then 0
    np.testing.assert_array_equal(np.asarray(out), expected)
    by_data = _import(_gather(cores, by_data=True), x, t)
    np.testing.assert_array_equal(mp.interpret(by_data, x, t, collectives="simulate")[0], expected)
    with pytest.raises(mp.MiniPallasError, match="semaphore chosen by data") as e:
        mp.discharge(by_data, collectives="simulate")
    assert "collectives='simulate'" in e.value.fix


def test_a_gpu_mesh_imports_its_thread_and_block_axes():
    """Mosaic GPU's mesh (blocks along "g", two threads "t") over what minipallas expresses:
    thread-collective SMEM and the race the missing thread barrier leaves."""
    plgpu = pytest.importorskip("jax.experimental.pallas.mosaic_gpu")
    mesh = plgpu.Mesh(grid=(2,), grid_names=("g",), num_threads=2, thread_name="t")

    def body(x_ref, o_ref):
        def scoped(smem):
            g, t = jax.lax.axis_index("g"), jax.lax.axis_index("t")

            @pl.when(t == 0)
            def _():
                smem[...] = x_ref[pl.ds(g * ROWS, ROWS), :] + 1

            o_ref[pl.ds(g * ROWS, ROWS), :] = smem[...]  # thread 1 too: no barrier

        pl.run_scoped(scoped, plgpu.SMEM((ROWS, 128), jnp.float32), collective_axes="t")

    out = jax.ShapeDtypeStruct((2 * ROWS, 128), jnp.float32)
    x = _x(2)
    fn = _import(lambda x: pl.kernel(body, out_type=out, mesh=mesh)(x), x)
    assert 'mesh ("g", "t") (2, 2)' in str(fn) and "gpu.smem" in str(fn)
    with pytest.raises(CollectiveAxesError):
        mp.interpret(fn, x)
    with pytest.raises(mp.InterpretError, match="never written|no barrier"):
        mp.interpret(fn, x, collectives="simulate")


def test_a_mesh_call_written_as_text_discharges_through_the_cli(tmp_path):
    """The text form runs the same way: minipallas-opt registers mesh_call's discharge rule."""
    import subprocess
    import sys

    text = """func @body(%x: Ref{f32[8]}, %o: Ref{f32[8]}) -> () {
  %c = program_id axis 0 : i32[]
  %v = get %x[ds(%c, 4)] : f32[4]
  %w = swap %o[ds(%c, 4)], %v : f32[4]
  return
}

func @mesh(%x: f32[8]) -> (f32[8]) {
  %o = mesh_call @body(%x), mesh ("core") (1) : f32[8]
  return %o
}
"""
    path = tmp_path / "mesh.mir"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "minipallas.cli", str(path), "--pass-pipeline=discharge"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "mesh_call" not in done.stdout and "call @body_grid(%0)" in done.stdout


def test_a_pipeline_split_among_the_cores_imports_as_loops_over_block_views():
    """Upstream's megacore pipeline (``emit_pipeline`` primitive, its parallel axis split
    between 2 cores): each core loops over its part of the grid on views of the blocks."""
    import mesh_corpus_upstream

    name = "upstream/PallasCallMegacorePrimitiveTest.test_megacore_mul"
    case = next(c for c in mesh_corpus_upstream.CASES if c.name.startswith(name))
    f, args = case.build()
    fn = mp.from_jaxpr(jax.make_jaxpr(f)(*args))
    text = str(fn)
    assert "emit_pipeline" not in text and "for " in text and "@pipeline_body" in text
    (want,) = case.reference(*args)
    (got,) = mp.interpret(fn, *args, collectives="simulate")
    np.testing.assert_array_equal(got, want)
    (compiled,) = mp.compile(mp.discharge(fn, collectives="simulate"))(*args)
    np.testing.assert_array_equal(np.asarray(compiled), want)


def test_a_kernel_over_refs_reads_and_writes_them_in_place():
    """``pl.kernel`` given ``jax.new_ref`` refs: each is read and written by the cores (an
    output the mesh_call aliases to its contents), then written back."""
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=2)

    def body(x_ref, acc_ref, o_ref):
        c = jax.lax.axis_index("core")
        rows = pl.ds(c * ROWS, ROWS)
        acc_ref[rows, :] = acc_ref[rows, :] + x_ref[rows, :]
        o_ref[rows, :] = acc_ref[rows, :] * 2

    def f(x, acc):
        ref = jax.new_ref(acc)
        out = pl.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=mesh)(x, ref)
        return out, jax.freeze(ref)

    x, acc = _x(2), _x(2) + 1
    fn = _import(f, x, acc)
    assert "aliases (1, 1)" in str(fn)
    for run in (mp.interpret, lambda *a: mp.interpret(*a, collectives="simulate")):
        out, final = run(fn, x, acc)
        np.testing.assert_array_equal(final, acc + x)
        np.testing.assert_array_equal(out, (acc + x) * 2)
