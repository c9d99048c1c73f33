"""A ``pallas_call`` inside ``jax.jit``, lowered for a TPU: the ``tpu_custom_call``.

``jax.jit(f).trace(*args).lower(lowering_platforms=("tpu",))`` lowers for TPU on a machine
without one, so the module is checked here: it holds one ``tpu_custom_call`` per kernel whose
backend config carries the kernel's own Mosaic module (the ``tpu`` target's, text for text
once decoded) and whose every other field (the config's, the kernel name, layouts, aliases,
types, metadata) equals what upstream's own TPU lowering of the same suite kernel emits
(``pl.pallas_call(..., interpret=False)``, lowered as ``minipallas.tools.difftest.mosaic`` does).
Running it needs the chip: ``make tpu-check``.
"""

import base64
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu
from kernel_helpers import assert_same_bits, custom_call_ops

import minipallas as mp
from minipallas.lowering.compat.jaxlib_shim import ir, make_tpu_context, passmanager
from minipallas.tools.corpora.suite import BY_NAME
from minipallas.tools.difftest.mosaic import assume_chip, summarize, upstream_mosaic

TPU = "tpu_custom_call"
# suite kernels upstream's TPU lowering takes as they are (others have non-TPU block shapes)
UPSTREAM_LOWERS = ["add", "softmax", "bias_relu", "layer_norm_partial", "sum_and_max", "int_ops"]
SERDE_VERSION = "module attributes {stable_mosaic.version = 11 : i64} {"  # the serde adds it


def custom_calls(fn, args):
    """Each custom call of ``fn`` lowered for TPU as a dict; the body is under ``"module"``."""
    return [describe(op) for op in custom_call_ops(fn, args, "tpu")]


def describe(op):
    attrs = op.attributes
    config = json.loads(ir.StringAttr(attrs["backend_config"]).value)
    body = config["custom_call_config"].pop("body")
    named = ("kernel_name", "operand_layouts", "result_layouts", "output_operand_aliases",
             "has_side_effect", "api_version", "mhlo.frontend_attributes")  # fmt: skip
    return {
        "target": ir.StringAttr(attrs["call_target_name"]).value,
        "config": config,
        **{k: str(attrs[k]) if k in attrs else None for k in named},
        "operands": [str(v.type) for v in op.operands],
        "results": [str(r.type) for r in op.results],
        "module": base64.b64decode(body),
    }


def upstream_calls(case, args, **options):
    with assume_chip("TPU_V5E"):
        return custom_calls(case.upstream(interpret=False, **options), args)


def only_call(calls):
    assert [c["target"] for c in calls] == [TPU]
    return calls[0]


def decoded(body):
    """The module text of a backend config's body (Mosaic's serialized bytecode)."""
    with make_tpu_context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(body)
        serde = "builtin.module(mosaic-serde{serialize=false})"
        passmanager.PassManager.parse(serde).run(module.operation)
        return module.operation.get_asm(enable_debug_info=False)


def assert_is_the_kernels_module(body, call, args):
    text = decoded(body)
    assert text.startswith(SERDE_VERSION)
    want = call.lower(*args, target="tpu").as_text(debug_info=False)
    assert text.replace(SERDE_VERSION, "module {", 1) == want


def without_module(c):
    return {k: v for k, v in c.items() if k != "module"}


@pytest.mark.parametrize("name", UPSTREAM_LOWERS)
def test_the_tpu_module_holds_upstreams_custom_call_with_the_kernels_module(name):
    case = BY_NAME[name]
    call, args = case.minipallas(), case.inputs()
    ours = only_call(custom_calls(call, args))
    assert without_module(ours) == without_module(only_call(upstream_calls(case, args)))
    assert_is_the_kernels_module(ours["module"], call, args)
    assert ours["kernel_name"] == f'"{name}"'
    assert ours["config"]["custom_call_config"]["serialization_format"] == 1


