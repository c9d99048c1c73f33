"""Every parameter upstream honours is honoured or refused (issue 46): each import rule declares
every parameter of its primitive (``minipallas/interop/importer/params.py``), and the importer
holds each equation to that declaration before the rule runs.

- every rule in ``RULES`` and ``SCOPED_RULES`` has a declaration;
- a corpus of small upstream programs, one or more per primitive, sets the parameters upstream
  has; each traced equation's parameters are all declared (so a jax that adds one fails here,
  naming it), the corpus reaches every rule, and each program imports;
- refusals: a transcendental's ``accuracy``, a dot algorithm, a made-up parameter, a sharding,
  ``scatter_apply``, each a ``JaxprImportError`` naming the parameter, its value and the line;
- honoured: ``dot_general``'s ``precision``, ``pl.reciprocal``, ``pl.multiple_of`` as ops, and
  ``lax.mul(..., out_dtype=)`` with upstream's values.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from interop_helpers import I32, arr, ref
from jax import lax
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu
from jax.extend import random as jax_random

import minipallas as mp
from minipallas.interop import JaxprImportError, from_jaxpr, rule
from minipallas.interop.importer.engine import RULES, SCOPED_RULES
from minipallas.interop.importer.params import READ, NoEffect, Only, Read
from minipallas.lowering.compat.jax_private import (
    api_util,
    pallas_primitives,
    random_prng,
    state_discharge,
    state_primitives,
)
from minipallas.lowering.compat.jax_private import core as jax_core
from minipallas.lowering.compat.jax_private import linear_util as lu

F8, M = arr((8,)), arr((4, 8))
I8, U8, B8 = arr((8,), jnp.int32), arr((8,), jnp.uint32), arr((8,), jnp.bool_)

# name -> a thunk giving the ClosedJaxpr of one small upstream program
CORPUS: dict = {}


def program(*avals):
    """Adds ``f`` traced at ``avals`` to the corpus."""

    def add(f):
        CORPUS[f.__name__] = lambda: jax.make_jaxpr(f)(*avals)
        return f

    return add


def built(f):
    """Adds ``f``, which builds its own ClosedJaxpr, to the corpus."""
    CORPUS[f.__name__] = f
    return f


# --- lax -------------------------------------------------------------------------------------


@program(F8, F8)
def floats(x, y):
    unary = (lax.neg, lax.abs, lax.exp, lax.log, lax.tanh, lax.logistic, lax.sqrt, lax.rsqrt,
             lax.sin, lax.cos, lax.floor, lax.ceil, lax.exp2, lax.expm1, lax.log1p, lax.erf,
             lax.erf_inv, lax.tan, lax.asin, lax.atan, lax.sinh, lax.cosh, lax.asinh, lax.cbrt,
             lax.sign, lax.square, lax.stop_gradient, lax.optimization_barrier)  # fmt: skip
    out = [f(x) for f in unary]
    out += [lax.is_finite(x), lax.integer_pow(x, 3), lax.pow(x, y), lax.atan2(x, y)]
    out += [lax.nextafter(x, y), lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)]
    out += [x + y, x - y, x * y, x / y, lax.rem(x, y), lax.max(x, y), lax.min(x, y)]
    out += [lax.clamp(0.0, x, 1.0), lax.select(x < y, x, y), lax.copy_p.bind(x)]
    out += [x == y, x != y, x <= y, x > y, x >= y, lax.lt_to_p.bind(x, y)]
    out += [lax.le_to_p.bind(x, y), lax.eq_to_p.bind(x, y)]
    return out


@program(I8, I8, U8)
def integers(i, j, u):
    out = [i & j, i | j, i ^ j, ~i, lax.shift_left(i, j), lax.shift_right_logical(u, u)]
    out += [lax.shift_right_arithmetic(i, j), lax.population_count(i), lax.clz(i)]
    out += [lax.convert_element_type(i, jnp.float32), lax.bitcast_convert_type(i, jnp.float32)]
    out += [lax.select_n(jnp.clip(i, 0, 2), i, j, i * 2), lax.mul(i, j, out_dtype=jnp.float32)]
    return out


@program(M, arr((4, 8), jnp.bool_), arr((3,), jnp.int32))
def shapes(m, b, k):
    out = [lax.broadcast_in_dim(m[0], (2, 8), (1,)), lax.reshape(m, (8, 4), (1, 0))]
    out += [lax.squeeze(m[:1], (0,)), lax.transpose(m, (1, 0)), lax.iota(jnp.int32, 5)]
    out += [m.sum(0), m.max(1), m.min(), b.any(0), b.all(1), m.prod(0), m.argmax(1), m.argmin(0)]
    out += [lax.cumsum(m, 1), lax.cumprod(m, 0), lax.cummax(m, 1), lax.cummin(m, 0, reverse=True)]
    out += [lax.cumlogsumexp(m, 1), lax.rev(m, (0,)), lax.pad(m, 0.0, ((1, 0, 0), (0, 2, 1)))]
    out += [jnp.sort(m, 1), *lax.top_k(m, 3), lax.tile(m, (2, 1)), lax.stack([m, m], 1)]
    out += [*lax.split(m, (3, 5), 1), *lax.unstack(m[:2], 0), lax.concatenate([m, m], 0)]
    out += [lax.slice(m, (0, 1), (4, 8), (2, 3)), lax.dynamic_slice(m, (k[0], 2), (2, 3))]
    out += [lax.dynamic_update_slice(m, m[:2, :3], (k[0], k[1])), m[k], m[:, k]]
    out += [m.at[k].set(1.0), m.at[k, 1].add(2.0), lax.empty((2, 3), jnp.float32)]
    return out


@program(M, arr((8, 4)), arr((4, 8), jnp.bfloat16))
def dots(a, b, h):
    highest = (lax.Precision.HIGHEST, lax.Precision.HIGHEST)
    dims = (((1,), (0,)), ((), ()))
    return [
        lax.dot_general(a, b, dims, precision=highest),
        lax.dot_general(h, b.astype(jnp.bfloat16), dims, preferred_element_type=jnp.float32),
        jnp.einsum("ij,kj->ik", a, a),
    ]


# --- control flow and calls ------------------------------------------------------------------


@jax.custom_vjp
def _twice(x):
    return x * 2.0


_twice.defvjp(lambda x: (_twice(x), None), lambda _, g: (g * 2.0,))


@program(F8, I32)
def control(x, n):
    def step(c, v):
        return c + v, c * v

    out = list(lax.scan(step, 0.0, x, unroll=2))
    out.append(lax.fori_loop(0, n, lambda i, c: c + i, 0))
    out.append(lax.switch(n, [lambda v: v + 1.0, lambda v: v * 2.0, jnp.sin], x))
    out.append(jax.jit(lambda v: v * 3.0)(x))
    out.append(jax.checkpoint(lambda v: jnp.sin(v) * 2.0)(x))
    out.append(jax.nn.relu(x) + _twice(x))
    out.append(jax.grad(lambda v: (v * v).sum())(x))
    out.append(checkpoint_name(x, "y"))
    return out


@built
def calls():
    def f(x):
        wrapped = lu.wrap_init(
            lambda y: [y * 3.0], debug_info=api_util.debug_info("f", f, (x,), {})
        )
        return jax_core.call_p.bind(x, subfuns=(wrapped,))[0] + jax.jit(jnp.cos)(x)

    closed = jax.make_jaxpr(f)(F8)
    eqns = [
        eqn.replace(primitive=jax_core.closed_call_p, params={"call_jaxpr": eqn.params["jaxpr"]})
        if eqn.primitive.name == "jit"
        else eqn
        for eqn in closed.jaxpr.eqns
    ]
    return jax_core.ClosedJaxpr(closed.jaxpr.replace(eqns=eqns), closed.consts)


MESH = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",))
P = jax.sharding.PartitionSpec


@program(F8)
def platforms(x):
    def body(v):
        return lax.pcast(v * 2.0, "d", to="varying")

    sharded = jax.shard_map(body, mesh=MESH, in_specs=P(), out_specs=P("d"))
    return sharded(x), lax.platform_dependent(x, cpu=jnp.sin, default=jnp.cos)


# --- PRNG keys -------------------------------------------------------------------------------


@program(arr((2,), jnp.uint32), U8)
def random(data, counts):
    key = jax.random.key(3)
    k1, k2 = jax.random.split(key)
    wrapped = jax.random.wrap_key_data(data)
    return [
        jax.random.bits(jax.random.fold_in(k1, 7), (5,)),
        jax.random.key_data(jax.random.clone(k2)),
        jax.random.bits(wrapped, (3,), jnp.uint8),
        *jax_random.threefry_2x32(data, counts),
        *random_prng.iota_2x32_shape((2, 3)),
    ]


# --- refs ------------------------------------------------------------------------------------


@program(ref((4, 3)), F8)
def refs(r, x):
    r[1, :] = r[0, :] * 2.0
    state_primitives.ref_addupdate(r, (slice(None),), jnp.ones((4, 3)))
    picked = r[jnp.array([0, 2]), jnp.array([[1], [2]])]

    def body(cells):
        (c,) = cells
        c[...] = c[...] * 3.0

    (tripled,) = state_discharge.run_state(body)((x,))
    made = jax.new_ref(x)
    made[0] = 5.0
    empty = jax.empty_ref(jax.ShapeDtypeStruct((2,), jnp.float32))
    empty[...] = x[:2]
    dropped = jax.new_ref(x)
    jax.free_ref(dropped)
    return picked, tripled, jax.freeze(made), jax.freeze(empty)


# --- Pallas kernels --------------------------------------------------------------------------


def _tpu_kernel(x_ref, o_ref, scratch, sem, sems):
    i = pl.multiple_of(pl.program_id(0) * 8, 8)
    n = pl.num_programs(0)  # a constant: the grid is static (dynamic_grid has the primitive)
    load, store = pallas_primitives.load, pallas_primitives.store
    o_ref[...] = load(x_ref, (pl.ds(0, 8), slice(None)), mask=x_ref[...] > 0, other=1.0)
    store(o_ref, (pl.ds(0, 8), slice(None)), pl.reciprocal(x_ref[...], approx=True),
             mask=x_ref[...] > 1)  # fmt: skip
    o_ref[...] += pltpu.roll(x_ref[...], 3, 1) + (i + n).astype(jnp.float32)
    o_ref[0, 0] = pltpu.bitcast(x_ref[...], jnp.int32)[0, 0].astype(jnp.float32)
    pltpu.async_copy(x_ref, scratch, sems.at[0]).wait()
    pl.semaphore_signal(sem, 2)
    pl.semaphore_wait(sem, 1)
    o_ref[1, 1] = pl.semaphore_read(sem).astype(jnp.float32)
    jax.debug.print("step {} of {n}", i, n=n)

    def scoped(acc):
        acc[...] = scratch[...] + 1.0
        o_ref[...] += acc[...]

    pl.run_scoped(scoped, pltpu.VMEM((8, 128), jnp.float32))


@program(arr((16, 128)))
def tpu_kernel(x):
    return pl.pallas_call(
        _tpu_kernel,
        jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        scratch_shapes=[
            pltpu.VMEM((8, 128), jnp.float32),
            pltpu.SemaphoreType.REGULAR,
            pltpu.SemaphoreType.DMA((1,)),
        ],  # fmt: skip
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
        cost_estimate=pl.CostEstimate(flops=10, transcendentals=0, bytes_accessed=100),
    )(x)


def _triton_kernel(x_ref, s_ref, o_ref):
    o_ref[...] = plgpu.max_contiguous(x_ref[...], 4) + lax.axis_index("i")
    plgpu.atomic_add(o_ref, pl.ds(0, 4), x_ref[...])
    o_ref[0] = plgpu.atomic_cas(s_ref, 3, 5)


@program(arr((4,), jnp.int32), arr((), jnp.int32))
def triton_kernel(x, s):
    out = (jax.ShapeDtypeStruct((4,), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32))
    spec = pl.BlockSpec((4,), lambda i: (0,))
    return pl.pallas_call(
        lambda x_ref, s_ref, o_ref, _: _triton_kernel(x_ref, s_ref, o_ref),
        out,
        grid=(("i", 2),),
        in_specs=[spec, pl.BlockSpec((), lambda i: ())],
        out_specs=(spec, pl.BlockSpec((), lambda i: ())),
        input_output_aliases={1: 1},
    )(x, s)


@program(arr((8,), jnp.int32), I32)
def dynamic_grid(x, n):
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + pl.num_programs(0)

    return pl.pallas_call(kernel, jax.ShapeDtypeStruct((8,), jnp.int32), grid=(n,))(x)


_CORES = pltpu.create_tensorcore_mesh("core", num_cores=1)


@program(arr((8, 128)))
def mesh_kernels(x):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] + lax.axis_index("core").astype(jnp.float32)

    out = pl.kernel(body, out_type=jax.ShapeDtypeStruct(x.shape, x.dtype), mesh=_CORES)(x)
    acc = jax.new_ref(x)

    @pl.core_map(_CORES)
    def _():
        acc[...] = acc[...] * 2.0

    return out, jax.freeze(acc)


@built
def pipeline():
    import mesh_corpus_upstream

    name = "upstream/PallasCallMegacorePrimitiveTest.test_megacore_mul"
    case = next(c for c in mesh_corpus_upstream.CASES if c.name.startswith(name))
    f, args = case.build()
    return jax.make_jaxpr(f)(*args)


@built
def hardware_prng():
    def kernel(o_ref):
        pltpu.prng_seed(3)
        o_ref[...] = pltpu.prng_random_bits((8, 128))

    return jax.make_jaxpr(pl.pallas_call(kernel, jax.ShapeDtypeStruct((8, 128), jnp.int32)))()


# programs whose import the rules refuse (not the parameter check): the refusal's words
REFUSED = {"hardware_prng": "hardware PRNG"}


# --- the tests -------------------------------------------------------------------------------


@built
def kernel_on_two_devices():
    """A kernel that spans devices (issue 47): the barrier semaphore, a remote signal and a
    remote copy with LOGICAL ids, in a shard_map over two devices."""

    def kernel(x_ref, o_ref, send, recv):
        other = 1 - lax.axis_index("x")
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=other, device_id_type=pl.DeviceIdType.LOGICAL)
        pl.semaphore_wait(barrier, 1)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send, recv, device_id=other,
                                            device_id_type=pl.DeviceIdType.LOGICAL)  # fmt: skip
        copy.start()
        copy.wait()

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
        compiler_params=pltpu.CompilerParams(collective_id=0),
    )
    mesh = jax.sharding.AbstractMesh((2,), ("x",))
    f = jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return jax.make_jaxpr(f)(arr((16, 128)))


@built
def collectives_on_two_devices():
    """lax collectives in a shard_map body over two devices (issue 47), check_vma both ways."""

    def body(v):
        s = lax.psum(v, "x") + lax.pmax(v, "x") - lax.pmin(v, "x")
        s = lax.all_to_all(
            lax.psum_scatter(s, "x", scatter_dimension=1, tiled=True), "x", 1, 1, tiled=True
        )
        return lax.all_gather(lax.ppermute(s, "x", perm=[(0, 1), (1, 0)]), "x", tiled=True)

    mesh = jax.sharding.AbstractMesh((2,), ("x",))
    loose = jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P(), check_vma=False)
    strict = jax.shard_map(lambda v: lax.psum(v, "x"), mesh=mesh, in_specs=P("x"),
                           out_specs=P(), check_vma=True)  # fmt: skip
    return jax.make_jaxpr(lambda v: (loose(v), strict(v)))(arr((16, 128)))


def _equations(jaxpr):
    """Every equation of ``jaxpr`` and of its sub-jaxprs (bodies, branches, kernels)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in jax_core.jaxprs_in_params(eqn.params):
            yield from _equations(sub)


