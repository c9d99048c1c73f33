"""``minipallas.lower(fn, target="stablehlo")``: the returned object, the module's shape and
verification, source locations, the collective-axes check, and every rejection's message."""

import numpy as np
import pytest
from ir_types import F8 as VEC
from ir_types import REF8 as REF
from shlo_util import check, const

import minipallas
from minipallas.ir import (
    TPU_VMEM,
    ArrayType,
    Builder,
    Int,
    Location,
    RefType,
    Slice,
    params,
)
from minipallas.ir.collectives import CollectiveAxesLoweringError, CollectiveAxesUnsupported
from minipallas.ir.errors import MiniPallasError, PassError
from minipallas.lowering.compat.jaxlib_shim import ir
from minipallas.lowering.stablehlo import RULES, lower_stablehlo

LOWERING = "run_scoped lowering outside of Pallas does not support collective_axes."
USER_LOC = Location("user.py", 12)


def add_one(loc=USER_LOC):
    b = Builder()
    (x,) = params([VEC])
    one = b.create("broadcast_in_dim", [const(b, 1.0, "float32")], {"shape": (8,), "dims": ()})
    y = b.create("add", [x, one.result], loc=loc).result
    return b.function("add_one", [x], [y])


def test_lowered_object():
    lowered = minipallas.lower(add_one())
    assert isinstance(lowered.module, ir.Module)
    assert lowered.target == "stablehlo"
    text = str(lowered)
    assert "func.func @main(%arg0: tensor<8xf32>" in text and "-> tensor<8xf32>" in text
    assert "stablehlo.add" in text
    with lowered.module.context:
        assert lowered.module.operation.verify()
    assert "loc(" not in lowered.as_text(debug_info=False)


def test_source_locations_become_file_line_col_locs():
    text = str(minipallas.lower(add_one(Location("/src/model.py", 42))))
    assert 'loc("/src/model.py":42:0)' in text
    parsed = minipallas.parse(str(add_one()))
    assert 'loc("<ir>":' in str(minipallas.lower(parsed))


def test_lower_runs_discharge_and_cleanup_first():
    b = Builder()
    (r,) = params([REF])
    v = b.create("get", [r], {"indexer": (Slice(0, 8, 1),)}).result
    twice = b.create("add", [v, v]).result
    b.create("swap", [r, twice], {"indexer": (Slice(0, 8, 1),)})
    fn = b.function("double", [r], [])
    lowered = minipallas.lower(fn)
    assert not any(isinstance(t, RefType) for t in lowered.function.param_types)
    assert "-> tensor<8xf32>" in str(lowered)  # the final value of the ref
    check(fn, np.arange(8, dtype=np.float32))


def scoped_with_axes(axes):
    b = Builder()
    (r,) = params([REF])
    body = Builder()
    scratch, inner = params([RefType((8,), "float32", TPU_VMEM), REF])
    v = body.create("get", [inner], {"indexer": (Slice(0, 8, 1),)}).result
    body.create("swap", [scratch, v], {"indexer": (Slice(0, 8, 1),)})
    out = body.create("get", [scratch], {"indexer": (Int(0),)}).result
    op = b.create(
        "run_scoped",
        [r],
        {"collective_axes": axes},
        [body.block([scratch, inner], [out])],
        loc=Location("kernel.py", 7),
    )
    return b.function("scoped", [r], [op.result])


