"""The numerics envelope in the harness: XLA's legal float differences are ``within-envelope``
(never a bug), planted bugs (``Case.plant``) stay ``minipallas-bug`` and name the planted op,
and integers stay bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from minipallas.ir import Literal
from minipallas.ir.core import Block, Function, Op, Value
from minipallas.ir.location import Location
from minipallas.ir.types import ArrayType
from minipallas.tools.corpora.float_programs import PROGRAMS, affine, inputs, layer_norm, matvec
from minipallas.tools.difftest import KINDS, Case, ref, run
from minipallas.tools.difftest.outputs import interpret_outputs
from minipallas.tools.envelope.measure import envelope

F32 = np.float32
PLANT = Location("plant.py", 1)


def test_within_envelope_is_a_kind_right_after_agree():
    assert KINDS[:2] == ("agree", "within-envelope")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_xla_float_differences_are_within_the_envelope(name):
    rng = np.random.default_rng(7)
    seen = set()
    for _ in range(4):
        report = run(Case(name, PROGRAMS[name], inputs(name, rng)))
        kind = report.finding.kind
        assert kind in ("agree", "within-envelope"), report.text()
        assert report.ok and report.expected
        seen.add(kind)
        if kind == "within-envelope":
            f = report.finding
            assert f.ulps >= 1 and 0 < f.fraction <= 1, report.text()
            assert f"{f.ulps} ulps" in str(f) and "envelope" in report.text()
    if name != "sum12":  # XLA sums these in another order than numpy's pairwise one
        assert "within-envelope" in seen


def test_envelope_is_computed_only_when_bits_differ():
    report = run(Case("ints", lambda r: r[...] * 2, (ref(np.arange(4, dtype=np.int32)),)))
    assert report.finding.name == "agree" and report.envelope is None


def test_envelope_of_a_program_without_perturbable_ops_is_bits():
    """A float program of data movement and max: spread 0, floor 0 (bit for bit)."""
    x = np.arange(6, dtype=F32)
    fn = _import(lambda r: jnp.maximum(r[...][::-1], 2.0), ref(x))
    env = envelope(fn, (ref(x),), interpret_outputs(fn, (ref(x),)))
    assert env.floor == 0 and all(s is None or not s.any() for s in env.spreads)


@pytest.mark.parametrize("program", [lambda r: r[...] / 3.0, lambda r: r[...] / 3.0 - 0.5])
def test_division_by_a_constant_is_within_the_envelope(program):
    """XLA computes ``x / 3.0`` as ``x * (1 / 3.0)`` (and fuses it with the ``- 0.5``): other
    bits on a third of the elements, none of them a bug."""
    x = np.random.default_rng(3).standard_normal(1000).astype(F32)
    report = run(Case("div", program, (ref(x),)))
    f = report.finding
    assert f.kind == "within-envelope" and f.ulps >= 1 and 0 < f.fraction <= 1, report.text()


# -- planted bugs ---------------------------------------------------------------------------


def _import(fn, *args):
    import minipallas
    from minipallas.tools.difftest.harness import abstract

    return minipallas.from_jaxpr(jax.make_jaxpr(fn)(*abstract(args)))


def _constant(value, dtype, shape):
    """Ops making ``value`` of ``dtype`` broadcast to ``shape`` (planted), and its value."""
    scalar = Value(ArrayType((), dtype))
    ops = [
        Op("constant", (), (scalar,), {"value": Literal.of(np.asarray(value), dtype)}, (), PLANT)
    ]
    if shape == ():
        return ops, scalar
    full = Value(ArrayType(shape, dtype))
    ops.append(Op("broadcast_in_dim", (scalar,), (full,), {"shape": shape, "dims": ()}, (), PLANT))
    return ops, full


def _after(fn, pick, name, value):
    """``fn`` with the op ``pick`` chooses followed by ``name`` (planted) with a constant: the
    planted op's result is the picked op's own value (so the taps of both programs line up)."""
    ops = list(fn.body.ops)
    k = next(i for i, op in enumerate(ops) if pick(op))
    op = ops[k]
    original = op.results[0]
    raw = Value(original.type)
    extra, c = _constant(value, original.type.dtype, original.type.shape)
    planted = Op(name, (raw, c), (original,), {}, (), PLANT)
    ops[k : k + 1] = [op.replace(results=(raw,)), *extra, planted]
    return Function(fn.name, Block(fn.params, ops, fn.body.results))


def scale_result(factor):
    """Result 0 multiplied by ``factor``."""
    return lambda fn: _after(fn, lambda op: fn.body.results[0] in op.results, "mul", factor)


def sum_off_by(delta):
    """The first ``reduce_sum`` plus ``delta``."""
    return lambda fn: _after(fn, lambda op: op.name == "reduce_sum", "add", delta)


def constant_off(relative):
    """The first float constant other than 0 multiplied by ``1 + relative``."""

    def plant(fn):
        ops = list(fn.body.ops)
        for k, op in enumerate(ops):
            if op.name == "constant" and op.results[0].type.dtype == "float32":
                value = op.attrs["value"].array()
                if value.any():
                    new = Literal.of(value.astype(np.float64) * (1 + relative), "float32")
                    ops[k] = op.replace(attrs={"value": new}, loc=PLANT)
                    break
        return Function(fn.name, Block(fn.params, ops, fn.body.results))

    return plant


@pytest.mark.parametrize(
    "name,plant,op",
    [
        ("layer_norm", scale_result(1 + 2**-17), "mul"),
        ("softmax", scale_result(1 + 2**-17), "mul"),
        ("sum12", sum_off_by(0.01), "add"),
        ("softmax", sum_off_by(0.01), "add"),
        ("affine", constant_off(1e-6), "constant"),
    ],
)
def test_planted_float_bugs_are_bugs_naming_the_planted_op(name, plant, op):
    rng = np.random.default_rng(11)
    program = {**PROGRAMS, "affine": affine}[name]
    report = run(Case(name, program, inputs(name, rng), plant=plant))
    f = report.finding
    assert (f.kind, f.name) == ("minipallas-bug", "compile disagrees with interpret"), f
    assert f.fraction > 1 and f.ulps >= 1
    assert f.op is not None and f.op.split(" = ")[1].startswith(op), f.op
    assert "plant.py:1" in f.op and f.op in report.text()


def test_planted_scale_fails_the_program_it_plants_into():
    """The plant changes only what compile compiles: upstream still agrees."""
    rng = np.random.default_rng(11)
    report = run(Case("ln", layer_norm, inputs("layer_norm", rng), plant=scale_result(1 + 2**-17)))
    assert report.difference.way == "compile"
    assert report.distances.get("upstream") is None or report.distances["upstream"].within


def test_planted_integer_off_by_one_stays_a_bug_without_envelope():
    def f(r):
        return jnp.sum(r[...] * 3)

    x = np.arange(-5, 7, dtype=np.int32)
    report = run(Case("ints", f, (ref(x),), plant=sum_off_by(1)))
    found = report.finding
    assert (found.kind, found.name) == ("minipallas-bug", "compile disagrees with interpret")
    assert found.ulps is None and found.fraction is None and report.envelope is None
    assert found.op.split(" = ")[1].startswith("add") and "plant.py:1" in found.op


def test_cli_summary_counts_within_envelope_apart_from_exact_agreement():
    from minipallas.tools.difftest.cli import table

    rng = np.random.default_rng(7)
    reports = [run(Case("matvec", matvec, inputs("matvec", rng))) for _ in range(3)]
    reports.append(run(Case("ints", lambda r: r[...] + 1, (ref(np.arange(3, dtype=np.int32)),))))
    within = [r for r in reports if r.finding.kind == "within-envelope"]
    assert within and reports[-1].finding.kind == "agree"
    summary = table(reports).splitlines()[-2]
    assert f"{len(reports) - len(within)} agree (bit for bit)" in summary
    widest = max(r.finding.fraction for r in within)
    assert f"{len(within)} within-envelope (XLA's float rounding; at most {widest:.2g}x" in summary


def test_a_bug_in_an_op_reading_a_ref_is_found_in_the_whole_program():
    """A plant after a ``get`` defines its value from a ref, which no op can be fed alone: the
    bisect says so and names the first tapped value out of its envelope in the whole program."""
    x = np.arange(8, dtype=F32)
    report = run(Case("read", lambda r: r[...], (ref(x),), plant=scale_result(3.0)))
    f = report.finding
    assert (f.kind, f.name) == ("minipallas-bug", "compile disagrees with interpret"), f
    assert f.op.split(" = ")[1].startswith("mul") and "plant.py:1" in f.op
    assert "no op leaves its envelope on the interpreter's operands" in f.detail
