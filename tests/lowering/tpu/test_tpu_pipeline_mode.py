"""A block spec's ``pipeline_mode`` as upstream's Mosaic lowering honours it: the window's
``pipeline_mode``/``revisit_mode`` equal upstream's, what upstream refuses is refused with its
message (on the TPU only: the CPU computes the same values with any buffering, as upstream's
interpret mode does), and the imported ``pallas_call`` carries its modes, cost estimate and
metadata. Each emitted module is compiled by libtpu (``tests/mosaic_compile.py``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from filecheck_util import filecheck
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.interop import from_jaxpr
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.kernels.programs.choose import lower_for_target
from minipallas.tools.difftest.mosaic import UpstreamError, summarize, upstream_mosaic

X = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
X_TYPE = jax.ShapeDtypeStruct(X.shape, X.dtype)


def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def ours(mode, out_mode=None, **options):
    """``add_one`` over two (8, 128) row blocks, ``mode`` on the input's spec."""
    return mp.pallas_call(
        add_one,
        mp.ArrayType(X.shape, "float32"),
        grid=(2,),
        in_specs=[mp.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=mode)],
        out_specs=mp.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=out_mode),
        optimize=False,  # the module upstream emits: no fused grid steps
        **options,
    )


def theirs(mode, out_mode=None, interpret=False, **options):
    return pl.pallas_call(
        add_one,
        jax.ShapeDtypeStruct(X.shape, X.dtype),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=mode)],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=out_mode),
        interpret=interpret,
        **options,
    )


def windows(module):
    return summarize(module).attributes["window_params"]


HONOURED = [
    (pl.Buffered(1), mp.Buffered(1)),
    (pl.Buffered(2), mp.Buffered(2)),
    (pl.Buffered(1, revisit=pl.RevisitMode.ANY), mp.Buffered(1, revisit=mp.RevisitMode.ANY)),
    (
        pl.Buffered(2, revisit=pl.RevisitMode.IMMEDIATE),
        mp.Buffered(2, revisit=mp.RevisitMode.IMMEDIATE),
    ),
]


@pytest.mark.parametrize("upstream_mode, mode", HONOURED, ids=str)
def test_the_window_params_are_upstreams(upstream_mode, mode):
    """On the input and on the output (where a revisit mode means something), minipallas's
    ``Buffered`` and upstream's ``pl.Buffered`` given to ``mp.BlockSpec`` alike."""
    want = windows(upstream_mosaic(theirs(upstream_mode, upstream_mode), X_TYPE))
    assert windows(ours(mode, mode).lower(X, target="tpu").module) == want
    assert windows(ours(upstream_mode, upstream_mode).lower(X, target="tpu").module) == want


def test_the_window_params_as_text():
    text = ours(mp.Buffered(1), mp.Buffered(1, revisit=mp.RevisitMode.ANY)).lower(X, target="tpu")
    filecheck(
        text.as_text(debug_info=False),
        "CHECK: window_params = [{pipeline_mode = #tpu.pipeline_mode<synchronous>, "
        "transform_indices = @transform_0, window_bounds = array<i64: 8, 128>}, "
        "{pipeline_mode = #tpu.pipeline_mode<synchronous>, "
        "revisit_mode = #tpu.revisit_mode<any>, transform_indices = @transform_1, "
        "window_bounds = array<i64: 8, 128>}]\n",
    )


REFUSED = [
    (pl.Buffered(3), "Only single (1) and double (2) buffering are supported. Got 3."),
    (pl.Buffered(0), "Only single (1) and double (2) buffering are supported. Got 0."),
    (
        pl.Buffered(2, use_lookahead=True),
        "Lookahead is not supported for XLA pipeline emitter lowering.",
    ),
    (
        pl.Buffered(2, revisit=pl.RevisitMode.ANY),
        "RevisitMode.ANY is not supported with double buffering.",
    ),
    ("fast", "Unsupported pipeline mode: fast."),
]


@pytest.mark.parametrize("mode, message", REFUSED, ids=lambda x: str(x)[:24])
def test_what_upstream_refuses_on_the_tpu_is_refused_with_its_message(mode, message):
    with pytest.raises(UpstreamError) as upstream:
        upstream_mosaic(theirs(mode), X_TYPE)
    assert message in str(upstream.value)
    call = ours(mode)
    with pytest.raises(mp.MiniPallasError) as refused:
        call.lower(X, target="tpu")
    error = refused.value
    assert error.message.startswith(message)
    assert error.op == "pallas_call" and error.fix
    assert str(error.loc).startswith(__file__)
    with pytest.raises(mp.MiniPallasError, match=message.replace(".", r"\.").replace("(", r"\(")
                       .replace(")", r"\)")):  # fmt: skip
        jax.jit(call).trace(X).lower(lowering_platforms=("tpu",))
    # the CPU ignores the buffering, as upstream's interpret mode does: same values
    assert np.array_equal(call(X), X + 1)
    assert np.array_equal(jax.jit(call)(X), theirs(mode, interpret=True)(X))


