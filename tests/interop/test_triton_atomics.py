"""Pallas Triton's atomics (``plgpu.atomic_add``/``max``/``min``, ``atomic_cas``) import as the
atomic ops: interpret and compile give upstream's interpret-mode bits (its discharge rules: read
the window, combine, write back; integer-array windows with repeated positions keep the last
lane's write), a mask keeps masked-off lanes (upstream's discharge has no rule for it), the
kinds upstream cannot interpret are refused by name, and the Triton emitter writes
``tt.atomic_rmw``/``tt.atomic_cas`` that compile to PTX."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from interop_helpers import assert_same
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

import minipallas as mp
from minipallas.interop import JaxprImportError, from_jaxpr
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.kernels.programs.choose import lower_for_target
from minipallas.passes.discharge import discharge

F32, I32 = jnp.float32, jnp.int32


def _kernel(x_ref, k_ref, _o, _s, _n, o_ref, s_ref, n_ref, p_ref):
    i = pl.program_id(0)
    old = plgpu.atomic_add(o_ref, pl.ds(0, 4), x_ref[...])
    plgpu.atomic_max(o_ref, pl.ds(4, 4), x_ref[...] * 2.0)
    plgpu.atomic_min(o_ref, pl.ds(i * 3, 4), old)  # past the end at i = 2: clamped
    at = jnp.minimum(jax.lax.iota(I32, 4) * 2, 4)  # [0, 2, 4, 4]: 4 twice, the last wins
    plgpu.atomic_add(n_ref, at, k_ref[...])
    plgpu.atomic_max(n_ref, pl.ds(4, 4), k_ref[...] - i)
    p_ref[i] = plgpu.atomic_cas(s_ref, 3, i + 5)


def _origin(rank):
    return lambda i: (0,) * rank


def call(interpret):
    shapes = [((8,), F32), ((), I32), ((8,), I32), ((3,), I32)]
    whole = [pl.BlockSpec(s, _origin(len(s))) for s, _ in shapes]
    return pl.pallas_call(
        _kernel,
        tuple(jax.ShapeDtypeStruct(s, d) for s, d in shapes),
        grid=(3,),
        in_specs=[pl.BlockSpec((4,), lambda i: (i,)), pl.BlockSpec((4,), lambda i: (i,)),
                  *whole[:3]],
        out_specs=tuple(whole),
        input_output_aliases={2: 0, 3: 1, 4: 2},
        interpret=interpret,
    )  # fmt: skip


def _args(seed):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal(12).astype(np.float32),
        rng.integers(-9, 9, 12).astype(np.int32),
        rng.standard_normal(8).astype(np.float32),
        np.int32(3 if seed % 2 else 4),  # the first swap happens, or none does
        rng.integers(-9, 9, 8).astype(np.int32),
    )


def _jaxpr():
    return jax.make_jaxpr(call(False))(*_args(0))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_atomics_import_with_upstreams_results(seed):
    args = _args(seed)
    want = [np.asarray(w) for w in jax.jit(call(True))(*args)]
    fn = from_jaxpr(_jaxpr())
    assert {op.name for op in fn.walk()} >= {"call"}
    for way, got in [
        ("compile", mp.compile(fn)(*args)),
        ("interpret", mp.interpret(fn, *[np.array(a) for a in args])),
    ]:
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, what=f"{way} output {k}")


def test_the_kernel_body_holds_the_atomic_ops_and_discharges_to_array_ops():
    kernel = kernel_from_jaxpr(_jaxpr())
    names = [op.name for op in kernel.body.walk()]
    assert names.count("atomic_add") == 2 and names.count("atomic_max") == 2
    assert names.count("atomic_min") == 1 and names.count("atomic_cas") == 1
    pure = discharge(kernel.body)
    mp.verify(pure)
    assert not any(op.name.startswith("atomic") for op in pure.walk())


def test_a_masked_atomic_keeps_the_masked_off_lanes():
    """Interpreted and discharged alike; through an integer array, a masked-off lane does not
    overwrite what a masked-on lane wrote at its position."""
    fn = mp.parse(
        """func @f(%r: Ref{i32[6]}, %v: i32[4], %m: bool[4]) -> (i32[4], i32[4]) {
  %a = atomic_add %r[0:4], %v, mask %m : i32[4]
  %i = constant [1, 3, 3, 5] : i32[4]
  %b = atomic_min %r[array(%i)], %v, mask %m : i32[4]
  return %a, %b
}"""
    )
    r = np.array([10, 20, 30, 40, 50, 60], np.int32)
    v, m = np.array([1, 2, 3, 4], np.int32), np.array([True, True, False, True])
    added = np.array([11, 22, 30, 44, 50, 60], np.int32)  # lane 2 masked off
    final = np.array([11, 1, 30, 2, 50, 4], np.int32)  # lane 2 (at 3, after lane 1) kept off
    ref = r.copy()
    got = mp.interpret(fn, ref, v, m)
    np.testing.assert_array_equal(ref, final)
    np.testing.assert_array_equal(got[0], r[:4])
    np.testing.assert_array_equal(got[1], added[[1, 3, 3, 5]])
    discharged = mp.interpret(discharge(fn), r.copy(), v, m)
    for g, w in zip(discharged, [*got, final], strict=True):
        np.testing.assert_array_equal(g, w)


def test_kinds_upstream_cannot_interpret_are_refused_by_name():
    def k(o_ref):
        plgpu.atomic_xchg(o_ref, pl.ds(0, 4), jnp.ones(4, I32))

    jaxpr = jax.make_jaxpr(pl.pallas_call(k, jax.ShapeDtypeStruct((4,), I32)))()
    with pytest.raises(JaxprImportError, match="atomic_xchg is not imported") as e:
        from_jaxpr(jaxpr)
    assert "atomic_add" in e.value.fix


def test_the_triton_emitter_writes_atomics_that_compile_to_ptx():
    pytest.importorskip("triton")
    from minipallas.lowering.gpu.ptx import compile_ptx

    lowered = lower_for_target(kernel_from_jaxpr(_jaxpr()), "gpu")
    text = lowered.as_text()
    for kind in ("fadd", "add", "max", "umin", "min", "umax"):  # float max/min through bits
        assert f"tt.atomic_rmw {kind}, acq_rel, gpu" in text, kind
    assert "tt.atomic_cas acq_rel, gpu" in text
    assert "atom." in str(compile_ptx(lowered))


def test_the_difftest_harness_runs_atomics_against_upstream():
    """The emitter writes ``plgpu`` atomics, so a program with them is judged by upstream."""
    from minipallas.tools.difftest import run
    from minipallas.tools.fuzz.upstream import case_for

    fn = mp.parse(
        """func @f(%r: Ref{f32[8]}, %q: Ref{i32[6]}, %v: f32[4], %w: i32[3], %i: i32[])
    -> (f32[4], i32[3]) {
  %a = atomic_add %r[ds(%i, 4)], %v : f32[4]
  %b = atomic_max %r[0:4], %a : f32[4]
  %k = constant [0, 4, 4] : i32[3]
  %c = atomic_min %q[array(%k)], %w : i32[3]
  return %b, %c
}"""
    )
    for i in (1, 6):
        case = case_for(fn, 0, fn.name)
        case.args = (*case.args[:4], np.int32(i))
        report = run(case)
        assert report.ok, report.text()
        assert "atomic_rmw" in str(report.jaxpr)