def _declaration(name):
    for table in (RULES, SCOPED_RULES):
        if name in table:
            return table.params.get(name)
    return None


def test_every_import_rule_declares_every_parameter_it_reads():
    for table in (RULES, SCOPED_RULES):
        missing = sorted(set(table) - set(table.params))
        assert not missing, f"{table.what}s without params=...: {missing}"
        for name, policies in table.params.items():
            for param, policy in policies.items():
                assert isinstance(policy, Read | Only | NoEffect), (name, param)


@pytest.fixture(scope="module")
def traced():
    return {name: build() for name, build in CORPUS.items()}


def test_the_corpus_sets_only_declared_parameters_and_reaches_every_rule(traced):
    unknown, seen = set(), set()
    for closed in traced.values():
        for eqn in _equations(closed.jaxpr):
            name = eqn.primitive.name
            seen.add(name)
            policies = _declaration(name)
            if policies is not None or name in RULES or name in SCOPED_RULES:
                unknown.update(f"{name}[{p}]" for p in eqn.params if p not in (policies or {}))
    assert not unknown, f"parameters no import rule declares: {sorted(unknown)}"
    unreached = sorted((set(RULES) | set(SCOPED_RULES)) - seen)
    assert not unreached, f"no corpus program uses {unreached}"


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_each_corpus_program_imports(name, traced):
    if name in REFUSED:
        with pytest.raises(JaxprImportError, match=REFUSED[name]):
            from_jaxpr(traced[name])
        return
    from_jaxpr(traced[name])


