"""The collective-axes pass: every path's exception class, exact message and note, wherever the
``run_scoped`` with collective axes hides (nested scopes, loops, branches, callees)."""

import pytest

from minipallas.errors import MiniPallasError, PassError, VerificationError
from minipallas.ir import (
    TPU_VMEM,
    ArrayType,
    Builder,
    Function,
    Int,
    Literal,
    Location,
    RefType,
    Slice,
    params,
)
from minipallas.passes import collectives as collectives_module
from minipallas.passes.collectives import (
    CollectiveAxesError,
    CollectiveAxesLoweringError,
    CollectiveAxesUnsupported,
    check_collective_axes,
    collectives,
)
from minipallas.passes.pipeline import run

F32 = ArrayType((), "float32")
I32 = ArrayType((), "int32")
BOOL = ArrayType((), "bool")
REF8 = RefType((8,), "float32")
SCRATCH = RefType((8,), "float32", TPU_VMEM)
FULL8 = (Slice(0, 8, 1),)
LOC = Location("kernel.py", 12)

DISCHARGE = "run_scoped discharge does not support collective_axes yet."
LOWERING = "run_scoped lowering outside of Pallas does not support collective_axes."
MOSAIC = "run_scoped lowering does not support collective axes"

# context -> (builtin class, exact message)
EXPECTED = {
    "discharge": (NotImplementedError, DISCHARGE),
    "lowering": (ValueError, LOWERING),
    "mosaic": (NotImplementedError, MOSAIC),
    "triton": (NotImplementedError, DISCHARGE),
}


def scoped(b, outer_ref, axes=("x",), loc=LOC, inner=None):
    """``run_scoped`` allocating one scratch ref, copying ``outer_ref`` into it and reading it."""
    body = Builder()
    scratch, ref = params([SCRATCH, outer_ref.type])
    v = body.create("get", [ref], {"indexer": FULL8}).result
    body.create("swap", [scratch, v], {"indexer": FULL8})
    if inner is not None:
        inner(body, scratch)
    out = body.create("get", [scratch], {"indexer": (Int(0),)}).result
    return b.create(
        "run_scoped",
        [outer_ref],
        {"collective_axes": axes},
        [body.block([scratch, ref], [out])],
        loc,
    ).result


def kernel(axes=("x",), loc=LOC):
    r = params([REF8])[0]
    b = Builder()
    out = scoped(b, r, axes, loc)
    return b.function("kernel", [r], [out])


def raised(fn, context):
    with pytest.raises(MiniPallasError) as info:
        check_collective_axes(fn, context)
    return info.value


@pytest.mark.parametrize("context", sorted(EXPECTED))
def test_each_context_raises_upstream_class_and_exact_message(context):
    builtin, message = EXPECTED[context]
    e = raised(kernel(), context)
    assert str(e) == message
    assert e.args == (message,)
    assert isinstance(e, builtin)
    assert isinstance(e, MiniPallasError)
    assert isinstance(e, CollectiveAxesError)
    assert (e.op, e.loc, e.axes, e.context) == ("run_scoped", LOC, ("x",), context)


def test_classes():
    assert issubclass(CollectiveAxesUnsupported, NotImplementedError)
    assert issubclass(CollectiveAxesLoweringError, ValueError)
    assert not issubclass(CollectiveAxesLoweringError, NotImplementedError)
    assert type(raised(kernel(), "lowering")) is CollectiveAxesLoweringError
    for context in ("discharge", "mosaic", "triton"):
        assert type(raised(kernel(), context)) is CollectiveAxesUnsupported


def test_plain_except_clauses_catch_it():
    with pytest.raises(NotImplementedError, match=r"^run_scoped discharge does not"):
        check_collective_axes(kernel(), "discharge")
    with pytest.raises(ValueError, match=r"^run_scoped lowering outside of Pallas"):
        check_collective_axes(kernel(), "lowering")


@pytest.mark.parametrize("context", sorted(EXPECTED))
def test_note_names_op_location_axes_and_ways_out(context):
    e = raised(kernel(axes=("x", "y")), context)
    (note,) = e.__notes__
    assert "'run_scoped' at kernel.py:12 in @kernel" in note
    assert "('x', 'y')" in note
    assert "drop collective_axes" in note
    assert "keep the collective outside the run_scoped body and pass its result in" in note
    assert "inside a kernel whose backend supports collective allocations" in note
    path = collectives_module.CONTEXTS[context][2]
    assert f"which {path} does not support" in note


