"""``minipallas.pallas_call``: the Kernel it traces, its CPU semantics, errors, lowering."""

import numpy as np
import pytest
from kernel_helpers import assert_same_bits

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.ir.errors import MiniPallasError, PassError, TraceError
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.types import ANY, TPU_SMEM, TPU_VMEM

F32 = mp.ArrayType((16, 256), "float32")
SPEC = mp.BlockSpec((8, 128), lambda i, j: (i, j))


def add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


def add_call(**kw):
    kw = {"grid": (2, 2), "in_specs": [SPEC, SPEC], "out_specs": SPEC, **kw}
    return mp.pallas_call(add, F32, **kw)


def rand(*shape, dtype=np.float32):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


# ----- the traced Kernel -----


def test_trace_gives_block_refs_index_maps_and_the_body():
    kernel = add_call(dimension_semantics=("parallel", "arbitrary")).trace(F32, F32)
    assert isinstance(kernel, Kernel) and kernel.name == "add" and kernel.grid == (2, 2)
    assert kernel.num_inputs == 2 and kernel.out_types == (F32,)
    assert kernel.dimension_semantics == ("parallel", "arbitrary")
    spec = kernel.in_specs[0]
    assert spec.ref_type == mp.RefType((8, 128), "float32", ANY) and spec.squeezed == (False,) * 2
    assert spec.index_map.param_types == (mp.ArrayType((), "int32"),) * 2
    assert spec.index_map.result_types == (mp.ArrayType((), "int32"),) * 2
    assert kernel.body.param_types == (spec.ref_type,) * 3
    mp.verify(kernel.body)
    mp.verify(spec.index_map)


def test_dimension_semantics_may_be_upstream_enums():
    from jax.experimental.pallas import tpu as pltpu

    call = add_call(dimension_semantics=(pltpu.PARALLEL, pltpu.ARBITRARY))
    assert call.trace(F32, F32).dimension_semantics == ("parallel", "arbitrary")


def test_trace_is_cached_per_input_types_and_accepts_arrays():
    call = add_call()
    x = rand(16, 256)
    assert call.trace(x, x) is call.trace(F32, F32)


def test_squeezed_dims_whole_array_specs_and_python_int_block_indices():
    def k(x_ref, w_ref, o_ref):
        o_ref[...] = x_ref[...] * w_ref[0, :]

    call = mp.pallas_call(
        k,
        mp.ArrayType((3, 128), "float32"),
        grid=(3,),
        in_specs=[mp.BlockSpec((None, 128), lambda i: (i, 0)), None],
        out_specs=mp.BlockSpec((None, 128), lambda i: (i, 0)),
    )
    x, w = rand(3, 128), rand(2, 128)
    kernel = call.trace(x, w)
    assert kernel.in_specs[0].ref_type.shape == (128,)
    assert kernel.in_specs[0].squeezed == (True, False)
    assert kernel.in_specs[1].block_shape == (2, 128)  # a missing spec: the whole array
    np.testing.assert_array_equal(call(x, w), x * w[0])


def test_memory_spaces_default_explicit_and_scratch():
    def k(x_ref, o_ref, acc_ref):
        acc_ref[...] = x_ref[...]
        o_ref[...] = acc_ref[...]

    call = mp.pallas_call(
        k,
        F32,
        in_specs=[mp.BlockSpec(memory_space=TPU_SMEM)],
        scratch_shapes=[mp.tpu.VMEM((16, 256), "float32")],
    )
    kernel = call.trace(F32)
    assert kernel.in_specs[0].memory_space == TPU_SMEM
    assert kernel.out_specs[0].memory_space == ANY
    assert kernel.scratch_types == (mp.RefType((16, 256), "float32", TPU_VMEM),)
    tpu = call.trace(F32, memory_space=TPU_VMEM)
    assert tpu.out_specs[0].memory_space == TPU_VMEM and tpu.in_specs[0].memory_space == TPU_SMEM
    x = rand(16, 256)
    np.testing.assert_array_equal(call(x), x)


def test_multiple_outputs_keep_the_structure_of_out_shape():
    def k(x_ref, a_ref, b_ref):
        a_ref[...] = x_ref[...] + 1.0
        b_ref[...] = x_ref[...] > 0

    x = rand(8, 128)
    outs = [mp.ArrayType((8, 128), "float32"), mp.ArrayType((8, 128), "bool")]
    a, b = mp.pallas_call(k, tuple(outs))(x)
    np.testing.assert_array_equal(a, x + 1)
    np.testing.assert_array_equal(b, x > 0)
    assert isinstance(mp.pallas_call(k, outs)(x), list)


def test_out_shape_may_be_a_jax_shape_dtype_struct_and_inputs_jax_arrays():
    import jax
    import jax.numpy as jnp

    call = mp.pallas_call(add, jax.ShapeDtypeStruct((16, 256), jnp.float32))
    x = jnp.ones((16, 256), jnp.float32)
    np.testing.assert_array_equal(call(x, x), np.full((16, 256), 2, np.float32))


