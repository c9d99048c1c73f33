"""The float corpus (``float_corpus.py``): every base case agrees with the interpreter, bit for
bit or within XLA's envelope, never a ``minipallas-bug``; every planted sibling is flagged as
one, at the planted op. The plants themselves are checked on the interpreter: each changes
its program by the planted amount, and leaves its input program unchanged.
"""

import functools

import numpy as np
import pytest

import minipallas as mp
from minipallas.ir.errors import PassError
from minipallas.tools.corpora.float_corpus import (
    BASE,
    DTYPES,
    PROGRAMS,
    SEEDS,
    SIBLINGS,
    Program,
    inputs,
)
from minipallas.tools.corpora.plants import change_constant, offset_after, scale_result, sizes
from minipallas.tools.difftest import run
from minipallas.tools.difftest.bisect import first_op_out, op_text
from minipallas.tools.difftest.outputs import interpret_outputs

KERNELS = {
    "tiled_matmul",
    "row_softmax",
    "layer_norm_kernel",
    "flash_attention",
    "grid_sum",
    "masked_tanh",
}
JNP = {
    "softmax",
    "jax_nn_softmax",
    "logsumexp",
    "jax_nn_logsumexp",
    "layer_norm",
    "attention",
    "matmul_chain",
}
# the op each plant adds or changes, which the finding must name: the bisect taps top-level
# values only, so a plant inside a kernel is named by the kernel's call
PLANTED_OP = {"scale": "= mul ", "eps": "= constant ", "sum": "= add "}
INSIDE_KERNEL = {"eps", "sum"}
BY_NAME = {p.name: p for p in PROGRAMS}


@functools.cache
def report(name):
    """The harness's report on one case (each case runs once per session)."""
    (case,) = [c for c in BASE + SIBLINGS if c.name == name]
    return run(case)


def _program(case_name):
    """The program of a base case (``NAME_DTYPE``) or sibling (``NAME_DTYPE_planted_PLANT``)."""
    return BY_NAME[case_name.split("_planted_")[0].rsplit("_", 1)[0]]


def test_corpus_has_the_kernels_and_jnp_families_in_both_dtypes():
    assert {p.name for p in PROGRAMS if p.kernel} == KERNELS
    assert {p.name for p in PROGRAMS if not p.kernel} == JNP
    assert {c.name for c in BASE} == {f"{p.name}_{t}" for p in PROGRAMS for t in DTYPES}
    planted = {c.name.split("_planted_")[0] for c in SIBLINGS}
    with_plant = {f"{p.name}_{t}" for p in PROGRAMS for t in DTYPES if p.plant is not None}
    assert planted == with_plant and len(SIBLINGS) == len(with_plant)  # one sibling each
    assert {p.name for p in PROGRAMS if p.plant is None} == {"jax_nn_softmax", "jax_nn_logsumexp"}
    kinds = {c.name.rsplit("_", 1)[1] for c in SIBLINGS}
    assert kinds == set(PLANTED_OP)
    assert len(SEEDS) >= 3


@pytest.mark.parametrize("name", [c.name for c in BASE])
def test_base_case_agrees_within_the_envelope(name):
    r = report(name)
    assert r.finding.kind in ("agree", "within-envelope"), r.text()
    assert all(r.outcomes[w].ok for w in ("upstream", "interpret", "discharge", "compile"))
    assert sum(label.startswith("result") for label in r.labels) == len(SEEDS)  # one per seed


@pytest.mark.parametrize("name", [c.name for c in SIBLINGS])
def test_planted_sibling_is_a_minipallas_bug_at_the_planted_op(name):
    r = report(name)
    assert r.finding.kind == "minipallas-bug", r.text()
    assert r.expected and r.difference.way == "compile"
    plant = name.rsplit("_", 1)[1]
    want = "= call @" if _program(name).kernel and plant in INSIDE_KERNEL else PLANTED_OP[plant]
    assert r.finding.op == op_text(r.compiled, _planted_op(r)), r.finding.detail
    assert want in r.finding.op