def _refusal(closed, *words):
    """The import of ``closed`` is refused by a ``JaxprImportError`` saying each of ``words``
    and located at a line of this file."""
    with pytest.raises(JaxprImportError) as e:
        from_jaxpr(closed)
    text = str(e.value)
    for word in words:
        assert word in text, text
    assert e.value.loc is not None and "test_import_params.py" in str(e.value.loc), text
    return text


def test_a_transcendentals_accuracy_is_refused_with_upstreams_message():
    tolerance = lax.Tolerance(atol=1e-3, rtol=0.0, ulps=0)
    closed = jax.make_jaxpr(lambda x: lax.tanh(x, accuracy=tolerance))(F8)
    text = _refusal(closed, "'tanh'", "accuracy=", "Tolerance", "Not implemented: accuracy")
    assert "fix: drop accuracy=" in text


def test_a_dot_algorithm_is_refused_naming_it():
    def f(a, b):
        preset = lax.DotAlgorithmPreset.F32_F32_F32
        return lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=preset)

    _refusal(jax.make_jaxpr(f)(M, arr((8, 4))), "'dot_general'", "precision=", "F32_F32_F32")


def _with_param(f, avals, primitive, **params):
    """``f`` traced, its ``primitive`` equations given ``params`` on top of theirs."""
    closed = jax.make_jaxpr(f)(*avals)
    eqns = [
        eqn.replace(params={**eqn.params, **params}) if eqn.primitive.name == primitive else eqn
        for eqn in closed.jaxpr.eqns
    ]
    return jax_core.ClosedJaxpr(closed.jaxpr.replace(eqns=eqns), closed.consts)