def test_input_output_aliases_count_the_prefetch_and_grid_operands_as_upstreams():
    case = BY_NAME["add"]
    call, args = case.minipallas(input_output_aliases={1: 0}), case.inputs()
    ours = only_call(custom_calls(call, args))
    assert "operand_index = 1" in ours["output_operand_aliases"]
    theirs = only_call(upstream_calls(case, args, input_output_aliases={1: 0}))
    assert without_module(ours) == without_module(theirs)


def _gather(idx_ref, x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0


def _prefetch_call(grid, **options):
    spec = mp.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))
    return mp.pallas_call(
        _gather,
        jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid_spec=mp.tpu.PrefetchScalarGridSpec(
            num_scalar_prefetch=1, grid=grid, in_specs=[spec], out_specs=spec
        ),
        **options,
    )


def test_dynamic_grid_sizes_then_prefetch_operands_come_first_and_aliases_count_them():
    """A traced grid size is the custom call's first operand (i32), then the scalar-prefetch
    array, then the inputs; alias 1 (the input, after one prefetch operand) is operand 2."""
    idx = np.array([1, 0], np.int32)
    x = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)

    def f(n, idx, x):
        return _prefetch_call((n,), input_output_aliases={1: 0})(idx, x)

    c = only_call(custom_calls(f, (2, idx, x)))
    assert c["operands"] == ["tensor<i32>", "tensor<2xi32>", "tensor<16x128xf32>"]
    assert "operand_index = 2" in c["output_operand_aliases"]
    assert "scalar_prefetch = 1" in decoded(c["module"])
    assert "iteration_bounds = array<i64: -9223372036854775808>" in decoded(c["module"])


def _negate(x_ref, o_ref):
    o_ref[...] = ~x_ref[...]


def test_bool_operands_and_results_cross_as_int32_and_the_cpu_run_is_unchanged():
    call = mp.pallas_call(_negate, jax.ShapeDtypeStruct((8, 128), jnp.bool_))
    x = np.arange(8 * 128).reshape(8, 128) % 3 == 0
    c = only_call(custom_calls(call, (x,)))
    assert c["operands"] == ["tensor<8x128xi32>"] and c["results"] == ["tensor<8x128xi32>"]
    assert_same_bits(jax.jit(call)(x), ~x)


PARAMS = dict(
    vmem_limit_bytes=1 << 20,
    flags={"xla_tpu_some_flag": True},
    allow_input_fusion=(True, False),
    internal_scratch_in_bytes=4096,
    disable_bounds_checks=True,
    skip_device_barrier=True,
    shape_invariant_numerics=False,
    has_side_effects=True,
)


def test_compiler_params_reach_the_backend_config_as_upstreams():
    """Every field upstream passes, with its defaults when none are given: shape-invariant
    numerics on (CompilerParams' default, not as_tpu_kernel's), no vmem limit, pure."""
    case = BY_NAME["add"]
    args = case.inputs()
    for given in ({}, PARAMS):
        call = case.minipallas(compiler_params=mp.tpu.CompilerParams(**given))
        ours = only_call(custom_calls(call, args))
        theirs = upstream_calls(case, args, compiler_params=pltpu.CompilerParams(**given))
        assert without_module(ours) == without_module(only_call(theirs))
    default = only_call(custom_calls(case.minipallas(), args))["config"]
    assert "shape_invariant_numerics" not in default["custom_call_config"]  # written if False
    assert "scoped_memory_configs" not in default and ours["has_side_effect"] == "true"
    assert ours["config"]["custom_call_config"]["shape_invariant_numerics"] is False
    assert ours["config"]["scoped_memory_configs"][0]["size"] == 1 << 20
    assert ours["config"]["flag_configs"][0]["flag_type"] == "xla_tpu_some_flag"


