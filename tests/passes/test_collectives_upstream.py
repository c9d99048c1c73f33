"""A ``run_scoped`` with collective axes, on every path, against upstream JAX itself.

Each program below is written once and traced twice: with upstream Pallas (``pl.run_scoped``,
``pltpu.VMEM``, ``jax.jit``) and with minipallas (``mp.run_scoped``, ``mp.tpu.VMEM``,
``mp.call``). Every path runs it; upstream's exception (raised by upstream itself, here) and
minipallas's must be of the same class with the same message.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

import minipallas as mp
from minipallas.interop import from_jaxpr, to_jax
from minipallas.ir.collectives import CollectiveAxesError
from minipallas.lowering.compat.jax_private import state_discharge
from minipallas.tools.difftest import Case, ref
from minipallas.tools.difftest.harness import run as difftest_run
from minipallas.tools.difftest.mosaic import assume_chip

SHAPE = (8, 128)
F = mp.ArrayType(SHAPE, "float32")
R = mp.RefType(SHAPE, "float32")
X = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
UPSTREAM = (pl.run_scoped, pltpu.VMEM, jax.jit)
MINIPALLAS = (mp.run_scoped, mp.tpu.VMEM, lambda f: lambda *a: mp.call(f, *a))


def scratch_of_refs(api):
    """A kernel body whose collective scratch is filled from one ref and read into another."""
    run_scoped, vmem, _ = api

    def body(x_ref, o_ref):
        def scoped(s):
            s[...] = x_ref[...]
            o_ref[...] = s[...] + 1

        run_scoped(scoped, vmem(SHAPE, jnp.float32), collective_axes="x")

    return body


def scratch_of_values(api):
    """``x -> x + 1`` through collective scratch, touching no ref from outside."""
    run_scoped, vmem, _ = api

    def g(x):
        def scoped(s):
            s[...] = x
            return s[...] + 1

        return run_scoped(scoped, vmem(SHAPE, jnp.float32), collective_axes="x")

    return g


def in_callee(api):
    """A kernel body calling a jitted function that holds the collective scratch."""
    jit = api[2]
    g = jit(scratch_of_values(api))

    def body(x_ref, o_ref):
        o_ref[...] = g(x_ref[...])

    return body


def in_nested_scope_and_loop(api):
    """The collective scope inside a plain scope inside a loop, in a kernel body."""
    run_scoped, vmem, _ = api
    fori_loop = jax.lax.fori_loop if api is UPSTREAM else mp.fori_loop
    inner = scratch_of_refs(api)

    def body(x_ref, o_ref):
        def step(i, carry):
            run_scoped(lambda t: inner(x_ref, o_ref), vmem(SHAPE, jnp.float32))
            return carry

        fori_loop(0, 2, step, 0)

    return body


def upstream_kernel(make, interpret=False, **kw):
    out = jax.ShapeDtypeStruct(SHAPE, jnp.float32)
    return pl.pallas_call(make(UPSTREAM), out_shape=out, grid=(2,), interpret=interpret, **kw)


def ours_kernel(make):
    return mp.pallas_call(make(MINIPALLAS), F, grid=(2,))


def upstream_interpret(make):
    return upstream_kernel(make, interpret=True)(X)


def upstream_mosaic(make):
    with assume_chip("TPU_V5E"):
        jax.jit(upstream_kernel(make)).trace(X).lower(lowering_platforms=("tpu",))


def upstream_triton(make):
    kernel = upstream_kernel(make, compiler_params=pltriton.CompilerParams())
    jax.jit(kernel).trace(X).lower(lowering_platforms=("cuda",))


def upstream_run_state(make):
    """Upstream's meaning of a program over refs: ``run_state`` (discharge, then XLA)."""
    body = make(UPSTREAM)
    return jax.jit(state_discharge.run_state(lambda refs: body(*refs)))((X, X))


def upstream_jit(make):
    return jax.jit(make(UPSTREAM)).lower(X)


def traced_refs(make):
    return mp.trace(make(MINIPALLAS), R, R)


def traced_values(make):
    return mp.trace(make(MINIPALLAS), F)


def imported_pallas_call(make):
    """Upstream's own ``pallas_call`` (interpret mode), imported: its CPU program is built."""
    return from_jaxpr(jax.make_jaxpr(upstream_kernel(make, interpret=True))(X))