def test_a_parameter_no_rule_declares_is_refused_naming_it_and_its_value():
    closed = _with_param(lambda x: x + 1.0, [F8], "add", made_up=3)
    text = _refusal(closed, "parameter 'made_up' of 'add'", "(value 3)", "please report it")
    assert "params={'made_up': READ}" in text


class PartitionSpec:
    """Stands for jax's ``P(unreduced={"d"})``, which jax makes only on an Explicit mesh."""

    unreduced = frozenset({"d"})
    reduced = frozenset()


def test_a_sharding_that_places_whole_values_imports_and_an_unreduced_one_is_refused():
    """Placement never changes a value: a one-device sharding and a ``NamedSharding`` with no
    unreduced axis import (upstream's flash attention carries one); another kind is refused."""
    placed = _with_param(lambda m: m.sum(0), [M], "reduce_sum", out_sharding=P("d"))
    mp.from_jaxpr(placed)
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    jitted = jax.jit(lambda x: x * 2.0, in_shardings=device)
    mp.from_jaxpr(jax.make_jaxpr(lambda x: jitted(x) + 1.0)(F8))
    closed = _with_param(lambda m: m.sum(0), [M], "reduce_sum", out_sharding=PartitionSpec())
    _refusal(closed, "'reduce_sum'", "out_sharding=", "no unreduced or reduced axis")
    closed = _with_param(lambda x: jitted(x) + 1.0, [F8], "jit", in_shardings=(PartitionSpec(),))
    _refusal(closed, "'jit'", "in_shardings=", "placing whole values")