def test_gpu_params_refuse_a_tpu_and_backend_xla_runs_the_discharged_program():
    case = BY_NAME["add"]
    args = case.inputs()
    gpu = case.minipallas(compiler_params=mp.gpu.CompilerParams(num_warps=8))
    with pytest.raises(mp.MiniPallasError, match="lower it to 'gpu' or 'ptx'"):
        custom_calls(gpu, args)
    xla = case.minipallas(backend="xla")
    assert custom_calls(xla, args) == []
    assert_same_bits(jax.jit(xla)(*args), case.minipallas()(*args))
    with pytest.raises(mp.MiniPallasError, match="backend='mosaic' is not a backend"):
        case.minipallas(backend="mosaic")


def test_vmap_adds_a_grid_axis_as_upstreams_batching_and_grad_runs_the_kernel():
    """``vmap`` is one custom call whose module has one more grid axis (``parallel``), the
    batched operand a leading squeezed block dimension: every field but the body as upstream's
    vmapped call, and the module's grid, windows and semantics as upstream's module.
    ``grad``'s forward pass runs the kernel, its tangents are XLA ops."""
    case = BY_NAME["bias_relu"]
    call, (x, b) = case.minipallas(), case.inputs()
    xs = np.stack([x, x])
    ours = only_call(custom_calls(jax.vmap(call, in_axes=(0, None)), (xs, b)))
    up = lambda: jax.vmap(case.upstream(interpret=False), in_axes=(0, None))  # noqa: E731
    their_module = upstream_mosaic(up(), xs, b)  # a fresh function: lowering is cached
    with assume_chip("TPU_V5E"):
        theirs = only_call(custom_calls(up(), (xs, b)))
    assert ours["operands"] == ["tensor<2x32x256xf32>", "tensor<1x256xf32>"]
    assert without_module(ours) == without_module(theirs)
    with make_tpu_context():
        mine = summarize(ir.Module.parse(decoded(ours["module"])))
    want = summarize(their_module)
    for name in ("iteration_bounds", "window_params", "scalar_prefetch"):
        assert mine.attributes[name] == want.attributes[name]
    assert mine.attributes["dimension_semantics"].startswith("[#tpu.dimension_semantics<parallel>")
    grad = jax.grad(lambda x: jnp.sum(call(x, b) ** 2))
    assert only_call(custom_calls(grad, (x,)))["target"] == TPU


def test_shard_map_over_a_mesh_runs_the_kernel_in_each_shard():
    """Mosaic kernels cannot be partitioned automatically; under ``shard_map`` (a manual
    computation) each device runs the kernel on its shard, as upstream's. The CPU test process
    has one device, so the shard is the whole array; the chip check runs a real mesh."""
    case = BY_NAME["add"]
    call, (x, y) = case.minipallas(), case.inputs()
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",))
    spec = jax.sharding.PartitionSpec("d")
    f = jax.shard_map(call, mesh=mesh, in_specs=(spec, spec), out_specs=spec)
    c = only_call(custom_calls(f, (x, y)))
    assert c["operands"] == [f"tensor<{x.shape[0]}x{x.shape[1]}xf32>"] * 2  # one device here


def add_one(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0


def _both(mode=None, upstream_mode=None, ours=None, theirs=None):
    """``add_one`` over (8, 128) row blocks as minipallas's call and upstream's (jitted,
    for the TPU), ``mode``/``upstream_mode`` on both specs, ``ours``/``theirs`` the calls'
    other keyword arguments."""
    from jax.experimental import pallas as pl

    call = mp.pallas_call(
        add_one,
        jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid=(2,),
        in_specs=[mp.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=mode)],
        out_specs=mp.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=mode),
        optimize=False,  # upstream's grid, so the modules' windows compare
        **(ours or {}),
    )
    upstream = pl.pallas_call(
        add_one,
        jax.ShapeDtypeStruct((16, 128), jnp.float32),
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=upstream_mode)],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=upstream_mode),
        **(theirs or {}),
    )
    return call, jax.jit(upstream)


X16 = np.arange(16 * 128, dtype=np.float32).reshape(16, 128)
META = {"owner": "tests", "purpose": "custom call fields"}