# ----- CPU semantics of the grid -----


def test_grid_order_is_row_major_and_num_programs_is_the_grid():
    def k(o_ref, count_ref):
        @mp.when((mp.program_id(0) == 0) & (mp.program_id(1) == 0))
        def _():
            count_ref[0] = 0

        o_ref[...] = mnp.full(o_ref.shape, count_ref[0] * 10 + mp.num_programs(1), mnp.int32)
        count_ref[0] = count_ref[0] + 1

    call = mp.pallas_call(
        k,
        mp.ArrayType((2, 3), "int32"),
        grid=(2, 3),
        in_specs=[],
        out_specs=mp.BlockSpec((1, 1), lambda i, j: (i, j)),
        scratch_shapes=[mp.tpu.SMEM((1,), "int32")],
    )
    np.testing.assert_array_equal(call(), [[3, 13, 23], [33, 43, 53]])


def test_partial_blocks_see_nan_padding_and_outputs_start_as_nan():
    def k(x_ref, o_ref, nans_ref):
        o_ref[0:1, :] = x_ref[0:1, :]  # the rest of the output block is never written
        nans_ref[...] = mnp.full(nans_ref.shape, (x_ref[...] != x_ref[...]).sum(), mnp.int32)

    call = mp.pallas_call(
        k,
        (mp.ArrayType((5, 10), "float32"), mp.ArrayType((2,), "int32")),
        grid=(2,),
        in_specs=[mp.BlockSpec((4, 10), lambda i: (i, 0))],
        out_specs=(mp.BlockSpec((4, 10), lambda i: (i, 0)), mp.BlockSpec((None,), lambda i: (i,))),
    )
    x = rand(5, 10)
    out, nans = call(x)
    np.testing.assert_array_equal(nans, [0, 30])  # rows 5..7 of the second block are padding
    np.testing.assert_array_equal(out[[0, 4]], x[[0, 4]])
    assert np.isnan(out[[1, 2, 3]]).all()


def test_scratch_persists_across_the_grid():
    def k(x_ref, o_ref, acc_ref):
        @mp.when(mp.program_id(0) == 0)
        def _():
            acc_ref[...] = mnp.zeros(acc_ref.shape, mnp.float32)

        acc_ref[...] += x_ref[...]
        o_ref[...] = acc_ref[...]

    call = mp.pallas_call(
        k,
        mp.ArrayType((4, 128), "float32"),
        grid=(4,),
        in_specs=[mp.BlockSpec((1, 128), lambda i: (i, 0))],
        out_specs=mp.BlockSpec((1, 128), lambda i: (i, 0)),
        scratch_shapes=[mp.tpu.VMEM((1, 128), "float32")],
    )
    x = rand(4, 128)
    assert_same_bits(call(x), np.cumsum(x, axis=0, dtype=np.float32))


def test_an_empty_grid_axis_runs_nothing():
    call = mp.pallas_call(add, F32, grid=(0, 2), in_specs=[SPEC, SPEC], out_specs=SPEC)
    x = rand(16, 256)
    assert np.isnan(call(x, x)).all()


def test_program_id_inside_loops_conditionals_scopes_and_calls():
    def helper(x):
        return x + mp.program_id(0).astype(mnp.float32)

    def k(x_ref, o_ref):
        def body(r, c):
            return c + mp.call(helper, x_ref[r, :])

        total = mp.fori_loop(0, 2, body, mnp.zeros((128,), mnp.float32))

        def scoped(tmp_ref):
            tmp_ref[...] = mp.cond(mp.program_id(0) > 0, lambda: total * 2, lambda: total)
            o_ref[...] = tmp_ref[...]

        mp.run_scoped(scoped, mp.tpu.VMEM((128,), "float32"))

    call = mp.pallas_call(
        k,
        mp.ArrayType((3, 128), "float32"),
        grid=(3,),
        in_specs=[mp.BlockSpec((2, 128), lambda i: (0, 0))],
        out_specs=mp.BlockSpec((None, 128), lambda i: (i, 0)),
    )
    x = rand(2, 128)
    expected = np.stack([(x[0] + i) + (x[1] + i) for i in range(3)]) * np.array([[1], [2], [2]])
    np.testing.assert_allclose(call(x), expected.astype(np.float32), rtol=1e-6)


# ----- lowering -----


def test_lower_to_stablehlo_is_the_cpu_program():
    """Independent grid points run batched: the add is one add over the arrays, seen as
    (blocks, block) pairs; an accumulator across a grid axis keeps that axis a loop, but for
    a few steps (unrolling)."""
    lowered = add_call().lower(F32, F32)
    text = str(lowered)
    assert lowered.target == "stablehlo" and "func.func @main" in text
    assert lowered.function.name == "add_grid"
    assert "stablehlo.while" not in text and "stablehlo.add" in text
    assert "tensor<2x8x2x128xf32>" in text

    def accumulate(x_ref, o_ref):
        o_ref[...] += x_ref[...]

    for steps, loops in [(2, 0), (32, 1)]:
        call = mp.pallas_call(
            accumulate, mp.ArrayType((8, 256), "float32"), grid=(steps, 2), in_specs=[SPEC],
            out_specs=mp.BlockSpec((8, 128), lambda i, j: (0, j)),
        )  # fmt: skip
        text = str(call.lower(mp.ArrayType((8 * steps, 256), "float32")))
        assert text.count("stablehlo.while") == loops and "tensor<8x2x128xf32>" in text