def test_scatter_apply_is_refused():
    def f(x, k):
        return x.at[k].apply(jnp.sin)

    _refusal(jax.make_jaxpr(f)(F8, arr((3,), jnp.int32)), "'scatter'", "update_jaxpr=")


def test_several_multiples_are_refused():
    closed = jax.make_jaxpr(lambda i: pl.multiple_of(i, (8, 16)) + 1)(I32)
    _refusal(closed, "'multiple_of'", "values=(8, 16)", "one multiple")


def test_a_rule_of_ones_own_declares_its_parameters():
    scale_p = jax_core.Primitive("scale_for_params_test")
    scale_p.def_abstract_eval(lambda x, *, k, note: x)

    def scale(scope, eqn):
        x = scope.read(eqn.invars[0])
        return [scope.emit("mul", [x, scope.constant(eqn.params["k"], "float32", x.type.shape)])]

    closed = jax.make_jaxpr(lambda x: scale_p.bind(x, k=3.0, note="hi"))(F8)
    with pytest.raises(ValueError, match="declare each parameter as READ"):
        rule(scale_p, params={"k": "read"})
    with pytest.raises(ValueError, match="reason in words"):
        NoEffect("")
    try:
        rule(scale_p)(scale)  # no declaration: any parameter is refused
        _refusal(closed, "parameter 'k' of 'scale_for_params_test'")
        del RULES[scale_p.name]
        rule(scale_p, params={"k": READ, "note": NoEffect("a label")})(scale)
        fn = from_jaxpr(closed)
        np.testing.assert_array_equal(mp.interpret(fn, np.ones(8, np.float32))[0], 3.0)
    finally:
        RULES.pop(scale_p.name, None)
        RULES.params.pop(scale_p.name, None)