def test_cost_estimate_and_metadata_reach_the_custom_call_as_upstreams():
    """The estimate in the backend config, the metadata as the call's ``kernel_metadata``;
    without them, upstream's default (no estimate, ``{}``)."""
    from jax.experimental import pallas as pl

    cost = dict(flops=2048, transcendentals=16, bytes_accessed=16384)
    for given in ({}, {"remote_bytes_transferred": 64}):
        call, upstream = _both(
            ours=dict(cost_estimate=mp.CostEstimate(**cost, **given), metadata=META),
            theirs=dict(cost_estimate=pl.CostEstimate(**cost, **given), metadata=META),
        )
        with assume_chip("TPU_V5E"):
            theirs = only_call(custom_calls(upstream, (X16,)))
        ours = only_call(custom_calls(call, (X16,)))
        assert without_module(ours) == without_module(theirs)
        assert ours["config"]["custom_call_config"]["cost_estimate"] == {
            "remote_bytes_transferred": 0,
            **cost,
            **given,
        }
        meta = ours["mhlo.frontend_attributes"]  # MLIR's escapes: \22 is '"'
        assert "\\22owner\\22:\\22tests\\22" in meta and "custom call fields" in meta
    bare = only_call(custom_calls(_both()[0], (X16,)))
    assert "cost_estimate" not in bare["config"]["custom_call_config"]
    assert 'kernel_metadata = "{}"' in bare["mhlo.frontend_attributes"]


def test_upstreams_cost_estimate_object_is_read_by_field():
    from jax.experimental import pallas as pl

    cost = pl.CostEstimate(flops=1, transcendentals=2, bytes_accessed=3)
    call, upstream = _both(ours=dict(cost_estimate=cost), theirs=dict(cost_estimate=cost))
    with assume_chip("TPU_V5E"):
        theirs = only_call(custom_calls(upstream, (X16,)))
    assert without_module(only_call(custom_calls(call, (X16,)))) == without_module(theirs)


def test_vmap_scales_the_cost_estimate_as_upstreams_batching():
    from jax.experimental import pallas as pl

    cost = dict(flops=2048, transcendentals=16, bytes_accessed=16384, remote_bytes_transferred=8)
    call, upstream = _both(
        ours=dict(cost_estimate=mp.CostEstimate(**cost)),
        theirs=dict(cost_estimate=pl.CostEstimate(**cost)),
    )
    xs = np.stack([X16, X16, X16])
    with assume_chip("TPU_V5E"):
        theirs = only_call(custom_calls(jax.vmap(upstream), (xs,)))
    ours = only_call(custom_calls(jax.vmap(call), (xs,)))
    assert without_module(ours) == without_module(theirs)
    assert ours["config"]["custom_call_config"]["cost_estimate"]["flops"] == 3 * 2048


def test_a_single_buffered_window_is_in_the_module_and_the_call_is_upstreams():
    """``pipeline_mode=Buffered(1)`` on a window that moves (not the whole array): every
    custom-call field but the module as upstream's, and the module's windows as upstream's
    module's (``synchronous``)."""
    from jax.experimental import pallas as pl

    call, upstream = _both(mp.Buffered(1), pl.Buffered(1))
    with assume_chip("TPU_V5E"):
        theirs = only_call(custom_calls(upstream, (X16,)))
    ours = only_call(custom_calls(call, (X16,)))
    assert without_module(ours) == without_module(theirs)
    assert_is_the_kernels_module(ours["module"], call, (X16,))
    with make_tpu_context():
        mine = summarize(ir.Module.parse(decoded(ours["module"])))
    want = summarize(upstream_mosaic(_both(None, pl.Buffered(1))[1], X16))
    assert mine.attributes["window_params"] == want.attributes["window_params"]
    assert (
        "#tpu.pipeline_mode<synchronous>, transform_indices = @transform_0"
        in (mine.attributes["window_params"])
    )
    assert_same_bits(jax.jit(call)(X16), X16 + 1)  # the CPU: the same values
