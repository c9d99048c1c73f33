"""The effects analysis: per op (operand positions), per region and per function (parameter
positions); scoped allocations stay inside; views map to their root ref; regions and calls."""

import numpy as np
import pytest
from ir_types import F8, F32, I32, REF8

from minipallas.ir import (
    Array,
    ArrayType,
    Builder,
    Dyn,
    Int,
    Literal,
    Op,
    RefType,
    Slice,
    params,
)
from minipallas.ir.effects import (
    Accum,
    Effect,
    EffectsAnalysis,
    Read,
    Write,
    effects,
    effects_with_swap_reads,
    region_operand_map,
)
from minipallas.ir.errors import PassError
from minipallas.ir.opdef import READ, WRITE, EffectKind

REF2D = RefType((4, 8), "float32")
FULL8 = (Slice(0, 8, 1),)


def const(b, value, dtype="int32"):
    return b.create("constant", [], {"value": Literal.of(np.asarray(value), dtype)}).result


def get(b, ref, indexer=FULL8):
    return b.create("get", [ref], {"indexer": indexer}).result


def swap(b, ref, value, indexer=FULL8):
    return b.create("swap", [ref, value], {"indexer": indexer}).result


def test_state_ops_at_operand_zero():
    r, v, i, idx, m = params([REF8, F8, I32, ArrayType((3,), "int32"), ArrayType((8,), "bool")])
    b = Builder()
    cases = {
        b.create("get", [r, i], {"indexer": (Int(Dyn(0)),)}): {Read(0)},
        b.create("swap", [r, v], {"indexer": FULL8}): {Write(0)},  # upstream: {WriteEffect(0)}
        b.create("addupdate", [r, v], {"indexer": FULL8}): {Accum(0)},
        b.create("load", [r, m], {"indexer": FULL8, "masked": True}): {Read(0)},
        b.create("store", [r, v], {"indexer": FULL8}): {Write(0)},
        b.create("get", [r, idx], {"indexer": (Array(Dyn(0)),)}): {Read(0)},
        b.create("exp", [v]): set(),
        b.create("ref.reshape", [r], {"shape": (2, 4)}): set(),
        b.create("program_id", [], {"axis": 0}): set(),
    }
    for op, expected in cases.items():
        assert effects(op) == expected, op.name


def test_function_effects_at_parameter_positions():
    a, x, r = params([REF8, F8, REF8])
    b = Builder()
    v = get(b, a)
    b.create("addupdate", [r, v], {"indexer": FULL8})
    b.create("store", [r, x], {"indexer": FULL8})
    assert effects(b.function("f", [a, x, r], [])) == {Read(0), Accum(2), Write(2)}


def test_views_map_to_their_root():
    x, r, i = params([F8, REF2D, I32])
    b = Builder()
    row = b.create("ref.at", [r, i], {"indexer": (Int(Dyn(0)), Slice(0, 8, 1))}).result
    half = b.create("ref.at", [row], {"indexer": (Slice(0, 4, 2),)}).result
    flat = b.create("ref.reshape", [r], {"shape": (32,)}).result
    bits = b.create("ref.bitcast", [flat], {"dtype": "int32"}).result
    t = b.create("ref.transpose", [r], {"permutation": (1, 0)}).result
    b.create("swap", [half, get(b, half, (Slice(0, 4, 1),))], {"indexer": (Slice(0, 4, 1),)})
    get(b, bits, (Slice(0, 32, 1),))
    b.create(
        "addupdate", [t, get(b, t, (Int(0), Slice(0, 4, 1)))], {"indexer": (Int(1), Slice(0, 4, 1))}
    )
    assert effects(b.function("views", [x, r, i], [])) == {Read(1), Write(1), Accum(1)}


def scoped_op(b, operands, body_fn, n_alloc=1):
    """``run_scoped`` with ``n_alloc`` fresh ``Ref{f32[8]}`` and one parameter per operand."""
    body = Builder()
    ps = params([REF8] * n_alloc + [v.type for v in operands])
    body_fn(body, *ps)
    return b.create("run_scoped", list(operands), {}, [body.block(ps, [])])


def test_run_scoped_keeps_allocation_effects_inside():
    a, r = params([REF8, REF8])
    b = Builder()

    def body(bb, scratch, a_in, r_in):
        swap(bb, scratch, get(bb, a_in))  # the allocation: read and written, stays inside
        bb.create("addupdate", [r_in, get(bb, scratch)], {"indexer": FULL8})

    op = scoped_op(b, [a, r], body)
    assert effects(op) == {Read(0), Accum(1)}
    assert effects(op.regions[0]) == {Read(0), Write(0), Read(1), Accum(2)}
    assert effects(b.function("f", [a, r], [])) == {Read(0), Accum(1)}


def test_nested_run_scoped_closing_over_outer_allocation():
    (r,) = params([REF8])
    b = Builder()
    inner_ops = []

    def outer_body(bb, outer_scratch, r_in):
        def inner_body(ib, inner_scratch, s_in):
            swap(ib, s_in, get(ib, inner_scratch))

        inner_ops.append(scoped_op(bb, [outer_scratch], inner_body))
        get(bb, r_in)

    op = scoped_op(b, [r], outer_body)
    assert effects(inner_ops[0]) == {Write(0)}  # the outer scratch, at operand 0
    assert effects(op) == {Read(0)}


