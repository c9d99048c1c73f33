"""``reassociate-sums`` and the ``optimize="fast"`` level it belongs to.

A sum added into an output every grid step becomes a vector of partial sums reduced at the
last step: within the order bound of one sum of every term against float64, verified after
the pass, its Mosaic module compiled by libtpu; the difftest calls a case at the fast level
``within-envelope`` (never ``minipallas-bug``), and at the default level its ways keep the
interpreter's and upstream's bits. Kernels whose output is not only so accumulated are left.
"""

import numpy as np
import pytest

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir.interpret import interpret
from minipallas.lowering import TARGETS
from minipallas.lowering.tpu.aot import compile_check, libtpu_available
from minipallas.passes.kernel.reassociate import reassociates
from minipallas.passes.pipeline import run as run_pipeline
from minipallas.tools.corpora.plants import scale_result
from minipallas.tools.difftest import Case, run
from minipallas.tools.envelope.reorder import UNIT_ROUNDOFF, bound

STEPS, BLOCK = 64, 1024


def sum_1d(x_ref, o_ref):
    """The chip bench's reduce_1d: a scalar sum per step, added into one resident output."""

    @mp.when(mp.program_id(0) == 0)
    def _():
        o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)

    o_ref[...] += x_ref[...].sum(keepdims=True)


def row_sums(x_ref, o_ref):
    """Sums of rows over a K grid axis (2-d blocks, the sum not to a scalar)."""

    @mp.when(mp.program_id(1) == 0)
    def _():
        o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)

    o_ref[...] += x_ref[...].sum(axis=1)


def overwrites(x_ref, o_ref):
    """The output is written at every step as well: deferring the sum would change it."""
    o_ref[...] = o_ref[...] * 0.5
    o_ref[...] += x_ref[...].sum(keepdims=True)


def _sum_call(kernel=sum_1d, optimize=True, passes=""):
    return mp.pallas_call(
        kernel,
        mp.ArrayType((1,), jnp.float32),
        grid=(STEPS,),
        in_specs=[mp.BlockSpec((BLOCK,), lambda i: (i,))],
        out_specs=mp.BlockSpec((1,), lambda i: (0,)),
        optimize=optimize,
        passes=passes,
    )


def _rows_call():
    return mp.pallas_call(
        row_sums,
        mp.ArrayType((16,), jnp.float32),
        grid=(2, 32),
        in_specs=[mp.BlockSpec((8, 256), lambda i, k: (i, k))],
        out_specs=mp.BlockSpec((8,), lambda i, k: (i,)),
    )


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _reassociated(call, x, pipeline="reassociate-sums"):
    kernel = call.trace(x)
    return kernel, run_pipeline(kernel, pipeline, verify=True)


def _within_order_bound(got, x, axis=None):
    """``got`` (float32) lies within the order bound of one sum of all of ``x``'s terms."""
    exact = x.astype(np.float64).sum(axis=axis)
    terms = x.size if axis is None else x.shape[axis]
    allowed = bound(terms) * UNIT_ROUNDOFF * np.abs(x.astype(np.float64)).sum(axis=axis)
    assert np.all(np.abs(got.astype(np.float64) - exact) <= allowed)


def test_a_scalar_sum_per_step_becomes_a_vector_of_partial_sums():
    x = _x(STEPS * BLOCK)
    kernel, fast = _reassociated(_sum_call(), x)
    assert [t.shape for t in fast.scratch_types] == [(BLOCK,)]
    ops = [op.name for op in fast.body.body.ops]
    assert "reduce_sum" not in ops  # only at the last step, inside its cond
    out = _run(fast, x)
    _within_order_bound(out, x)
    assert out.tobytes() != _run(kernel, x).tobytes()  # another order: other bits, here


def test_row_sums_over_a_k_axis_keep_one_partial_sum_per_element():
    x = _x(16, 32 * 256)
    kernel, fast = _reassociated(_rows_call(), x)
    assert [t.shape for t in fast.scratch_types] == [(8, 256)]
    _within_order_bound(_run(fast, x), x, axis=1)


WINDOW = "reassociate-sums{window_bytes=65536}"  # 16 blocks of 4 KiB a step


def test_a_window_of_blocks_a_step_sums_them_all_into_one_longer_accumulator():
    """``window_bytes``: 64 steps of one 1024-float block become 4 of 16 blocks, the partial
    sums as long as the window; row sums over K likewise (2x32 -> 2x4, 8-column windows)."""
    x = _x(STEPS * BLOCK)
    _, wide = _reassociated(_sum_call(), x, WINDOW)
    assert wide.grid == (4,) and wide.in_specs[0].block_shape == (16 * BLOCK,)
    assert [t.shape for t in wide.scratch_types] == [(16 * BLOCK,)]
    _within_order_bound(_run(wide, x), x)
    rows = _x(16, 32 * 256)
    _, wide = _reassociated(_rows_call(), rows, WINDOW)
    assert wide.grid == (2, 4) and wide.in_specs[0].block_shape == (8, 8 * 256)
    _within_order_bound(_run(wide, rows), rows, axis=1)
    module = _sum_call(passes=WINDOW).lower(x, target="tpu", optimize=False)
    assert "iteration_bounds = array<i64: 4>" in str(module)  # libtpu compiles it after the test


