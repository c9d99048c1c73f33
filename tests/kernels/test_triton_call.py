"""A ``pallas_call`` inside ``jax.jit``, lowered for a GPU: the Triton custom call.

``jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))`` lowers for CUDA on a machine
without a GPU, so the module is checked here: it holds one ``__gpu$xla.gpu.triton`` custom
call per kernel, whose backend config carries the kernel's Triton module (the ``gpu``
target's, byte for byte once parsed) and whose every other attribute (name, launch grid,
warps, stages, layouts, aliases, types) equals what upstream's own Triton lowering of the same
suite kernel emits (``pl.pallas_call(..., interpret=False)`` with Triton compiler params:
jax 0.10.2's default GPU backend is Mosaic GPU). Running it needs a GPU:
``bench/chip/gpu_check.py --jit``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import triton as pltriton
from kernel_helpers import assert_same_bits, custom_call_ops

import minipallas as mp
from minipallas.lowering.compat.jaxlib_shim import ir, make_triton_context
from minipallas.tools.corpora.suite import BY_NAME

TRITON = "__gpu$xla.gpu.triton"
# suite kernels upstream's Triton lowering takes whose grid minipallas launches whole
SAME_GRID = [
    "add", "add_partial_blocks", "bias_relu", "scale_1d", "softmax", "batched_squeezed",
    "pick_rows", "bf16_gelu", "bf16_matmul", "whole_array", "transpose_blocks",
    "chunked_loop", "int_ops", "reversed_blocks", "layer_norm_partial", "compare_int8",
]  # fmt: skip


def custom_calls(fn, args, platform="cuda"):
    """The custom calls of ``fn``'s module lowered for ``platform``, each as a dict of its
    attributes; the backend config's ``ir`` (bytecode) is under ``"module"``, apart."""
    return [describe(op) for op in custom_call_ops(fn, args, platform)]


def describe(op):
    attrs = op.attributes
    target = ir.StringAttr(attrs["call_target_name"]).value
    config = ir.DictAttr(attrs["mhlo.backend_config"]) if target == TRITON else None
    fields = {config[k].name: config[k].attr for k in range(len(config))} if config else {}
    bytecode = ir.StringAttr(fields.pop("ir")).value_bytes if "ir" in fields else None
    optional = ("operand_layouts", "result_layouts", "output_operand_aliases")
    return {
        "target": target,
        "config": {k: str(v) for k, v in fields.items()},
        **{k: str(attrs[k]) if k in attrs else None for k in optional},
        "operands": [str(v.type) for v in op.operands],
        "results": [str(r.type) for r in op.results],
        "module": bytecode,
    }


def upstream_triton(case, **options):
    return case.upstream(interpret=False, compiler_params=pltriton.CompilerParams(), **options)


def only_call(calls):
    assert [c["target"] for c in calls] == [TRITON]
    return calls[0]


def assert_is_the_kernels_module(bytecode, call, args):
    parsed = ir.Module.parse(bytecode, context=make_triton_context())
    want = call.lower(*args, target="gpu").as_text(debug_info=False)
    assert parsed.operation.get_asm(enable_debug_info=False) == want


def without_module(c):
    return {k: v for k, v in c.items() if k != "module"}


@pytest.mark.parametrize("name", SAME_GRID)
def test_the_cuda_module_holds_upstreams_triton_call_with_the_kernels_module(name):
    case = BY_NAME[name]
    call, args = case.minipallas(), case.inputs()
    ours = only_call(custom_calls(call, args))
    theirs = only_call(custom_calls(upstream_triton(case), args))
    assert without_module(ours) == without_module(theirs)
    assert_is_the_kernels_module(ours["module"], call, args)
    grid = call.lower(*args, target="gpu").launch_grid
    assert ours["config"]["grid_x"] == f"{grid[0]} : i32"


def test_a_call_without_inputs_stages_out_when_traced_as_upstreams_does():
    """``grid_ids`` takes no arrays; under ``jax.jit`` it stages out all the same (a JAX
    trace is active: ``checks.jax_tracing``), a custom call without operands, as upstream's.
    It once ran on the CPU when traced, a constant of the module."""
    case = BY_NAME["grid_ids"]
    call = case.minipallas()
    ours = only_call(custom_calls(call, ()))
    theirs = only_call(custom_calls(upstream_triton(case), ()))
    assert without_module(ours) == without_module(theirs)
    assert ours["operands"] == []
    assert_is_the_kernels_module(ours["module"], call, ())
    assert_same_bits(jax.jit(call)(), call())