def test_collective_axes_raise_upstreams_error_before_discharge():
    """The scope uses the function's ref: upstream (``jax.jit(run_state(f))``) discharges it
    first and raises the discharge error; a scope of arrays alone meets the lowering rule."""
    with pytest.raises(NotImplementedError) as info:
        minipallas.lower(scoped_with_axes(("x",)))
    assert type(info.value) is CollectiveAxesUnsupported
    assert str(info.value) == "run_scoped discharge does not support collective_axes yet."
    assert any("kernel.py:7" in note for note in info.value.__notes__)
    values = minipallas.parse("""
    func @f(%x: f32[8]) -> (f32[8]) {
      %r = run_scoped(%x) collective_axes ("x", "y") {
      ^(%s: Ref{f32[8]}, %xin: f32[8]):
        %old = swap %s[:], %xin : f32[8]
        %v = get %s[:] : f32[8]
        yield %v
      } : f32[8]
      return %r
    }""")
    with pytest.raises(ValueError) as info:
        minipallas.compile(values)
    assert type(info.value) is CollectiveAxesLoweringError
    assert str(info.value) == LOWERING


def test_run_scoped_without_axes_lowers_and_reads_uninitialized_scratch():
    fn = scoped_with_axes(())
    (out, ref) = check(fn, np.arange(8, dtype=np.float32) + 1)
    assert out == 1.0 and ref[3] == 4.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32", "int8", "uint32", "bool"])
def test_uninitialized_is_a_defined_constant(dtype):
    b = Builder()
    u = b.create("uninitialized", attrs={"type": ArrayType((3,), dtype)}).result
    (got,) = check(b.function("fresh", [], [u]))
    np_dtype = np.dtype(got.dtype)
    if dtype in ("float32", "bfloat16"):
        assert np.isnan(got.astype(np.float32)).all()
    elif dtype == "bool":
        assert not got.any()
    else:
        assert (got == np.iinfo(np_dtype).min).all()


def test_grid_queries_need_a_kernel():
    b = Builder()
    pid = b.create("program_id", attrs={"axis": 1}, loc=Location("kernel.py", 3)).result
    with pytest.raises(PassError) as info:
        minipallas.lower(b.function("k", [], [pid]))
    message = str(info.value)
    assert "kernel.py:3" in message and "'program_id'" in message and "pallas_call" in message


def test_an_op_without_a_rule_is_named(monkeypatch):
    monkeypatch.delitem(RULES, "add")
    with pytest.raises(PassError, match="user.py:12: 'add': has no StableHLO lowering rule"):
        minipallas.lower(add_one())


def test_undischarged_programs_are_rejected_by_the_emitter():
    b = Builder()
    (r,) = params([REF])
    v = b.create("get", [r], {"indexer": (Slice(0, 8, 1),)}, loc=Location("u.py", 2)).result
    fn = b.function("stateful", [r], [v])
    with pytest.raises(PassError, match="parameter of @stateful is a Ref"):
        lower_stablehlo(fn)
    b = Builder()
    (x,) = params([VEC])
    body = Builder()
    scratch, inner = params([REF, VEC])
    scoped = b.create("run_scoped", [x], {}, [body.block([scratch, inner], [inner])])
    with pytest.raises(PassError, match="still allocates 1 ref"):
        lower_stablehlo(b.function("scoped", [x], [scoped.result]))


def test_bad_requests():
    with pytest.raises(PassError, match="unknown lowering target 'tpu9'"):
        minipallas.lower(add_one(), target="tpu9")
    with pytest.raises(MiniPallasError, match="lower takes a minipallas Function"):
        minipallas.lower(lambda x: x)


def test_every_pure_op_has_a_rule():
    """State ops and ref views are what discharge removes; every other op must lower."""
    from minipallas.ir import OPS

    stateful = {name for name, op in OPS.items() if op.effect or name.startswith("ref.")}
    stateful.add("mesh_call")  # discharge makes it a call of its kernel's program
    missing = sorted(set(OPS) - stateful - set(RULES))
    assert missing == []
    assert not stateful & set(RULES)


def test_public_names_stay_functions_after_their_modules_are_imported():
    import minipallas.lowering.lowered  # noqa: F401
    import minipallas.lowering.runtime.compiled  # noqa: F401

    assert callable(minipallas.lower) and minipallas.lower.__name__ == "lower"
    assert callable(minipallas.compile) and minipallas.compile.__name__ == "compile"