def test_a_window_is_not_taken_when_the_body_does_more_than_sum():
    """A body that also asks its grid position (here to scale each block) keeps its steps;
    the sum is still reassociated."""

    def scaled(x_ref, o_ref):
        o_ref[...] += (x_ref[...] * mp.program_id(0).astype(jnp.float32)).sum(keepdims=True)

    x = _x(STEPS * BLOCK)
    _, fast = _reassociated(_sum_call(scaled), x, WINDOW)
    assert fast.grid == (STEPS,) and [t.shape for t in fast.scratch_types] == [(BLOCK,)]


def last_run_sum(x_ref, o_ref):
    """A sum over the inner axis into one output that stays put along both: each run of the
    inner axis starts it again, so it ends as the last run's sum."""

    @mp.when(mp.program_id(1) == 0)
    def _():
        o_ref[...] = jnp.zeros(o_ref.shape, jnp.float32)

    o_ref[...] += x_ref[...].sum(keepdims=True)


def test_each_run_of_the_axis_adds_its_partial_sums_at_its_own_last_step():
    x = _x(3 * 8, 16 * 128)
    call = mp.pallas_call(
        last_run_sum,
        mp.ArrayType((1, 1), jnp.float32),
        grid=(3, 16),
        in_specs=[mp.BlockSpec((8, 128), lambda i, k: (i, k))],
        out_specs=mp.BlockSpec((1, 1), lambda i, k: (0, 0)),
    )
    _, fast = _reassociated(call, x)
    assert [t.shape for t in fast.scratch_types] == [(8, 128)]
    _within_order_bound(_run(fast, x).reshape(()), x[16:])
    if libtpu_available():
        traced = call.trace(x, memory_space=TARGETS["tpu"].memory_space)
        compile_check(traced, call.lower(x, target="tpu", optimize="fast"))


def _run(kernel, x):
    """The kernel's grid run by the reference interpreter (``kernels.programs``)."""
    from minipallas.kernels.programs.choose import cpu_program

    return interpret(cpu_program(kernel, True, None), x)[0]


@pytest.mark.parametrize("kernel", [overwrites])
def test_an_output_written_otherwise_is_left_alone(kernel):
    x = _x(STEPS * BLOCK)
    traced, fast = _reassociated(_sum_call(kernel), x)
    assert fast is traced


def test_the_fast_level_runs_the_pass_and_the_default_does_not():
    x = _x(STEPS * BLOCK)
    kernel = _sum_call().trace(x, memory_space=TARGETS["tpu"].memory_space)
    assert "reassociate-sums" in TARGETS["tpu"].pipeline_for(kernel, optimize="fast")
    assert "reassociate" not in TARGETS["tpu"].pipeline_for(kernel)
    assert reassociates(TARGETS["tpu"].fast) and not reassociates(TARGETS["tpu"].optimizations)
    fast = _sum_call(optimize="fast").lower(x, target="tpu")
    exact = _sum_call().lower(x, target="tpu")
    assert "scratch_operands = 1" in str(fast) and "scratch_operands = 0" in str(exact)
    if libtpu_available():
        compile_check(kernel, fast)


def scalar_in_smem(x_ref, o_ref):
    @mp.when(mp.program_id(0) == 0)
    def _():
        o_ref[0] = 0.0

    o_ref[0] += x_ref[...].sum()


def test_a_scalar_output_in_smem_gets_its_partial_sums_in_vmem():
    """SMEM holds scalars, not vectors: the partial sums live in VMEM, and the module at the
    fast level compiles as the default's does."""
    x = _x(STEPS * BLOCK)
    call = mp.pallas_call(
        scalar_in_smem,
        mp.ArrayType((1,), jnp.float32),
        grid=(STEPS,),
        in_specs=[mp.BlockSpec((BLOCK,), lambda i: (i,))],
        out_specs=mp.BlockSpec((1,), lambda i: (0,), memory_space=mp.tpu.SMEM),
        optimize="fast",
    )
    kernel = call.trace(x, memory_space=TARGETS["tpu"].memory_space)
    fast = run_pipeline(kernel, "reassociate-sums", verify=True)
    assert [(t.shape, t.memory_space.name) for t in fast.scratch_types] == [((BLOCK,), "tpu.vmem")]
    _within_order_bound(_run(fast, x), x)
    if libtpu_available():
        compile_check(kernel, call.lower(x, target="tpu"))