@pytest.mark.parametrize(
    ("name", "ours", "upstream"),
    [("masked_col_max", (2, 1), (4, 2)), ("sum_and_max", (2, 1), (2, 4)),
     ("padding_visible", (3, 1), (3, 3))],
)  # fmt: skip
def test_a_revisited_output_block_is_looped_where_upstream_launches_every_grid_point(
    name, ours, upstream
):
    """The one difference from upstream: an axis along which an output block is revisited
    runs as a loop in each program (``lowering/gpu/grid.py``), where upstream launches one
    program per grid point and they race on the block."""
    case = BY_NAME[name]
    call, args = case.minipallas(), case.inputs()
    mine = only_call(custom_calls(call, args))
    theirs = only_call(custom_calls(upstream_triton(case), args))
    grid = lambda c: tuple(int(c["config"][f"grid_{a}"].split(" ")[0]) for a in "xy")  # noqa: E731
    assert (grid(mine), grid(theirs)) == (ours, upstream)
    for key in ("grid_x", "grid_y"):
        mine["config"].pop(key), theirs["config"].pop(key)
    assert without_module(mine) == without_module(theirs)


@pytest.mark.parametrize("name", ["matmul", "row_sum", "staged_run_scoped"])
def test_kernels_upstreams_triton_lowering_refuses_lower_too(name):
    """Scratch, ``run_scoped`` and ``arbitrary`` axes: upstream's Triton backend has no rule
    for them; minipallas keeps scratch in registers and loops the arbitrary axes."""
    case = BY_NAME[name]
    call, args = case.minipallas(), case.inputs()
    c = only_call(custom_calls(call, args))
    assert_is_the_kernels_module(c["module"], call, args)
    grid = call.lower(*args, target="gpu").launch_grid
    assert c["config"]["grid_x"] == f"{grid[0]} : i32"


def test_input_output_aliases_become_output_operand_aliases_as_upstreams():
    case = BY_NAME["add"]
    call, args = case.minipallas(input_output_aliases={1: 0}), case.inputs()
    ours = only_call(custom_calls(call, args))
    theirs = only_call(custom_calls(upstream_triton(case, input_output_aliases={1: 0}), args))
    assert "operand_index = 1" in ours["output_operand_aliases"]
    assert without_module(ours) == without_module(theirs)


@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_compiler_params_and_platform_defaults_are_upstreams(platform):
    """Default warps 4 and stages 3 on CUDA, 1 on ROCm; given ones go to the config."""
    case = BY_NAME["softmax"]
    args = case.inputs()
    for given in ({}, {"num_warps": 8, "num_stages": 2}):
        call = case.minipallas(compiler_params=mp.gpu.CompilerParams(**given))
        up = case.upstream(interpret=False, compiler_params=pltriton.CompilerParams(**given))
        ours = only_call(custom_calls(call, args, platform))
        assert without_module(ours) == without_module(only_call(custom_calls(up, args, platform)))
    assert ours["config"]["num_warps"] == "8 : i32"


def test_the_cpu_lowering_is_the_to_jax_program_and_tpu_params_refuse_a_gpu():
    case = BY_NAME["add"]
    call, args = case.minipallas(), case.inputs()
    assert custom_calls(call, args, "cpu") == []
    tpu = case.minipallas(compiler_params=mp.tpu.CompilerParams(dimension_semantics=None))
    custom_calls(tpu, args, "cpu")  # the CPU ignores them, as upstream's interpret mode
    with pytest.raises(mp.MiniPallasError, match="lower it to 'tpu'"):
        custom_calls(tpu, args, "cuda")


def test_vmap_and_grad_lowered_for_cuda_launch_the_kernel():
    """``vmap`` launches one kernel with one more grid axis (``kernels/batching.py``);
    ``grad``'s forward pass launches it, its tangents are the to-JAX program's XLA ops."""
    case = BY_NAME["bias_relu"]
    call, (x, b) = case.minipallas(), case.inputs()
    xs = np.stack([x, x])
    batched = only_call(custom_calls(jax.vmap(call, in_axes=(0, None)), (xs, b)))
    assert batched["operands"] == ["tensor<2x32x256xf32>", "tensor<1x256xf32>"]
    grad = jax.grad(lambda x: jnp.sum(call(x, b) ** 2))
    assert only_call(custom_calls(grad, (x,)))["target"] == TRITON
    assert_same_bits(jax.jit(grad)(x), jax.grad(lambda x: jnp.sum(call(x, b) ** 2))(x))


def test_the_primitive_keeps_no_reference_to_its_call_so_a_dropped_call_is_freed():
    """The jitted function in ``jax_call``'s weak cache binds a ``KernelCall``, which holds
    the traced kernel and its program but not the ``PallasCall`` (the cache's key)."""
    import gc
    import weakref

    from minipallas.platforms import jax_values as jax_call

    case = BY_NAME["add"]
    call, args = case.minipallas(), case.inputs()
    custom_calls(call, args)
    assert len(jax_call._FUNCTIONS[call]) == 1
    dropped = weakref.ref(call)
    del call
    gc.collect()
    assert dropped() is None
