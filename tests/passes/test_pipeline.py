"""The pass manager: composing named passes from a string, options, the verifier between passes,
the ``after_each`` hook, and the errors for unknown passes and options. The FileCheck text
tests in ``filecheck/`` (one file per pass) are run by ``tests/conftest.py``."""

import numpy as np
import pytest
from ir_types import F8, REF8

import minipallas
from minipallas.ir import TPU_VMEM, Builder, Function, Literal, RefType, Slice, params
from minipallas.ir.collectives import CollectiveAxesUnsupported
from minipallas.ir.errors import PassError, VerificationError
from minipallas.passes.cleanup import cleanup, count_ops
from minipallas.passes.discharge import discharge
from minipallas.passes.pipeline import PASSES, VERIFY_ENV, parse_pipeline, register, run

FULL8 = (Slice(0, 8, 1),)


def kernel(axes=()):
    """o[:] = 2 * x[:] through a scratch ref, plus a dead op."""
    x, o = params([REF8, REF8])
    body = Builder()
    s, x_in, o_in = params([RefType((8,), "float32", TPU_VMEM), REF8, REF8])
    v = body.create("get", [x_in], {"indexer": FULL8}).result
    body.create("exp", [v])
    two = body.create("constant", [], {"value": Literal.of(np.full(8, 2.0), "float32")}).result
    body.create("swap", [s, body.create("mul", [v, two]).result], {"indexer": FULL8})
    body.create(
        "swap", [o_in, body.create("get", [s], {"indexer": FULL8}).result], {"indexer": FULL8}
    )
    b = Builder()
    b.create("run_scoped", [x, o], {"collective_axes": axes}, [body.block([s, x_in, o_in], [])])
    return b.function("kernel", [x, o], [])


@pytest.fixture
def extra_passes():
    """Registers test-only passes and removes them afterwards."""
    added = []

    def add(name, fn):
        register(name)(fn)
        added.append(name)

    yield add
    for name in added:
        del PASSES[name]


def test_builtin_passes_are_registered():
    assert set(PASSES) >= {"collectives", "discharge", "cleanup"}
    assert PASSES["discharge"].run is discharge and PASSES["cleanup"].run is cleanup
    assert minipallas.passes.run is run


def test_composition_matches_calling_the_passes():
    fn = kernel()
    seen = []
    out = run(
        fn,
        "collectives,discharge,cleanup",
        verify=True,
        after_each=lambda name, f: seen.append((name, count_ops(f))),
    )
    direct = cleanup(discharge(fn))
    assert [name for name, _ in seen] == ["collectives", "discharge", "cleanup"]
    assert seen[0][1] == count_ops(fn) and seen[-1][1] == count_ops(out) == count_ops(direct)
    assert [o.name for o in out.walk()] == ["constant", "mul"]
    x = np.arange(8, dtype=np.float32)
    o = np.zeros(8, np.float32)
    got = minipallas.interpret(out, x, o)
    minipallas.interpret(fn, x, o)
    np.testing.assert_array_equal(got[1], o)


def test_after_each_gets_each_stage_in_order(extra_passes):
    stages = []
    extra_passes("rename", lambda fn: Function(fn.name + "_r", fn.body))
    run(
        kernel(),
        " collectives , rename,rename ",
        after_each=lambda n, f: stages.append((n, f.name)),
    )
    assert stages == [("collectives", "kernel"), ("rename", "kernel_r"), ("rename", "kernel_r_r")]


def test_empty_pipeline_returns_the_input():
    fn = kernel()
    assert run(fn, "") is fn and run(fn, "  ") is fn


def test_unknown_pass_lists_the_known_ones_before_running_anything():
    stages = []
    with pytest.raises(PassError, match="unknown pass 'cse'") as info:
        run(kernel(), "collectives,cse", after_each=lambda n, f: stages.append(n))
    assert "cleanup, collectives, discharge" in str(info.value)
    assert "minipallas-opt --load FILE.py" in info.value.fix  # how a pass of one's own gets in
    assert stages == []
    with pytest.raises(PassError, match="unknown pass ''"):
        parse_pipeline("cleanup,,discharge")


def test_options():
    assert parse_pipeline("collectives{context=mosaic},cleanup") == [
        ("collectives", {"context": "mosaic"}),
        ("cleanup", {}),
    ]
    with pytest.raises(NotImplementedError) as info:
        run(kernel(("x",)), "collectives{context = mosaic}")
    assert str(info.value) == "run_scoped lowering does not support collective axes"
    with pytest.raises(PassError, match="pass 'collectives' has no option 'colour'") as info:
        parse_pipeline("collectives{colour=x}")
    assert "its options: context (one of discharge, " in str(info.value)
    with pytest.raises(PassError, match="has no option 'x'"):
        parse_pipeline("cleanup{x=1}")
    with pytest.raises(PassError, match="no closing"):
        parse_pipeline("collectives{context=mosaic")
    with pytest.raises(PassError, match="not key=value"):
        parse_pipeline("collectives{mosaic}")


def test_collectives_in_front_of_discharge():
    with pytest.raises(CollectiveAxesUnsupported) as info:
        run(kernel(("x",)), "collectives,discharge,cleanup", verify=True)
    assert str(info.value) == "run_scoped discharge does not support collective_axes yet."


def broken(fn):
    """A pass that yields a value nobody defines."""
    (x,) = params([F8])
    return Function(fn.name, Builder().block(fn.params, [x]))


def test_verify_catches_a_bad_pass_and_names_it(extra_passes):
    extra_passes("broken", broken)
    fn = kernel()
    assert run(fn, "broken", verify=False).body.ops == ()  # not verified: nothing notices
    with pytest.raises(VerificationError) as info:
        run(fn, "cleanup,broken", verify=True)
    assert "after pass 'broken' of pipeline 'cleanup,broken'" in info.value.__notes__[-1]


def test_the_environment_turns_verify_on_where_the_caller_leaves_it(monkeypatch, extra_passes):
    extra_passes("broken", broken)
    monkeypatch.setenv(VERIFY_ENV, "1")  # the tests' own setting (conftest.py)
    with pytest.raises(VerificationError):
        run(kernel(), "broken")
    assert run(kernel(), "broken", verify=False).body.ops == ()
    monkeypatch.delenv(VERIFY_ENV)
    assert run(kernel(), "broken").body.ops == ()


def test_verify_checks_the_input_first(extra_passes):
    calls = []
    extra_passes("spy", lambda fn: calls.append(fn) or fn)
    bad = broken(kernel())
    with pytest.raises(VerificationError) as info:
        run(bad, "spy", verify=True)
    assert calls == []
    assert "before the first pass" in info.value.__notes__[-1]


def test_verify_runs_after_every_pass(monkeypatch, extra_passes):
    from minipallas.ir import verifier

    checked = []
    monkeypatch.setattr(verifier, "verify", lambda fn: checked.append(fn.name))
    extra_passes("rename", lambda fn: Function(fn.name + "_r", fn.body))
    run(kernel(), "rename,rename", verify=True)
    assert checked == ["kernel", "kernel_r", "kernel_r_r"]
    checked.clear()
    run(kernel(), "rename", verify=False)
    assert checked == []


def test_register_twice_is_an_error():
    with pytest.raises(PassError, match="already registered"):
        register("cleanup")(cleanup)
