"""``pallas_call``'s ``compiler_params=`` and ``debug=``, with upstream Pallas's names."""

import numpy as np
import pytest

import minipallas
from minipallas import tpu
from minipallas.ir.errors import TraceError
from minipallas.numpy import float32


def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


X = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
SPEC = minipallas.BlockSpec((8, 128), lambda i: (i, 0))
OUT = minipallas.ArrayType((16, 128), float32)


def call(**kwargs):
    return minipallas.pallas_call(
        add_one, OUT, grid=(2,), in_specs=[SPEC], out_specs=SPEC, **kwargs
    )


def test_tpu_params_set_the_module_dimension_semantics_as_upstream():
    jax = pytest.importorskip("jax")
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from minipallas.tools.difftest.mosaic import summarize, upstream_mosaic

    params = tpu.CompilerParams(dimension_semantics=("arbitrary",), vmem_limit_bytes=1 << 20)
    lowered = call(compiler_params=params).lower(X, target="tpu")
    ours = summarize(lowered.module).attributes["dimension_semantics"]
    assert "arbitrary" in ours and "parallel" not in ours  # inferred would be parallel
    assert lowered.info["compiler_params"] is params

    upstream = pl.pallas_call(
        add_one,
        jax.ShapeDtypeStruct((16, 128), np.float32),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("arbitrary",), vmem_limit_bytes=1 << 20
        ),
    )
    theirs = summarize(upstream_mosaic(upstream, jax.ShapeDtypeStruct(X.shape, X.dtype)))
    assert theirs.attributes["dimension_semantics"] == ours


def test_upstream_params_objects_are_read_by_field():
    from jax.experimental.pallas import tpu as pltpu
    from jax.experimental.pallas import triton as pltriton

    k = call(compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))
    assert k.dimension_semantics == ("parallel",)
    assert k.compiler_params == tpu.CompilerParams(dimension_semantics=("parallel",))
    g = call(compiler_params=pltriton.CompilerParams(num_warps=8))
    assert g.compiler_params == minipallas.gpu.CompilerParams(num_warps=8)


def test_triton_params_reach_the_ptx_compilation():
    pytest.importorskip("triton")
    params = minipallas.gpu.CompilerParams(num_warps=2, num_stages=2)
    compiled = call(compiler_params=params).lower(X, target="ptx")
    assert compiled.num_warps == 2
    default = call().lower(X, target="ptx")
    assert default.num_warps == 4  # upstream's default
    assert call(compiler_params=params).lower(X, target="gpu").info["compiler_params"] is params


def test_cpu_ignores_params_as_interpret_mode_does():
    params = minipallas.gpu.CompilerParams(num_warps=8)
    np.testing.assert_array_equal(call(compiler_params=params)(X), X + 1.0)


def test_unknown_field_names_the_known_ones():
    with pytest.raises(TraceError, match="no field 'num_warp'") as e:
        minipallas.gpu.CompilerParams(num_warp=8)
    assert "num_warps, num_stages" in e.value.fix


def test_params_for_another_backend_are_refused_when_lowering():
    k = call(compiler_params=minipallas.gpu.CompilerParams(num_warps=8))
    with pytest.raises(TraceError, match="are Triton's, but it is lowered to 'tpu'") as e:
        k.lower(X, target="tpu")
    assert "'gpu' or 'ptx'" in e.value.fix


def test_not_params_is_refused():
    with pytest.raises(TraceError, match="compiler_params must be") as e:
        call(compiler_params={"num_warps": 8})
    assert "minipallas.gpu.CompilerParams" in e.value.fix


def test_semantics_given_twice_is_refused():
    with pytest.raises(TraceError, match="given twice"):
        call(
            dimension_semantics=("parallel",),
            compiler_params=tpu.CompilerParams(dimension_semantics=("parallel",)),
        )


def test_debug_prints_the_kernel_once_and_the_module_when_lowered(capsys):
    k = call(debug=True)
    k(X)
    k(X)
    out = capsys.readouterr().out
    assert out.count("The kernel for pallas_call") == 1
    assert "pallas_call add_one (grid=(2,))" in out
    assert "%5 = add %2, %4 : f32[8,128]" in out  # the body, as minipallas prints IR
    k.lower(X, target="tpu")
    out = capsys.readouterr().out
    assert "The tpu module for pallas_call" in out and "func.func" in out
    assert "The kernel for pallas_call" in out  # the VMEM-space kernel is a new trace


def test_no_debug_prints_nothing(capsys):
    call()(X)
    assert capsys.readouterr().out == ""


# ----- Element block dims -----


def double(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def element_calls(in_block, index_map, n=8, shape=(64,)):
    """The same call in minipallas and upstream (interpret mode): overlapping input windows
    at element offsets, one output block per grid point."""
    import jax
    from jax.experimental import pallas as pl

    out_block = in_block[:-1] + (8,)
    out_map = lambda i: (*index_map(i)[:-1], i)  # noqa: E731
    out = shape[:-1] + (8 * n,)
    ours = minipallas.pallas_call(
        double,
        minipallas.ArrayType(out, float32),
        grid=(n,),
        in_specs=[minipallas.BlockSpec(tuple(_ours(b) for b in in_block), index_map)],
        out_specs=minipallas.BlockSpec(out_block, out_map),
    )
    upstream = pl.pallas_call(
        double,
        jax.ShapeDtypeStruct(out, np.float32),
        grid=(n,),
        in_specs=[pl.BlockSpec(tuple(_upstream(b) for b in in_block), index_map)],
        out_specs=pl.BlockSpec(out_block, out_map),
        interpret=True,
    )
    return ours, upstream


def _ours(b):
    return minipallas.Element(b[1]) if isinstance(b, tuple) else b


def _upstream(b):
    from jax.experimental import pallas as pl

    return pl.Element(b[1]) if isinstance(b, tuple) else b


@pytest.mark.parametrize(
    "index_map",
    [
        lambda i: (i,),  # windows overlapping by 7: a grid index is no block index here
        lambda i: (i * 4,),
        lambda i: (i * 12,),  # past the end: clamped as lax.dynamic_slice clamps
        lambda i: (i * 4 - 3,),  # negative: counted from the end, then clamped
    ],
)
def test_element_dims_match_upstream_interpret_mode(index_map):
    x = np.arange(64, dtype=np.float32) * 0.5 + 0.25
    ours, upstream = element_calls((("E", 8),), index_map)
    expected = np.asarray(upstream(x))
    got = ours(x)
    assert got.tobytes() == expected.tobytes()
    assert ours.program(x).name == "double_grid"  # the loop program, not the batched grid


def test_element_and_blocked_dims_mix_as_upstream():
    x = np.arange(4 * 40, dtype=np.float32).reshape(4, 40) / 3
    ours, upstream = element_calls((2, ("E", 8)), lambda i: (i % 2, i * 5), n=6, shape=(4, 40))
    assert ours(x).tobytes() == np.asarray(upstream(x)).tobytes()


def test_element_dims_import_from_upstream():
    jax = pytest.importorskip("jax")

    x = np.arange(64, dtype=np.float32)
    _, upstream = element_calls((("E", 8),), lambda i: (i * 3,))
    kernel = minipallas.interop.importer.rules.kernel_call.kernel_from_jaxpr(
        jax.make_jaxpr(upstream)(x)
    )
    assert kernel.in_specs[0].element_dims == frozenset({0})
    (out,) = minipallas.compile(minipallas.from_jaxpr(jax.make_jaxpr(upstream)(x)))(x)
    assert out.tobytes() == np.asarray(upstream(x)).tobytes()