# --- honoured ---------------------------------------------------------------------------------


_HIGHEST, _HIGH, _DEFAULT = lax.Precision.HIGHEST, lax.Precision.HIGH, lax.Precision.DEFAULT


@pytest.mark.parametrize(
    "precision, text",
    [
        ((_HIGHEST, _HIGHEST), "precision (highest, highest)"),
        (_HIGHEST, "precision (highest, highest)"),
        ((_DEFAULT, _HIGH), "precision (default, high)"),
        ((_DEFAULT, _DEFAULT), None),
        (None, None),
    ],
)
def test_dot_precision_becomes_the_dots_attribute(precision, text):
    closed = jax.make_jaxpr(lambda a, b: lax.dot(a, b, precision=precision))(M, arr((8, 4)))
    printed = str(from_jaxpr(closed))
    assert " dot " in printed
    assert text in printed if text else "precision" not in printed, printed


def test_reciprocal_and_multiple_of_import_as_their_ops():
    def f(x, i):
        return pl.reciprocal(x, approx=True), pl.multiple_of(i * 8, 8)

    text = str(from_jaxpr(jax.make_jaxpr(f)(F8, I32)))
    assert "reciprocal" in text and "approx" in text and " div " not in text, text
    assert "multiple_of" in text and "multiple 8" in text, text


@pytest.mark.parametrize(
    "dtype, out_dtype",
    [(ml_dtypes.bfloat16, np.float32), (np.int8, np.int32), (np.float32, ml_dtypes.bfloat16)],
)
def test_mul_with_out_dtype_gives_upstreams_values(dtype, out_dtype):
    def f(x, y):
        return lax.mul(x, y, out_dtype=out_dtype)

    rng = np.random.default_rng(0)
    if np.issubdtype(dtype, np.integer):
        x, y = (rng.integers(-128, 128, 64).astype(dtype) for _ in range(2))
    else:
        x, y = (rng.standard_normal(64).astype(np.float32).astype(dtype) for _ in range(2))
    want = np.asarray(jax.jit(f)(x, y))
    fn = from_jaxpr(jax.make_jaxpr(f)(x, y))
    for got in (mp.interpret(fn, x, y)[0], np.asarray(mp.compile(fn)(x, y)[0])):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(f"u{got.dtype.itemsize}"),
                                      want.view(f"u{want.dtype.itemsize}"))  # fmt: skip


def test_a_kernel_taken_from_its_equation_directly_is_held_to_the_declaration_too():
    """``kernel_from_jaxpr`` and ``on_tpu`` read a ``pallas_call`` equation without the
    importer's walk: an undeclared parameter is refused there as well, at the user's line."""
    from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    call = pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    closed = _with_param(call, [x], "pallas_call", made_up=1)
    with pytest.raises(JaxprImportError, match="parameter 'made_up' of 'pallas_call'") as e:
        kernel_from_jaxpr(closed)
    assert e.value.op == "pallas_call" and "test_import_params.py" in str(e.value.loc)
