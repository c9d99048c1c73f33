"""The collective-axes pass: every path's exception class, exact message and note, which upstream
rule each path meets (from the op's operands and whether it sits in a callee), wherever the
``run_scoped`` with collective axes hides (nested scopes, loops, branches, callees). The same
programs against upstream itself: test_collectives_upstream.py."""

import pytest
from ir_types import F8, I32, REF8

from minipallas.ir import (
    TPU_VMEM,
    Builder,
    Function,
    Int,
    Literal,
    Location,
    RefType,
    Slice,
    params,
)
from minipallas.ir import collectives as collectives_module
from minipallas.ir.collectives import (
    CollectiveAxesError,
    CollectiveAxesLoweringError,
    CollectiveAxesUnsupported,
    check_collective_axes,
)
from minipallas.ir.errors import MiniPallasError, PassError, VerificationError
from minipallas.passes.collectives import collectives
from minipallas.passes.pipeline import run

SCRATCH = RefType((8,), "float32", TPU_VMEM)
FULL8 = (Slice(0, 8, 1),)
LOC = Location("kernel.py", 12)

DISCHARGE = "run_scoped discharge does not support collective_axes yet."
LOWERING = "run_scoped lowering outside of Pallas does not support collective_axes."
MOSAIC = "run_scoped lowering does not support collective axes"
INTERPRET = "run_scoped interpret rule does not support collective axes"
TRITON = (
    "Unimplemented primitive in Pallas Triton lowering: run_scoped. Please file an issue at"
    " https://github.com/jax-ml/jax/issues/new/choose."
)
CONTEXTS = ("discharge", "lowering", "interpreter", "cpu_kernel", "mosaic", "triton")
KERNEL_RULES = {"cpu_kernel": "interpret", "mosaic": "mosaic", "triton": "triton"}

# upstream rule -> (builtin class, exact message)
EXPECTED = {
    "discharge": (NotImplementedError, DISCHARGE),
    "lowering": (ValueError, LOWERING),
    "interpret": (NotImplementedError, INTERPRET),
    "mosaic": (NotImplementedError, MOSAIC),
    "triton": (NotImplementedError, TRITON),
}


def rule_for(context, uses_ref, in_callee=False):
    """The rule upstream meets: kernels their own (not interpret mode in a callee), else the
    discharge rule for a scope using an outer ref and the lowering rule for one that does not."""
    if context in KERNEL_RULES and not (context == "cpu_kernel" and in_callee):
        return KERNEL_RULES[context]
    return "discharge" if uses_ref else "lowering"


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


def of_values(axes=("x",), loc=LOC):
    """``x -> x[0]`` through scratch: the scope's one operand is an array, no ref."""
    x = params([F8])[0]
    body = Builder()
    scratch, xin = params([SCRATCH, F8])
    body.create("swap", [scratch, xin], {"indexer": FULL8})
    out = body.create("get", [scratch], {"indexer": (Int(0),)}).result
    b = Builder()
    op = b.create(
        "run_scoped", [x], {"collective_axes": axes}, [body.block([scratch, xin], [out])], loc
    )
    return b.function("values", [x], [op.result])


PROGRAMS = {"refs": (kernel, True), "values": (of_values, False)}


def raised(fn, context):
    with pytest.raises(MiniPallasError) as info:
        check_collective_axes(fn, context)
    return info.value


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("context", CONTEXTS)
def test_each_context_raises_upstream_class_and_exact_message(context, program):
    make, uses_ref = PROGRAMS[program]
    rule = rule_for(context, uses_ref)
    builtin, message = EXPECTED[rule]
    e = raised(make(), context)
    assert str(e) == message
    assert e.args == (message,)
    assert isinstance(e, builtin)
    assert isinstance(e, MiniPallasError)
    assert isinstance(e, CollectiveAxesError)
    assert (e.op, e.loc, e.axes, e.context, e.rule) == ("run_scoped", LOC, ("x",), context, rule)


def test_classes():
    assert issubclass(CollectiveAxesUnsupported, NotImplementedError)
    assert issubclass(CollectiveAxesLoweringError, ValueError)
    assert not issubclass(CollectiveAxesLoweringError, NotImplementedError)
    for context in CONTEXTS:
        for make, uses_ref in PROGRAMS.values():
            lowering = rule_for(context, uses_ref) == "lowering"
            want = CollectiveAxesLoweringError if lowering else CollectiveAxesUnsupported
            assert type(raised(make(), context)) is want