@pytest.mark.parametrize("level", ["faster", 1, None, "True"])
def test_an_optimize_level_that_is_none_of_the_three_is_refused(level):
    with pytest.raises(mp.MiniPallasError) as e:
        _sum_call(optimize=level)
    text = str(e.value)
    assert "test_reassociate.py:" in text and "optimize=" in text
    assert '"fast"' in text and "False" in text


def _upstream_sum(steps):
    import jax
    import jax.numpy as jjnp
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        @pl.when(pl.program_id(0) == 0)
        def _():
            o_ref[...] = jjnp.zeros(o_ref.shape, jjnp.float32)

        o_ref[...] += x_ref[...].sum(keepdims=True)

    def fn(x):
        return pl.pallas_call(
            kernel,
            jax.ShapeDtypeStruct((1,), jjnp.float32),
            grid=(steps,),
            in_specs=[pl.BlockSpec((BLOCK,), lambda i: (i,))],
            out_specs=pl.BlockSpec((1,), lambda i: (0,)),
            interpret=True,
        )(x)

    return fn


@pytest.mark.parametrize("steps", [16, 64])
def test_the_difftest_calls_the_fast_level_within_the_envelope(steps):
    """At ``optimize="fast"`` the ways that ran the pass differ from upstream in bits, by a
    reorder of the sum: ``within-envelope``. At the default level the interpreted ways keep the
    interpreter's bits and the compiled one upstream's (XLA's order, the same on both)."""
    x = _x(steps * BLOCK)
    fast = run(Case(f"sum_{steps}_fast", _upstream_sum(steps), (x,), optimize="fast"))
    assert fast.finding.kind == "within-envelope", fast.text()
    assert fast.distances["discharge"].ulps > 0 and fast.distances["discharge"].within
    assert fast.finding.fraction < 1
    # the envelope still has power: a result that lost one step's block lies outside it
    wrong = fast.outcomes["interpret"].outputs[0] - x[-BLOCK:].sum(dtype=np.float32)
    assert not fast.fast_envelope.judge(0, fast.outcomes["interpret"].outputs[0], wrong).within
    exact = run(Case(f"sum_{steps}", _upstream_sum(steps), (x,)))
    assert exact.finding.kind in ("agree", "within-envelope"), exact.text()
    assert "discharge" not in exact.distances  # the interpreter's bits
    (compiled,), (upstream,) = (exact.outcomes[w].outputs for w in ("compile", "upstream"))
    assert compiled.tobytes() == upstream.tobytes()


def _drop_last_step(kernel):
    """A wrong kernel pass: the grid's last step is dropped (its block never summed)."""
    import dataclasses

    return dataclasses.replace(kernel, grid=(kernel.grid[0] - 1,))


def test_a_wrong_pass_beside_the_fast_ones_is_blamed_and_a_compiler_error_still_found():
    """The ways that ran a reassociating pipeline are judged by the sums' freedom, not more: a
    pass beside it that loses a block is ``pass-bug`` naming it (not ``reassociate-sums``); a
    compiled program scaled by 1 + 2^-17 is compared with the same program interpreted, so
    it is a ``minipallas-bug`` still."""
    from minipallas.passes.registry import PASSES, register

    register("test-drop-last-step", subject="kernel")(_drop_last_step)
    try:
        x = _x(16 * BLOCK)
        case = Case("dropped", _upstream_sum(16), (x,), passes="test-drop-last-step",
                    optimize="fast")  # fmt: skip
        wrong = run(case)
    finally:
        del PASSES["test-drop-last-step"]  # the registry's own tests list every pass
    assert (wrong.finding.kind, wrong.finding.name) == ("pass-bug", "pass test-drop-last-step")
    planted = run(Case("planted", _upstream_sum(16), (x,), optimize="fast", plant=scale_result()))
    assert planted.finding.kind == "minipallas-bug", planted.text()


def test_on_a_chip_the_fast_module_is_judged_by_the_sums_freedom_not_upstreams_bits():
    """``difftest.tpu.judge`` of a fast case: the ``tpu`` way's other bits are no
    ``lowering-difference``; a result that lost a block is outside the chip's envelope."""
    import dataclasses

    from minipallas.tools.difftest.report import Outcome
    from minipallas.tools.difftest.tpu import judge

    x = _x(64 * BLOCK)
    report = run(Case("fast", _upstream_sum(64), (x,), optimize="fast"))
    (ours,), (theirs,) = (report.outcomes[w].outputs for w in ("discharge", "upstream"))
    assert ours.tobytes() != theirs.tobytes()

    def judged(tpu):
        ways = {"tpu": tpu, "upstream-tpu": theirs, "xla-tpu": ours}
        outcomes = {w: Outcome(w, outputs=[np.asarray(o)]) for w, o in ways.items()}
        return judge(dataclasses.replace(report, outcomes={**report.outcomes, **outcomes}))

    assert judged(ours).kind == "agree"
    lost = judged(ours - x[-BLOCK:].sum(dtype=np.float32))
    assert lost.kind == "outside-chip-envelope" and lost.message.startswith("tpu")