def test_for_loop_maps_consts_and_unions_the_body():
    w, x, r = params([REF8, F8, REF8])
    body = Builder()
    i, w_in, r_in, acc = params([I32, REF8, REF8, F32])
    body.create("store", [w_in, get(body, r_in)], {"indexer": FULL8})
    b = Builder()
    lo, hi = const(b, 0), const(b, 3)
    zero = b.create("constant", [], {"value": Literal.of(0.0, "float32")}).result
    op = b.create(
        "for", [lo, hi, w, r, zero], {"num_consts": 2}, [body.block([i, w_in, r_in, acc], [acc])]
    )
    assert region_operand_map(op, 0) == {1: 2, 2: 3}
    assert effects(op) == {Write(2), Read(3)}
    assert effects(b.function("f", [w, x, r], [])) == {Write(0), Read(2)}


def test_while_maps_cond_and_body_consts():
    rc, rb, n = params([REF8, REF8, I32])
    cond_b, body_b = Builder(), Builder()
    cr, cn = params([REF8, I32])
    br, bn = params([REF8, I32])
    get(cond_b, cr)
    p = cond_b.create("lt", [cn, cn]).result
    body_b.create("addupdate", [br, get(body_b, br)], {"indexer": FULL8})
    b = Builder()
    op = b.create(
        "while",
        [rc, rb, n],
        {"cond_nconsts": 1, "body_nconsts": 1},
        [cond_b.block([cr, cn], [p]), body_b.block([br, bn], [bn])],
    )
    assert region_operand_map(op, 0) == {0: 0} and region_operand_map(op, 1) == {0: 1}
    assert effects(op) == {Read(0), Read(1), Accum(1)}


def test_cond_is_the_union_of_its_branches():
    idx, r, s = params([I32, REF8, REF8])
    branches = []
    for k in range(3):
        bb = Builder()
        pr, ps = params([REF8, REF8])
        if k == 0:
            get(bb, pr)
        elif k == 1:
            swap(bb, ps, get(bb, pr))
        branches.append(bb.block([pr, ps], []))
    b = Builder()
    op = b.create("cond", [idx, r, s], {}, branches)
    assert effects(op) == {Read(1), Write(2)}
    assert effects(b.function("f", [idx, r, s], [])) == {Read(1), Write(2)}


def test_call_reports_the_callee_at_operand_positions():
    x, r = params([F8, REF8])
    cb = Builder()
    cb.create("store", [r, x], {"indexer": FULL8})
    callee = cb.function("callee", [x, r], [])
    a, s = params([F8, REF8])
    b = Builder()
    op = b.create("call", [a, s], {"callee": callee})
    assert effects(op) == {Write(1)}
    assert effects(b.function("caller", [a, s], [])) == {Write(1)}


def test_analysis_caches_blocks():
    (r,) = params([REF8])
    b = Builder()
    get(b, r)
    fn = b.function("f", [r], [])
    analysis = EffectsAnalysis()
    first = analysis.function(fn)
    assert analysis.function(fn) is first


def test_effect_order_and_text():
    found = {Write(1), Read(1), Accum(0), Read(0), Write(0), Accum(1)}
    assert [str(e) for e in sorted(found)] == [
        "read 0",
        "write 0",
        "accum 0",
        "read 1",
        "write 1",
        "accum 1",
    ]
    assert Effect(READ, 2) == Read(2) and hash(Effect(READ, 2)) == hash(Read(2))
    assert [str(k) for k in EffectKind] == ["read", "write", "accum"]


@pytest.mark.parametrize("kind, pos", [("read", 0), ("update", 0), (READ, -1), (WRITE, "0")])
def test_bad_effects_are_rejected(kind, pos):
    with pytest.raises(PassError, match="bad effect"):
        Effect(kind, pos)


def test_unknown_op_is_an_error():
    op = Op("mystery", (), (), {})
    with pytest.raises(PassError, match="unknown op 'mystery'"):
        effects(op)


def test_swap_reads_only_when_its_old_contents_are_used():
    r, s, t, x = params([REF8, REF8, REF8, F8])
    b = Builder()
    swap(b, r, x)  # old contents dropped: a write only
    old = swap(b, s, x)
    b.create("store", [r, b.create("exp", [old]).result], {"indexer": FULL8})
    returned = swap(b, t, x)  # old contents are the function's result
    fn = b.function("f", [r, s, t, x], [returned])
    assert effects(fn) == {Write(0), Write(1), Write(2)}
    assert effects_with_swap_reads(fn) == {Write(0), Read(1), Write(1), Read(2), Write(2)}
    assert effects_with_swap_reads(fn.body) == effects_with_swap_reads(fn)


def test_swap_reads_inside_a_region_map_to_the_operand():
    (r,) = params([REF8])

    def body(bb, scratch, r_in):
        old = swap(bb, r_in, get(bb, scratch))  # the outer ref's old contents reach the scratch
        swap(bb, scratch, old)

    b = Builder()
    op = scoped_op(b, [r], body)
    fn = b.function("f", [r], [])
    assert effects(op) == {Write(0)} and effects(fn) == {Write(0)}
    assert effects_with_swap_reads(fn) == {Read(0), Write(0)}