# path -> (program, how upstream runs it, how minipallas runs it)
PATHS = {
    "cpu_kernel-call": (scratch_of_refs, upstream_interpret, lambda m: ours_kernel(m)(X)),
    "cpu_kernel-lower": (scratch_of_refs, upstream_interpret, lambda m: ours_kernel(m).lower(F)),
    "cpu_kernel-nested": (
        in_nested_scope_and_loop,
        upstream_interpret,
        lambda m: ours_kernel(m)(X),
    ),
    "cpu_kernel-callee": (in_callee, upstream_interpret, lambda m: ours_kernel(m)(X)),
    "cpu_kernel-import": (scratch_of_refs, upstream_interpret, imported_pallas_call),
    "interpreter-kernel-program": (
        scratch_of_refs,
        upstream_interpret,
        lambda m: mp.interpret(traced_refs(m), X.copy(), X.copy(), program_ids=(0,), grid=(2,)),
    ),
    "mosaic": (scratch_of_refs, upstream_mosaic, lambda m: ours_kernel(m).lower(F, target="tpu")),
    "mosaic-callee": (in_callee, upstream_mosaic, lambda m: ours_kernel(m).lower(F, target="tpu")),
    "triton": (scratch_of_refs, upstream_triton, lambda m: ours_kernel(m).lower(F, target="gpu")),
    "triton-callee": (
        in_callee,
        upstream_triton,
        lambda m: ours_kernel(m).lower(F, target="gpu"),
    ),
    "interpreter-refs": (
        scratch_of_refs,
        upstream_run_state,
        lambda m: mp.interpret(traced_refs(m), X.copy(), X.copy()),
    ),
    "discharge-refs": (scratch_of_refs, upstream_run_state, lambda m: mp.discharge(traced_refs(m))),
    "lowering-refs": (scratch_of_refs, upstream_run_state, lambda m: mp.lower(traced_refs(m))),
    "compile-refs": (scratch_of_refs, upstream_run_state, lambda m: mp.compile(traced_refs(m))),
    "to_jax-refs": (scratch_of_refs, upstream_run_state, lambda m: to_jax(traced_refs(m))),
    "interpreter-values": (
        scratch_of_values,
        upstream_jit,
        lambda m: mp.interpret(traced_values(m), X.copy()),
    ),
    "discharge-values": (scratch_of_values, upstream_jit, lambda m: mp.discharge(traced_values(m))),
    "lowering-values": (scratch_of_values, upstream_jit, lambda m: mp.lower(traced_values(m))),
    "compile-values": (scratch_of_values, upstream_jit, lambda m: mp.compile(traced_values(m))),
    "to_jax-values": (scratch_of_values, upstream_jit, lambda m: to_jax(traced_values(m))),
}


def raised(thunk, make):
    try:
        thunk(make)
    except Exception as e:  # whatever upstream raises is what we compare with
        return e
    pytest.fail(f"{thunk.__name__} ran a run_scoped with collective axes without an error")


@pytest.mark.parametrize("path", sorted(PATHS))
def test_same_class_and_message_as_upstream(path):
    make, theirs, ours = PATHS[path]
    upstream_error = raised(theirs, make)
    with pytest.raises(CollectiveAxesError) as info:
        ours(make)
    e = info.value
    assert str(e) == str(upstream_error)
    assert isinstance(e, type(upstream_error)), (type(e).__mro__, type(upstream_error))
    assert isinstance(e, mp.MiniPallasError)
    assert e.loc.file.endswith("test_collectives_upstream.py") and e.loc.line > 0
    (note,) = e.__notes__
    assert f"'run_scoped' at {e.loc} in @" in note and "('x',)" in note


def test_the_paths_cover_every_upstream_message():
    messages = {str(raised(theirs, make)) for make, theirs, _ in PATHS.values()}
    assert messages == {
        "run_scoped discharge does not support collective_axes yet.",
        "run_scoped lowering outside of Pallas does not support collective_axes.",
        "run_scoped interpret rule does not support collective axes",
        "run_scoped lowering does not support collective axes",
        "Unimplemented primitive in Pallas Triton lowering: run_scoped. Please file an issue at"
        " https://github.com/jax-ml/jax/issues/new/choose.",
    }


@pytest.mark.parametrize(
    ("make", "args"),
    [(scratch_of_refs, (ref(X), ref(X))), (scratch_of_values, (X,))],
    ids=["refs", "values"],
)
def test_difftest_classifies_the_same_rejection_as_agreement(make, args):
    report = difftest_run(Case(make.__name__, make(UPSTREAM), args, expect="same-rejection"))
    up = report.outcomes["upstream"]
    assert up.error is not None
    for way in ("interpret", "discharge", "compile"):
        assert str(report.outcomes[way].error) == str(up.error)
    assert (report.finding.kind, report.finding.name) == ("agree", "same-rejection")
    assert report.ok and report.expected
