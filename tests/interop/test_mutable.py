"""Refs a program makes itself (``jax.new_ref``, ``jax.empty_ref``, ``jax.freeze``,
``jax.free_ref``) imported as scoped allocations, each checked bit for bit against the same
function run by upstream under ``jax.jit`` (interpreter, ``compile`` and ``to_jax``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import assert_all_same
from jax.experimental import pallas as pl

import minipallas
from minipallas.interop import JaxprImportError, from_jaxpr, to_jax
from minipallas.lowering.compat.jax_private import state_discharge

F32 = jnp.float32
X = np.arange(4.0, dtype=np.float32) - 1.5


def check(f, *args):
    """Import ``jax.make_jaxpr(f)``; every minipallas path gives ``jax.jit(f)``'s bits."""
    closed = jax.make_jaxpr(f)(*args)
    fn = from_jaxpr(closed)
    want = [np.asarray(w) for w in jax.tree.leaves(jax.jit(f)(*args))]
    np_args = [np.asarray(a) for a in args]
    assert_all_same(list(minipallas.interpret(fn, *np_args)), want, 0, "interpret")
    assert_all_same(list(minipallas.compile(fn)(*np_args)), want, 0, "compile")
    got = jax.jit(to_jax(fn))(*np_args)
    assert_all_same([np.asarray(g) for g in got], want, 0, "to_jax")
    return fn


def op_names(block):
    return [op.name for op in block.ops]


def line_of(marker):
    """The line of this file holding ``marker`` (where an error must point)."""
    lines = open(__file__).read().splitlines()
    return f"{__file__}:{1 + next(k for k, s in enumerate(lines) if s.endswith(marker))}"


def test_new_ref_is_a_scoped_allocation_initialized_with_its_value():
    def f(x):
        r = jax.new_ref(x)
        r[...] += 1.0
        r[0] = 5.0
        return jax.freeze(r) * 2.0

    fn = check(f, X)
    assert op_names(fn.body) == ["run_scoped"]
    body = fn.body.ops[0].regions[0]
    assert body.ops[0].name == "swap" and body.ops[0].operands[0] is body.params[0]


def test_empty_ref_is_uninitialized_until_written():
    def f(x):
        r = jax.empty_ref(jax.ShapeDtypeStruct((4,), F32))
        r[...] = x
        r[1] += 3.0
        return r[...]

    fn = check(f, X)
    body = fn.body.ops[0].regions[0]
    assert op_names(body).count("swap") == 2  # the program's own writes, no initial store


def test_integer_scalar_ref_and_two_refs_at_once():
    def f(x, n):
        count = jax.new_ref(jnp.int32(3))
        acc = jax.new_ref(x)
        count[...] += n
        acc[...] = acc[...] * count[...].astype(F32)
        return count[...], jax.freeze(acc)

    fn = check(f, X, np.int32(4))
    (outer,) = [op for op in fn.body.ops if op.name == "run_scoped"]
    assert op_names(outer.regions[0]).count("run_scoped") == 1


def test_refs_used_by_loops_conds_and_a_jitted_callee():
    @jax.jit
    def bump(r):
        r[...] += 1.0

    def f(x, p):
        r = jax.new_ref(x)

        def body(i, c):
            r[i] = r[i] * 2.0 + c
            return c + 1.0

        jax.lax.fori_loop(0, 4, body, 1.0)
        bump(r)

        def add(c, _):
            r[...] += c
            return c * 2.0, None

        jax.lax.scan(add, x, None, length=3)
        jax.lax.cond(p, lambda: r.__setitem__(0, 1.0), lambda: r.__setitem__(1, 2.0))
        return jax.freeze(r)

    for p in (True, False):
        check(f, X, np.bool_(p))


def test_a_ref_made_in_a_loop_body_is_fresh_each_iteration():
    def f(x):
        def body(i, c):
            r = jax.new_ref(c)
            r[i] = 9.0
            return jax.freeze(r) + 1.0

        return jax.lax.fori_loop(0, 3, body, x)

    check(f, X)


def test_free_ref_ends_a_ref_with_nothing_to_compute():
    def f(x):
        r = jax.new_ref(x)
        r[...] += 1.0
        y = r[...]
        jax.free_ref(r)
        return y

    check(f, X)


def test_run_state_closing_over_a_new_ref():
    def f(x):
        r = jax.new_ref(x)

        def body(s_ref):
            s_ref[...] = r[...] * 3.0
            r[...] = s_ref[...] + 1.0

        out = state_discharge.run_state(body)(x)
        return out, jax.freeze(r)

    check(f, X)


def test_empty_ref_as_scratch_inside_a_kernel_matches_upstream_pallas():
    def kernel(x_ref, o_ref):
        s = jax.empty_ref(jax.ShapeDtypeStruct((8,), F32))
        s[...] = x_ref[...] * 2.0
        o_ref[...] = s[...] + 1.0

    def f(x):
        out = jax.ShapeDtypeStruct((8,), F32)
        return pl.pallas_call(kernel, out_shape=out, interpret=True)(x)

    check(f, np.arange(8.0, dtype=np.float32))


def test_import_leaves_the_jaxpr_alone():
    def f(x):
        r = jax.new_ref(x)
        r[0] = 1.0
        return jax.freeze(r)

    closed = jax.make_jaxpr(f)(X)
    before = str(closed)
    from_jaxpr(closed)
    from_jaxpr(closed)
    assert str(closed) == before


# --- refs that outlive their life ---------------------------------------------------------


def test_a_returned_new_ref_is_an_error_naming_the_op_line_and_fix():
    def f(x):
        r = jax.new_ref(x)  # marker: returned ref
        r[0] = 1.0
        return r[...]

    closed = jax.make_jaxpr(f)(X)
    # upstream's tracing refuses to return a ref; a jaxpr built otherwise still can
    escaping = closed.replace(jaxpr=closed.jaxpr.replace(outvars=[closed.jaxpr.eqns[0].outvars[0]]))
    with pytest.raises(JaxprImportError) as info:
        from_jaxpr(escaping)
    assert str(info.value) == (
        f"{line_of('# marker: returned ref')}: 'new_ref': the ref made here is returned from the "
        "block that makes it; a ref made inside a program lives until the end of that block\n"
        "  fix: return the ref's value, jax.freeze(ref), instead of the ref"
    )


def test_a_ref_used_after_freeze_is_an_error_where_upstream_fails_too():
    def f(x):
        r = jax.new_ref(x)
        y = jax.freeze(r)  # marker: frozen
        r[0] = 7.0  # marker: used after
        return y

    closed = jax.make_jaxpr(f)(X)
    with pytest.raises(AttributeError):  # upstream's discharge fails on it
        jax.jit(f)(X)
    with pytest.raises(JaxprImportError) as info:
        from_jaxpr(closed)
    assert str(info.value) == (
        f"{line_of('# marker: used after')}: 'swap': a ref is used after 'freeze' at "
        f"{line_of('# marker: frozen')} ended its life\n"
        "  fix: read or write the ref before freeing it, or freeze it last"
    )


def test_a_ref_used_after_free_ref_is_an_error():
    def f(x):
        r = jax.new_ref(x)
        jax.free_ref(r)  # marker: freed
        return r[...]  # marker: read after free

    with pytest.raises(JaxprImportError) as info:
        from_jaxpr(jax.make_jaxpr(f)(X))
    assert str(info.value).startswith(
        f"{line_of('# marker: read after free')}: 'get': a ref is used after 'free_ref' at "
        f"{line_of('# marker: freed')} ended its life"
    )
