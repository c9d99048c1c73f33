"""The importer's engine: inputs it accepts, parameters and constants, locations, errors, and
the rule table other packages extend."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import I32, arr, check, ref
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas
from minipallas.interop import JaxprImportError, from_jaxpr, rule
from minipallas.interop.importer.engine import RULES
from minipallas.lowering.compat.jax_private import core as jax_core


def test_refs_become_ref_parameters_and_arrays_array_parameters():
    def kernel(x_ref, y, s_ref):
        x_ref[...] += y
        return s_ref[0]

    fn = from_jaxpr(jax.make_jaxpr(kernel)(ref((4,)), arr((4,)), ref((2,), jnp.int32, pltpu.SMEM)))
    assert fn.name == "kernel"
    assert [str(t) for t in fn.param_types] == ["Ref{f32[4]}", "f32[4]", "Ref{i32[2], tpu.smem}"]
    assert [str(t) for t in fn.result_types] == ["i32[]"]


def test_consts_become_constants_and_open_jaxprs_take_them_separately():
    table = np.arange(6.0, dtype=np.float32).reshape(2, 3)

    def f(x_ref, i):
        x_ref[...] = jnp.asarray(table)[i]

    closed = jax.make_jaxpr(f)(ref((3,)), I32)
    assert closed.consts, "the table should be a const of the jaxpr"
    fn = from_jaxpr(closed.jaxpr, closed.consts)
    assert any(op.name == "constant" and op.result.type.shape == (2, 3) for op in fn.walk())
    check(f, ref((3,)), I32, args=[np.zeros(3, np.float32), np.int32(1)])
    with pytest.raises(JaxprImportError, match="1 constvars but 0 consts"):
        from_jaxpr(closed.jaxpr)
    with pytest.raises(JaxprImportError, match="carries its own consts"):
        from_jaxpr(closed, closed.consts)
    with pytest.raises(JaxprImportError, match="expects a jaxpr"):
        from_jaxpr(f)


def test_ops_carry_the_users_file_and_line_also_inside_regions():
    def f(x_ref):
        def body(s_ref):
            s_ref[...] = x_ref[...]  # marker: scoped write
            return s_ref[0]

        return pl.run_scoped(body, pltpu.VMEM((2,), jnp.float32))

    fn = from_jaxpr(jax.make_jaxpr(f)(ref((2,))))
    (swap,) = [op for op in fn.walk() if op.name == "swap"]
    source = open(__file__).read().splitlines()
    assert swap.loc.file == __file__
    assert "marker: scoped write" in source[swap.loc.line - 1]


def test_imported_programs_verify_and_print_and_parse_back():
    def f(x_ref, i):
        x_ref[i] = jnp.where(i > 1, x_ref[0], 2.0)

    fn = from_jaxpr(jax.make_jaxpr(f)(ref((3,)), I32))
    minipallas.verify(fn)
    text = str(fn)
    assert str(minipallas.parse(text)) == text


def test_an_unsupported_primitive_inside_a_region_names_it_and_the_line():
    def f(x_ref):
        def body(i, c):
            return c + jax.lax.lgamma(x_ref[i])  # marker: lgamma in a loop

        return jax.lax.fori_loop(0, 2, body, 0.0)

    with pytest.raises(JaxprImportError) as info:
        from_jaxpr(jax.make_jaxpr(f)(ref((2,))))
    message = str(info.value)
    assert "'lgamma'" in message and "minipallas cannot import the primitive" in message
    line = message.split(":")[1]
    assert "marker: lgamma in a loop" in open(__file__).read().splitlines()[int(line) - 1]


def test_other_packages_register_rules_for_new_primitives():
    twice_p = jax_core.Primitive("twice_for_test")
    twice_p.def_abstract_eval(lambda x: x)

    def f(x):
        return twice_p.bind(x) + 1.0

    closed = jax.make_jaxpr(f)(arr((3,)))
    with pytest.raises(JaxprImportError, match="twice_for_test"):
        from_jaxpr(closed)

    with pytest.raises(ValueError, match="no jax primitive named 'twice_for_test'"):
        rule("twice_for_test")  # a name alone could be a misspelling: the primitive says it

    @rule(twice_p)
    def twice(scope, eqn):
        x = scope.read(eqn.invars[0])
        return [scope.emit("add", [x, x])]

    try:
        fn = from_jaxpr(closed)
        (out,) = minipallas.interpret(fn, np.array([1.0, 2.0, 3.0], np.float32))
        np.testing.assert_array_equal(out, [3.0, 5.0, 7.0])
        with pytest.raises(ValueError, match="registered twice"):
            rule(twice_p)(twice)
    finally:
        del RULES["twice_for_test"]


def test_a_rule_that_builds_a_bad_op_reports_the_primitive_and_line():
    bad_p = jax_core.Primitive("bad_for_test")
    bad_p.def_abstract_eval(lambda x: x)

    @rule(bad_p)
    def bad(scope, eqn):
        x = scope.read(eqn.invars[0])
        return [scope.emit("add", [x, scope.constant(1, "int32")])]

    try:
        with pytest.raises(JaxprImportError, match="'bad_for_test': building 'add'"):
            from_jaxpr(jax.make_jaxpr(lambda x: bad_p.bind(x))(arr((2,))))
    finally:
        del RULES["bad_for_test"]