@pytest.mark.parametrize("name", ["layer_norm_f32", "attention_f32"])
def test_no_op_of_an_unplanted_program_leaves_its_envelope_on_the_interpreters_operands(name):
    """The siblings' bisect names their planted op because no op of these programs is out of
    its envelope alone: ``(x - mean)**2`` squares a legal one-ulp difference of ``x - mean``,
    which only the whole-program taps count against it."""
    op, found = first_op_out(report(name))
    assert op is None or found.startswith("no op leaves its envelope on the interpreter's")


def _planted_op(r):
    """The first top-level op of what compile compiled that defines a value of the import
    with another op (another name or attributes): the plant's."""
    defs = {v: op for op in r.program.body.ops for v in op.results}
    for op in r.compiled.body.ops:
        old = defs.get(op.results[0]) if op.results else None
        if old is not None and (old.name, dict(old.attrs)) != (op.name, dict(op.attrs)):
            return op
    raise AssertionError(f"{r.case.name}: no planted op at the top level")


# -- the plants on the interpreter ---------------------------------------------------------


def _imported(program: Program, dtype):
    import jax

    from minipallas.tools.difftest.harness import abstract

    args = inputs(program, dtype, 0)
    return mp.from_jaxpr(jax.make_jaxpr(program.fn)(*abstract(args))), args


def _planted(plant, fn, args):
    """Interpreter outputs before and after ``plant``; checks ``fn`` is left as it was."""
    text = str(fn)
    before = interpret_outputs(fn, args)
    after = interpret_outputs(plant(fn), args)
    assert str(fn) == text
    return before, after


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES)
def test_scale_result_scales_result_zero_by_the_factor(dtype):
    fn, args = _imported(BY_NAME["softmax"], dtype)
    before, after = _planted(scale_result(), fn, args)
    factor = np.float32(sizes(dtype).scale)
    np.testing.assert_array_equal(after[0], (before[0].astype(np.float32) * factor).astype(dtype))
    assert np.all(after[0] != before[0])  # every element moved: no rounding hid the scale


def test_offset_after_moves_the_first_sum_only():
    def two_sums(x):
        return x.sum(), (x * 2.0).sum()

    fn = mp.trace(two_sums, mp.ArrayType((8,), "float32"))
    x = np.linspace(-1, 2, 8, dtype=np.float32)
    before, after = _planted(offset_after("reduce_sum", 0.01), fn, [x])
    assert after[0] == before[0] + np.float32(0.01)
    assert after[1] == before[1]


def test_change_constant_replaces_layer_norm_eps():
    fn, args = _imported(BY_NAME["layer_norm"], DTYPES["f32"])
    planted = change_constant(1e-5, 1e-6)(fn)
    assert "constant 1e-05" in str(fn) and "constant 1e-05" not in str(planted)
    assert "constant 1e-06" in str(planted)
    before, after = interpret_outputs(fn, args), interpret_outputs(planted, args)
    assert np.any(before[0] != after[0])


def test_bf16_layer_norm_eps_is_below_rounding():
    """Why the bf16 jnp layer norm has no eps sibling: its planted program computes the very
    same bits, so no harness could flag it."""
    fn, args = _imported(BY_NAME["layer_norm"], DTYPES["bf16"])
    before, after = _planted(change_constant(1e-5, 1e-6), fn, args)
    np.testing.assert_array_equal(before[0].view(np.uint16), after[0].view(np.uint16))


@pytest.mark.parametrize(
    "plant, message",
    [
        (change_constant(0.125, 0.25), "no constant 0.125"),
        (offset_after("dot", 0.01), "no 'dot' op"),
    ],
)
def test_a_plant_that_changes_nothing_is_an_error(plant, message):
    fn = mp.trace(lambda x: x.sum(), mp.ArrayType((4,), "float32"))
    with pytest.raises(PassError, match=message):
        plant(fn)


def test_scale_result_of_a_returned_parameter_is_an_error():
    fn = mp.trace(lambda x: x, mp.ArrayType((4,), "float32"))
    with pytest.raises(PassError, match="op defining result 0"):
        scale_result()(fn)
