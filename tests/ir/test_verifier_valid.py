"""Well-formed programs the verifier must accept, and the verifier's cost and reach.

The programs are built with the ``Builder`` and cover every op family: state ops with static,
dynamic and integer-array indexers, chained ref views, scoped allocation (nested, with an outer
ref passed in), loops, N-way ``cond``, calls, kernel context, array ops and the pure indexed
ops discharge produces.
"""

import numpy as np
import pytest
from ir_types import F8, F32, I32, REF8

import minipallas
from minipallas.ir import (
    TPU_VMEM,
    Array,
    ArrayType,
    Builder,
    Dyn,
    Function,
    Int,
    Literal,
    Location,
    Module,
    Op,
    RefType,
    Slice,
    Value,
    params,
)
from minipallas.ir import verifier as verifier_module
from minipallas.ir.errors import VerificationError

REF2D = RefType((8, 128), "float32", TPU_VMEM)
FULL8 = (Slice(0, 8, 1),)


def const(b, value, dtype="float32", shape=()):
    return b.create("constant", [], {"value": Literal.of(np.full(shape, value), dtype)}).result


def test_state_ops_and_views():
    r, i, idx = params([REF2D, I32, ArrayType((4,), "int32")])
    b = Builder()
    row = b.create("get", [r, i], {"indexer": (Int(Dyn(0)), Slice(0, 128, 1))}).result
    win = b.create("get", [r, i], {"indexer": (Int(3), Slice(Dyn(0), 8, 2))}).result
    gathered = b.create("get", [r, idx], {"indexer": (Array(Dyn(0)), Int(0))}).result
    b.create("swap", [r, idx, gathered], {"indexer": (Array(Dyn(0)), Int(1))})
    b.create("addupdate", [r, win], {"indexer": (Int(0), Slice(0, 8, 16))})
    mask = b.create("gt", [win, win]).result
    other = const(b, 0.0)
    b.create(
        "load",
        [r, mask, other],
        {"indexer": (Int(1), Slice(0, 8, 1)), "masked": True, "has_other": True},
    )
    b.create("store", [r, win, mask], {"indexer": (Int(2), Slice(0, 8, 1)), "masked": True})
    view = b.create("ref.at", [r, i], {"indexer": (Slice(Dyn(0), 4, 1), Slice(0, 128, 1))})
    flat = b.create("ref.reshape", [view.result], {"shape": (512,)}).result
    bits = b.create("ref.bitcast", [flat], {"dtype": "int32"}).result
    b.create("get", [bits], {"indexer": (Slice(0, 512, 1),)})
    t = b.create("ref.transpose", [view.result], {"permutation": (1, 0)}).result
    b.create("get", [t], {"indexer": (Int(0), Slice(0, 4, 1))})
    minipallas.verify(b.function("state", [r, i, idx], [row]))


def test_array_ops():
    x, m, a = params([ArrayType((8, 16), "float32"), ArrayType((16, 4), "float32"), F8])
    b = Builder()
    y = b.create("exp", [x]).result
    z = b.create("max", [x, y]).result
    prod = b.create("dot", [z, m], {"dtype": "float32"}).result
    summed = b.create("reduce_sum", [prod], {"axes": (1,)}).result
    wide = b.create("broadcast_in_dim", [summed], {"shape": (8, 4), "dims": (0,)}).result
    flat = b.create("reshape", [wide], {"shape": (32,)}).result
    b.create("transpose", [wide], {"permutation": (1, 0)})
    ints = b.create("convert", [a], {"dtype": "int32"}).result
    b.create("bitcast", [a], {"dtype": "uint32"})
    pos = b.create("iota", [], {"type": ArrayType((8,), "int32"), "dimension": 0}).result
    pred = b.create("lt", [ints, pos]).result
    b.create("select", [pred, a, a])
    b.create("not", [pred])
    minipallas.verify(b.function("arrays", [x, m, a], [flat]))


def test_pure_indexed_ops():
    x, i, idx = params([ArrayType((8, 8), "float32"), I32, ArrayType((3,), "int32")])
    b = Builder()
    s = b.create("slice", [x], {"indexer": (Int(0), Slice(0, 8, 1))}).result
    d = b.create("dynamic_slice", [x, i], {"indexer": (Int(Dyn(0)), Slice(0, 8, 1))}).result
    g = b.create("gather", [x, idx], {"indexer": (Array(Dyn(0)), Int(2))}).result
    y = b.create(
        "dynamic_update_slice", [x, i, d], {"indexer": (Int(Dyn(0)), Slice(0, 8, 1))}
    ).result
    y = b.create("scatter", [y, idx, g], {"indexer": (Array(Dyn(0)), Int(1))}).result
    y = b.create("scatter_add", [y, idx, g], {"indexer": (Array(Dyn(0)), Int(3))}).result
    minipallas.verify(b.function("indexed", [x, i, idx], [y, s]))