def test_triton_refuses_a_pipeline_mode_as_upstreams():
    with pytest.raises(mp.MiniPallasError, match="Pipeline mode is not supported in Triton"):
        ours(mp.Buffered(2)).lower(X, target="gpu")


def test_a_whole_array_vmem_window_is_synchronous_whatever_the_spec_says():
    """Upstream forces ``Buffered(1)`` on a trivial VMEM window before it checks the mode, so
    ``Buffered(3)`` there is no error; an ANY-space operand has no window to buffer."""
    whole = dict(block_shape=X.shape, index_map=lambda i: (0, 0))
    for space, want in ((None, "#tpu.pipeline_mode<synchronous>"), (mp.tpu.ANY, "{}")):
        call = mp.pallas_call(
            lambda x_ref, o_ref: None,
            mp.ArrayType(X.shape, "float32"),
            grid=(2,),
            in_specs=[mp.BlockSpec(**whole, memory_space=space, pipeline_mode=mp.Buffered(3))],
            out_specs=mp.BlockSpec(**whole),
            input_output_aliases={0: 0},
            optimize=False,
        )
        first = summarize(call.lower(X, target="tpu").module).attributes["window_params"]
        assert first.startswith(f"[{want}" if want == "{}" else f"[{{pipeline_mode = {want}")


def test_the_kernel_text_shows_the_modes_the_cost_estimate_and_the_metadata():
    call = ours(
        mp.Buffered(1),
        mp.Buffered(2, revisit=mp.RevisitMode.IMMEDIATE),
        cost_estimate=mp.CostEstimate(flops=10, transcendentals=0, bytes_accessed=8),
        metadata={"owner": "test"},
    )
    filecheck(
        str(call.trace(X)),
        "CHECK: kernel add_one: grid (2,)\n"
        "CHECK-NEXT: CostEstimate(flops=10, transcendentals=0, bytes_accessed=8, "
        "remote_bytes_transferred=0)\n"
        "CHECK-NEXT: metadata {'owner': 'test'}\n"
        "CHECK-NEXT: input 0: f32[16,128] in blocks [8x128] Buffered(1), index map:\n"
        "CHECK: output 0: f32[16,128] in blocks [8x128] Buffered(2, revisit=IMMEDIATE), index\n",
    )
    assert "Buffered" not in str(ours(None).trace(X))


def test_bad_fields_are_refused_where_they_are_given():
    with pytest.raises(mp.MiniPallasError, match="buffer_count must be an int"):
        mp.Buffered("2")
    with pytest.raises(mp.MiniPallasError, match="All fields in CostEstimate must be ints"):
        mp.CostEstimate(flops=1.5, transcendentals=0, bytes_accessed=0)
    with pytest.raises(mp.MiniPallasError, match="metadata must be a mapping of str to str"):
        ours(None, metadata={"n": 1})
    with pytest.raises(mp.MiniPallasError, match="cost_estimate must be a CostEstimate"):
        ours(None, cost_estimate={"flops": 1})


def test_the_imported_pallas_call_keeps_its_modes_cost_estimate_and_metadata():
    """``kernel_from_jaxpr``: upstream's ``pl.Buffered`` and ``pl.CostEstimate`` as
    minipallas's, the module's windows as upstream's; ``from_jaxpr`` runs a mode the TPU
    refuses on the CPU, as upstream's interpret mode does."""
    cost = pl.CostEstimate(flops=4096, transcendentals=0, bytes_accessed=16384)
    meta = {"kernel": "add_one"}
    call = theirs(pl.Buffered(1), pl.Buffered(2), cost_estimate=cost, metadata=meta)
    kernel = kernel_from_jaxpr(jax.make_jaxpr(call)(X), memory_space=mp.tpu.VMEM)
    assert kernel.in_specs[0].pipeline_mode == mp.Buffered(1)
    assert kernel.out_specs[0].pipeline_mode == mp.Buffered(2)
    assert kernel.cost_estimate == mp.CostEstimate(4096, 0, 16384)
    assert kernel.metadata == (("kernel", "add_one"),)
    module = lower_for_target(kernel, "tpu", optimize=False).module
    assert windows(module) == windows(upstream_mosaic(call, X_TYPE))
    refused = theirs(pl.Buffered(3), interpret=True)
    program = from_jaxpr(jax.make_jaxpr(refused)(X))
    assert np.array_equal(mp.compile(program)(X)[0], np.asarray(refused(X)))


def test_tpu_compiler_params_and_a_pipeline_mode_together():
    """The mode is the module's, the params the custom call's: one does not move the other."""
    params = pltpu.CompilerParams(dimension_semantics=("arbitrary",))
    lowered = ours(mp.Buffered(1), compiler_params=params).lower(X, target="tpu")
    attrs = summarize(lowered.module).attributes
    assert "synchronous" in attrs["window_params"] and "arbitrary" in attrs["dimension_semantics"]
    assert jnp.array_equal(jax.jit(ours(mp.Buffered(1)))(X), X + 1)
