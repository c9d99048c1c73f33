"""Building programs for the cleanup tests, and the check every cleanup test makes: the result
verifies, the input is unchanged, the counts are as expected, and the reference interpreter gives
bit-identical results (and final ref values) before and after."""

import numpy as np
from ir_types import I32

import minipallas
from minipallas.ir import ArrayType, Builder, Literal, Slice, params
from minipallas.passes.cleanup import cleanup, count_ops

F4 = ArrayType((4,), "float32")
F48 = ArrayType((4, 8), "float32")
I3 = ArrayType((3,), "int32")
FULL8 = (Slice(0, 8, 1),)


def const(b, value, dtype="float32", shape=()):
    return b.create("constant", [], {"value": Literal.of(np.full(shape, value), dtype)}).result


def op(b, name, *operands, **attrs):
    return b.create(name, list(operands), attrs).result


def make(types, build, name="f"):
    """A function of parameters ``types`` whose body ``build(b, *params)`` returns its results."""
    ps = params(types)
    b = Builder()
    results = build(b, *ps)
    return b.function(name, ps, list(results))


def snapshot(fn):
    """Everything about ``fn`` that a pass could change in place, as comparable data."""
    return [(id(o), o.name, o.operands, o.results, dict(o.attrs), o.regions) for o in fn.walk()]


def sample(t, rng):
    if t.dtype == "int32":
        return rng.integers(-3, 12, t.shape).astype(np.int32)
    return rng.standard_normal(t.shape).astype(t.dtype)


def cleaned(fn, expect_before=None, expect_after=None, args=None, **run):
    """Cleans ``fn`` and checks counts, verification, immutability and meaning."""
    before = snapshot(fn)
    minipallas.verify(fn)
    out = cleanup(fn)
    minipallas.verify(out)
    assert out is not fn
    assert snapshot(fn) == before, "cleanup changed its input"
    if expect_before is not None:
        assert count_ops(fn) == expect_before
    if expect_after is not None:
        assert count_ops(out) == expect_after, [o.name for o in out.walk()]
    assert out.param_types == fn.param_types and out.result_types == fn.result_types
    assert_same_meaning(fn, out, args, **run)
    return out


def assert_same_meaning(fn, out, args=None, **run):
    """Both functions give the same bits for their results and for their refs' final values."""
    rng = np.random.default_rng(0)
    if args is None:
        args = [sample(t, rng) for t in fn.param_types]
    copies = [[np.array(a, copy=True) for a in args] for _ in range(2)]
    want = minipallas.interpret(fn, *copies[0], **run)
    got = minipallas.interpret(out, *copies[1], **run)
    assert len(want) == len(got)
    for w, g in zip([*want, *copies[0]], [*got, *copies[1]], strict=True):
        w, g = np.asarray(w), np.asarray(g)
        assert (w.dtype, w.shape, w.tobytes()) == (g.dtype, g.shape, g.tobytes())


def names(fn):
    return [o.name for o in fn.walk()]


def dus(b, x, update, indexer, *dyn):
    return op(b, "dynamic_update_slice", x, *dyn, update, indexer=indexer)


def read(b, x, indexer, *dyn):
    name = "dynamic_slice" if dyn else "slice"
    return op(b, name, x, *dyn, indexer=indexer)


def for_loop(b, lower, upper, consts, inits, body_fn):
    """``for`` whose body ``body_fn(bb, i, *consts, *carries)`` returns the new carries."""
    bb = Builder()
    ps = params([I32, *[v.type for v in consts], *[v.type for v in inits]])
    new = body_fn(bb, *ps)
    lo, hi = const(b, lower, "int32"), const(b, upper, "int32")
    return b.create(
        "for", [lo, hi, *consts, *inits], {"num_consts": len(consts)}, [bb.block(ps, new)]
    ).results


def while_loop(b, inits, cond_fn, body_fn):
    cb, bb = Builder(), Builder()
    cps, bps = params([v.type for v in inits]), params([v.type for v in inits])
    p = cond_fn(cb, *cps)
    new = body_fn(bb, *bps)
    return b.create(
        "while",
        list(inits),
        {"cond_nconsts": 0, "body_nconsts": 0},
        [cb.block(cps, [p]), bb.block(bps, new)],
    ).results


def cond_op(b, index, args, branch_fns):
    branches = []
    for fn in branch_fns:
        bb = Builder()
        ps = params([v.type for v in args])
        branches.append(bb.block(ps, fn(bb, *ps)))
    return b.create("cond", [index, *args], {}, branches).results


def scoped(b, operands, allocs, body_fn, axes=()):
    bb = Builder()
    ps = params([*allocs, *[v.type for v in operands]])
    results = body_fn(bb, *ps)
    return b.create(
        "run_scoped", list(operands), {"collective_axes": axes}, [bb.block(ps, results)]
    ).results