def test_other_errors_still_render_their_location():
    e = VerificationError("bad", op="get", loc=LOC)
    assert str(e) == "kernel.py:12: 'get': bad"


def test_no_axes_passes_and_the_pass_returns_the_same_function():
    fn = kernel(axes=())
    for context in EXPECTED:
        assert check_collective_axes(fn, context) is None
    assert collectives(fn) is fn
    assert collectives(fn, context="mosaic") is fn


def test_unknown_context():
    with pytest.raises(PassError, match="unknown collective-axes context 'gpu'") as info:
        check_collective_axes(kernel(axes=()), "gpu")
    assert "discharge, lowering, mosaic, triton" in str(info.value)


def test_nested_run_scoped():
    inner_loc = Location("kernel.py", 30)

    def inner(body, scratch):
        scoped(body, scratch, ("core",), inner_loc)

    r = params([REF8])[0]
    b = Builder()
    out = scoped(b, r, (), LOC, inner)
    e = raised(b.function("nested", [r], [out]), "discharge")
    assert str(e) == DISCHARGE
    assert e.loc == inner_loc and e.axes == ("core",)
    assert "kernel.py:30 in @nested" in e.__notes__[0]


def test_first_offender_in_program_order():
    r = params([REF8])[0]
    b = Builder()
    scoped(b, r, ("a",), Location("kernel.py", 1))
    scoped(b, r, ("b",), Location("kernel.py", 2))
    e = raised(b.function("two", [r], []), "mosaic")
    assert e.axes == ("a",) and e.loc.line == 1


def test_inside_for_loop():
    r = params([REF8])[0]
    body = Builder()
    i, rr = params([I32, REF8])
    scoped(body, rr)
    b = Builder()
    lo = b.create("constant", [], {"value": Literal.of(0, "int32")}).result
    hi = b.create("constant", [], {"value": Literal.of(4, "int32")}).result
    b.create("for", [lo, hi, r], {"num_consts": 1}, [body.block([i, rr], [])])
    e = raised(b.function("loop", [r], []), "lowering")
    assert str(e) == LOWERING and isinstance(e, ValueError)


def test_inside_while_condition_and_body():
    for in_cond in (True, False):
        r, c = params([REF8, I32])
        cond_b, body_b = Builder(), Builder()
        cr, cc = params([REF8, I32])
        br, bc = params([REF8, I32])
        scoped(cond_b if in_cond else body_b, cr if in_cond else br)
        p = cond_b.create("lt", [cc, cc]).result
        b = Builder()
        b.create(
            "while",
            [r, r, c],
            {"cond_nconsts": 1, "body_nconsts": 1},
            [cond_b.block([cr, cc], [p]), body_b.block([br, bc], [bc])],
        )
        e = raised(b.function("w", [r, c], []), "triton")
        assert str(e) == DISCHARGE


def test_inside_second_cond_branch():
    r, idx = params([REF8, I32])
    branches = []
    for axes in ((), ("x",)):
        br = Builder()
        (p,) = params([REF8])
        scoped(br, p, axes)
        branches.append(br.block([p], []))
    b = Builder()
    b.create("cond", [idx, r], {}, branches)
    e = raised(b.function("branchy", [r, idx], []), "discharge")
    assert str(e) == DISCHARGE


def test_inside_callee():
    inner = kernel()
    inner = Function("inner", inner.body)
    r = params([REF8])[0]
    b = Builder()
    out = b.create("call", [r], {"callee": inner}).result
    b.create("call", [r], {"callee": inner})
    e = raised(b.function("outer", [r], [out]), "mosaic")
    assert str(e) == MOSAIC
    assert "in @inner (called from @outer)" in e.__notes__[0]


def test_pipeline_runs_the_check():
    with pytest.raises(NotImplementedError) as info:
        run(kernel(), "collectives")
    assert str(info.value) == DISCHARGE
    with pytest.raises(ValueError) as info:
        run(kernel(), "collectives{context=lowering}")
    assert str(info.value) == LOWERING
    fn = kernel(axes=())
    assert run(fn, "collectives", verify=True) is fn