def test_plain_except_clauses_catch_it():
    with pytest.raises(NotImplementedError, match=r"^run_scoped discharge does not"):
        check_collective_axes(kernel(), "lowering")
    with pytest.raises(ValueError, match=r"^run_scoped lowering outside of Pallas"):
        check_collective_axes(of_values(), "lowering")


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("context", CONTEXTS)
def test_note_names_op_location_axes_origin_and_ways_out(context, program):
    make, uses_ref = PROGRAMS[program]
    e = raised(make(axes=("x", "y")), context)
    (note,) = e.__notes__
    assert f"'run_scoped' at kernel.py:12 in @{make().name} has collective_axes ('x', 'y')" in note
    path = collectives_module.CONTEXTS[context]
    origin = collectives_module.RULES[e.rule][2]
    assert f", which {path} does not support. The message is that of {origin}. Ways out:" in note
    assert "drop collective_axes" in note
    assert "keep the collective outside the run_scoped body and pass its result in" in note
    assert "inside a kernel whose backend supports collective allocations" in note


def test_the_triton_note_is_one_sentence_per_thought():
    (note,) = raised(kernel(), "triton").__notes__
    assert "which Triton GPU kernel lowering does not support. The message is that of " in note
    assert "upstream's Triton lowering, which has no run_scoped rule at all; " in note
    assert "Triton GPU lowering, which discharges scratch does not support" not in note


def test_other_errors_still_render_their_location():
    e = VerificationError("bad", op="get", loc=LOC)
    assert str(e) == "kernel.py:12: 'get': bad"


def test_no_axes_passes_and_the_pass_returns_the_same_function():
    fn = kernel(axes=())
    for context in CONTEXTS:
        assert check_collective_axes(fn, context) is None
    assert collectives(fn) is fn
    assert collectives(fn, context="mosaic") is fn


def test_unknown_context():
    with pytest.raises(PassError, match="unknown collective-axes context 'gpu'") as info:
        check_collective_axes(kernel(axes=()), "gpu")
    assert "discharge, lowering, interpreter, cpu_kernel, mosaic, triton" in str(info.value)


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
    e = raised(b.function("loop", [r], []), "lowering")  # the loop's ref: discharged first
    assert str(e) == DISCHARGE and isinstance(e, NotImplementedError)


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
        assert str(e) == TRITON


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
    outer = b.function("outer", [r], [out])
    e = raised(outer, "mosaic")
    assert str(e) == MOSAIC
    assert "in @inner (called from @outer)" in e.__notes__[0]
    # interpret mode does not look into callees: there the scope meets discharge (it uses a ref)
    e = raised(outer, "cpu_kernel")
    assert (str(e), e.rule, e.function) == (DISCHARGE, "discharge", "@inner (called from @outer)")


def test_a_callee_of_values_in_a_cpu_kernel_meets_the_lowering_rule():
    r = params([REF8])[0]
    b = Builder()
    x = b.create("get", [r], {"indexer": FULL8}).result
    b.create("call", [x], {"callee": of_values()})
    outer = b.function("outer", [r], [])
    for context in CONTEXTS:
        assert raised(outer, context).rule == rule_for(context, False, in_callee=True)


def test_the_first_offender_decides_even_when_a_later_one_would_meet_another_rule():
    x, r = params([F8, REF8])
    b = Builder()
    values = of_values(loc=Location("kernel.py", 1))
    first = b.create("call", [x], {"callee": values}).result
    scoped(b, r, ("y",), Location("kernel.py", 2))
    e = raised(b.function("both", [x, r], [first]), "discharge")
    assert (e.rule, e.axes, e.loc.line) == ("lowering", ("x",), 1)


def test_pipeline_runs_the_check():
    with pytest.raises(NotImplementedError) as info:
        run(kernel(), "collectives")
    assert str(info.value) == DISCHARGE
    with pytest.raises(ValueError) as info:
        run(of_values(), "collectives{context=lowering}")
    assert str(info.value) == LOWERING
    with pytest.raises(NotImplementedError) as info:
        run(of_values(), "collectives{context=cpu_kernel}")
    assert str(info.value) == INTERPRET
    fn = kernel(axes=())
    assert run(fn, "collectives", verify=True) is fn