def test_nested_run_scoped_with_an_outer_ref_and_a_loop():
    (out,) = params([REF8])
    # inner body: writes its own scratch and the outer scratch, reads back
    inner_scratch, outer_in = params([REF8, RefType((8,), "float32", TPU_VMEM)])
    ib = Builder()
    v = ib.create("get", [outer_in], {"indexer": FULL8}).result
    ib.create("swap", [inner_scratch, v], {"indexer": FULL8})
    w = ib.create("get", [inner_scratch], {"indexer": FULL8}).result
    inner_body = ib.block([inner_scratch, outer_in], [w])
    # loop body: accumulates into the outer scratch
    i, acc_ref, carry = params([I32, RefType((8,), "float32", TPU_VMEM), F32])
    lb = Builder()
    one = const(lb, 1.0, shape=(8,))
    lb.create("addupdate", [acc_ref, one], {"indexer": FULL8})
    carry2 = lb.create("add", [carry, const(lb, 2.0)]).result
    loop_body = lb.block([i, acc_ref, carry], [carry2])
    # outer body
    scratch, out_in = params([RefType((8,), "float32", TPU_VMEM), REF8])
    ob = Builder()
    ob.create("swap", [scratch, const(ob, 0.0, shape=(8,))], {"indexer": FULL8})
    lo, hi = const(ob, 0, "int32"), const(ob, 4, "int32")
    total = ob.create(
        "for", [lo, hi, scratch, const(ob, 0.0)], {"num_consts": 1}, [loop_body]
    ).result
    got = ob.create("run_scoped", [scratch], {"collective_axes": ("x",)}, [inner_body]).result
    ob.create("swap", [out_in, got], {"indexer": FULL8})
    outer_body = ob.block([scratch, out_in], [total])
    b = Builder()
    result = b.create("run_scoped", [out], {}, [outer_body]).result
    minipallas.verify(b.function("scoped", [out], [result]))


def test_while_cond_call_and_kernel_context():
    (x,) = params([F32])
    # callee: doubles its argument
    (p,) = params([F32])
    gb = Builder()
    double = gb.function("double", [p], [gb.create("add", [p, p]).result])
    # while: count up to a limit
    limit_c, c = params([I32, I32])
    cb = Builder()
    cond = cb.block([limit_c, c], [cb.create("lt", [c, limit_c]).result])
    (c2,) = params([I32])
    bb = Builder()
    body = bb.block([c2], [bb.create("add", [c2, const(bb, 1, "int32")]).result])
    b = Builder()
    pid = b.create("program_id", [], {"axis": 0}).result
    n = b.create("num_programs", [], {"axis": 1}).result
    count = b.create("while", [n, pid], {"cond_nconsts": 1, "body_nconsts": 0}, [cond, body]).result
    branches = []
    for k in range(3):
        (a,) = params([F32])
        kb = Builder()
        if k == 0:
            res = a
        elif k == 1:
            res = kb.create("neg", [a]).result
        else:
            res = kb.create("call", [a], {"callee": double}).result
        branches.append(kb.block([a], [res]))
    y = b.create("cond", [count, x], {}, branches).result
    minipallas.verify(b.function("control", [x], [y]))


def test_empty_function_and_module():
    (r,) = params([REF8])
    minipallas.verify(Function("noop", Builder().block([r], [])))
    (p,) = params([F32])
    g = Builder().function("g", [p], [p])
    (q,) = params([F32])
    b = Builder()
    b.create("call", [q], {"callee": g})
    b.create("call", [q], {"callee": g})
    minipallas.verify(Module([g, b.function("main", [q], [])]))


def test_each_callee_is_verified_once(monkeypatch):
    (p,) = params([F32])
    leaf = Builder().function("leaf", [p], [p])
    callers = []
    for name in ("a", "b"):
        (q,) = params([F32])
        cb = Builder()
        callers.append(cb.function(name, [q], [cb.create("call", [q], {"callee": leaf}).result]))
    (x,) = params([F32])
    b = Builder()
    for caller in callers:
        b.create("call", [x], {"callee": caller})
    verified = []
    real_run = verifier_module._FunctionVerifier.run

    def counting_run(self):
        verified.append(self.fn.name)
        return real_run(self)

    monkeypatch.setattr(verifier_module._FunctionVerifier, "run", counting_run)
    minipallas.verify(Module([leaf, b.function("main", [x], [])]))
    assert sorted(verified) == ["a", "b", "leaf", "main"]


def test_deep_nesting_needs_no_recursion():
    """2000 nested run_scopeds: the walk uses an explicit stack, not Python recursion."""
    (r,) = params([REF8])
    inner_ref = r
    body = None
    for _ in range(2000):
        (p,) = params([REF8])
        b = Builder()
        if body is None:
            b.create("get", [p], {"indexer": FULL8})
        else:
            b.create("run_scoped", [p], {}, [body])
        body = b.block([p], [])
    b = Builder()
    b.create("run_scoped", [inner_ref], {}, [body])
    minipallas.verify(b.function("deep", [r], []))


def _chain(n: int) -> Function:
    """``n`` ops: a read, then elementwise ops alternating with writes and views."""
    r, i = params([REF8, I32])
    b = Builder()
    v = b.create("get", [r], {"indexer": FULL8}).result
    while len(b.ops) < n:
        v = b.create("add", [v, v]).result
        b.create("swap", [r, v], {"indexer": FULL8})
    return b.function("chain", [r, i], [v])


def test_100k_ops_verify():
    """A long program verifies without recursion limits (its speed:
    bench/benchmarks/ir_bench.py)."""
    minipallas.verify(_chain(100_000))


def test_an_error_deep_in_a_long_function_is_still_found():
    fn = _chain(20_000)
    r = fn.params[0]
    bad = Op("get", (r,), (Value(F32),), {"indexer": (Int(8),)}, (), Location("user.py", 7))
    fn.body = type(fn.body)(fn.body.params, (*fn.body.ops, bad), fn.body.results)
    with pytest.raises(VerificationError, match="user.py:7: 'get': .*out of bounds"):
        minipallas.verify(fn)