def test_lower_rejects_unknown_targets_and_options():
    with pytest.raises(PassError, match="unknown lowering target 'cuda'"):
        add_call().lower(F32, F32, target="cuda")
    with pytest.raises(PassError, match="takes no options"):
        add_call().lower(F32, F32, promote_scratch=True)
    with pytest.raises(PassError, match="target 'tpu' has no option 'unroll'"):
        add_call().lower(F32, F32, target="tpu", unroll=True)


@pytest.mark.parametrize("target", ["tpu", "gpu"])
def test_lower_to_a_device_target_uses_its_emitter_or_says_it_is_missing(target):
    import importlib.util

    module = f"minipallas.lowering.{target}"
    if importlib.util.find_spec(module) is None:
        with pytest.raises(PassError, match=f"the {target} emitter .* is not available"):
            add_call().lower(F32, F32, target=target)
    else:
        lowered = add_call().lower(F32, F32, target=target)
        assert lowered.target == target and str(lowered).strip()


# ----- errors -----


def _trace_error(call, *types):
    with pytest.raises(TraceError) as info:
        call.trace(*types)
    return str(info.value)


def test_error_block_shape_rank():
    bad = mp.BlockSpec((8,), lambda i, j: (i,))
    msg = _trace_error(add_call(in_specs=[bad, SPEC]), F32, F32)
    assert "block shape (8,) of input 0 has 1 dimensions" in msg and "test_pallas_call.py" in msg


def test_error_index_map_arity_and_results():
    msg = _trace_error(
        add_call(in_specs=[mp.BlockSpec((8, 128), lambda i: (i, 0)), SPEC]), F32, F32
    )
    assert "index map of input 0 (defined at" in msg
    assert "takes 1 parameter, but the grid has 2 axes" in msg
    msg = _trace_error(add_call(out_specs=mp.BlockSpec((8, 128), lambda i, j: (i,))), F32, F32)
    assert "index map of output 0 returns 1 block indices" in msg
    msg = _trace_error(add_call(out_specs=mp.BlockSpec((8, 128), lambda i, j: (i, 0.5))), F32, F32)
    assert "must return integer scalars, got f32[]" in msg


def test_error_kernel_with_a_parameter_per_ref_too_few():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    call = mp.pallas_call(kernel, F32, in_specs=[SPEC, SPEC], out_specs=SPEC, grid=(2, 2))
    with pytest.raises(TraceError) as info:
        call.trace(F32, F32)
    e, first = info.value, kernel.__code__.co_firstlineno
    assert e.message == (
        f"the kernel @kernel (defined at {__file__}:{first}) takes 2 parameters, but pallas_call "
        "passes it 3 refs (2 inputs, 1 outputs, 0 scratch) (too many positional arguments)"
    )
    assert e.loc.file == __file__
    assert e.fix == "give the kernel @kernel one parameter per argument (3)"


def test_error_kernel_returns_a_value_or_asks_for_a_missing_axis():
    def returns(x_ref, o_ref):
        return x_ref[...]

    msg = _trace_error(mp.pallas_call(returns, F32), F32)
    assert "a kernel returns nothing" in msg

    def asks(x_ref, o_ref):
        o_ref[...] = x_ref[...] + mp.program_id(1).astype(mnp.float32)

    msg = _trace_error(mp.pallas_call(asks, F32, grid=(2,)), F32)
    assert "'program_id': asks for grid axis 1, but the grid has 1 axes" in msg


def test_error_arguments_of_pallas_call():
    with pytest.raises(TraceError, match="grid sizes must be non-negative ints"):
        mp.pallas_call(add, F32, grid=(2, -1))
    with pytest.raises(TraceError, match="scratch_shapes\\[0\\] must be a ref type"):
        mp.pallas_call(add, F32, scratch_shapes=[F32])
    with pytest.raises(TraceError, match="dimension_semantics must give one of"):
        mp.pallas_call(add, F32, grid=(2,), dimension_semantics=("parallel", "parallel"))
    with pytest.raises(TraceError, match="out_specs has 2 specs for 1 outputs"):
        mp.pallas_call(add, F32, out_specs=[SPEC, SPEC])
    with pytest.raises(TraceError, match="specs must be minipallas.BlockSpec"):
        mp.pallas_call(add, F32, in_specs=[(8, 128)])
    with pytest.raises(TraceError, match="has 2 in_specs, but got 1 inputs"):
        add_call().trace(F32)
    with pytest.raises(MiniPallasError, match="unsupported dtype"):
        add_call()(np.zeros((16, 256)), np.zeros((16, 256)))
