"""The Triton module the GPU path emits: that it parses and verifies, the schedule of the grid,
scratch carried in registers, and the errors for what Triton cannot express. Its shape, as
FileCheck patterns over the text of kernel files, is in ``filecheck/``."""

import numpy as np
import pytest
from filecheck_util import filecheck
from gpu_util import KERNELS, lowered

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.ir.collectives import TRITON_MESSAGE, CollectiveAxesUnsupported
from minipallas.ir.errors import PassError
from minipallas.lowering.compat.jaxlib_shim import ir, make_triton_context
from minipallas.lowering.gpu import lower_to_triton
from minipallas.tools.corpora.gpu_kernels import EXTRA

ALL = [*KERNELS, *EXTRA]


def lower_case(case):
    return case.minipallas().lower(*case.inputs(), target="gpu")


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_every_kernel_emits_a_module_the_triton_dialect_parses_and_verifies(case):
    low = lower_case(case)
    with make_triton_context():
        module = ir.Module.parse(low.as_text())
        assert module.operation.verify()
    assert low.target == "gpu" and str(low).startswith("#loc")


def test_no_dead_load_before_a_store():
    """A store is a swap whose old value nobody reads: only the two inputs are loaded."""
    text = lowered("add").as_text(debug_info=False)
    assert text.count("tt.load") == 2 and text.count("tt.store") == 1


def test_index_arithmetic_is_folded_and_shared():
    """No ``x * 1`` / ``x + 0``, no zero offsets, one block offset for three operands."""
    text = lowered("add").as_text(debug_info=False)
    assert "arith.constant 1 : i32" not in text and "arith.constant 0 : i32" not in text
    assert text.count("arith.muli %0, %c8_i32") == 1
    assert text.count("tt.make_range") == 2


def test_blocks_that_divide_the_array_have_no_masks():
    assert "tt.load %" in lowered("softmax").as_text() and "i1>" not in lowered("add").as_text()


def test_source_locations_are_the_users_lines():
    text = lowered("softmax").as_text()
    assert 'loc("' in text and "suite.py" in text


def test_scratch_matmul_launches_i_j_and_loops_over_k_at_upstreams_precision():
    """Grid (i, j, k), k 'arbitrary': i, j are launched and k is a loop (its accumulator
    carried in registers: ``filecheck/matmul.py``). The f32 dot at jax's default precision is
    TF32, as upstream's Triton lowering chooses it."""
    low = lowered("matmul")
    assert low.schedule.looped == (2,) and low.launch_grid == (2, 2)
    assert "inputPrecision = tf32" in low.as_text()


def highest_dot_call():
    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=("highest", "highest"))

    return mp.pallas_call(kernel, out_shape=mp.ArrayType((32, 32), "float32"))


def test_a_highest_precision_f32_dot_is_ieee_and_a_mixed_one_tf32():
    """Upstream's choice: IEEE only when neither operand asks for DEFAULT or HIGH."""
    x = np.ones((32, 32), np.float32)
    text = highest_dot_call().lower(x, x, target="gpu").as_text()
    assert "tt.dot" in text and "tf32" not in text  # ieee is the dialect's default: not printed

    def mixed(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=("highest", "high"))

    call = mp.pallas_call(mixed, out_shape=mp.ArrayType((32, 32), "float32"))
    assert "inputPrecision = tf32" in call.lower(x, x, target="gpu").as_text()


def test_scratch_never_reaches_memory():
    """Partial discharge: the operands stay refs, the scratch is gone from the body's
    parameters' refs, and the module has no loads or stores beyond the operands'."""
    for name in ("matmul", "staged_run_scoped"):
        low = lowered(name)
        kernel = low.kernel
        n = kernel.num_inputs + kernel.num_outputs
        assert all(isinstance(p.type, mp.RefType) for p in low.function.params[:n])
        assert not any(isinstance(p.type, mp.RefType) for p in low.function.params[n:])
        assert not any(op.name in ("run_scoped",) for op in low.function.walk())


def test_softmax_through_scratch_loads_its_block():
    """Scratch staging does not lose the block's load (the online kind's loop carrying its
    scratch is checked in ``filecheck/logsumexp_online.py``)."""
    assert "tt.load" in lower_case(EXTRA[0]).as_text()


def test_revisited_output_axis_becomes_a_loop_unless_semantics_say_otherwise():
    low = lowered("sum_and_max")  # no dimension_semantics: inferred from the index maps
    assert low.schedule.looped == (1,) and "index map ignores it" in low.schedule.why[0]
    assert low.as_text().count("tt.get_program_id") == 1 and "scf.for" in low.as_text()
    assert lowered("add").schedule.looped == ()


@pytest.mark.parametrize("dtype, short", [("bfloat16", "bf16"), ("float16", "f16")])
def test_16_bit_division_is_computed_in_f32_and_rounded_once(dtype, short):
    """Triton cannot lower a 16-bit ``divf`` ("Unsupported bitwidth" in PTX generation)."""

    def kernel(x_ref, y_ref, o_ref, s_ref):
        o_ref[...] = x_ref[...] / y_ref[...]
        s_ref[...] = jnp.logistic(x_ref[...])

    t = mp.ArrayType((8, 128), dtype)
    text = mp.pallas_call(kernel, (t, t)).lower(t, t, target="gpu").as_text(debug_info=False)
    checks = f"""
    CHECK: %[[X:.*]] = tt.load
    CHECK: %[[Y:.*]] = tt.load
    CHECK: %[[XW:.*]] = arith.extf %[[X]] : tensor<8x128x{short}> to tensor<8x128xf32>
    CHECK: %[[YW:.*]] = arith.extf %[[Y]] : tensor<8x128x{short}> to tensor<8x128xf32>
    CHECK: %[[Q:.*]] = arith.divf %[[XW]], %[[YW]] : tensor<8x128xf32>
    CHECK: arith.truncf %[[Q]] : tensor<8x128xf32> to tensor<8x128x{short}>
    CHECK: symbol = "__nv_expf"
    CHECK: %[[D:.*]] = arith.addf %{{{{.*}}}}, %{{{{.*}}}} : tensor<8x128x{short}>
    CHECK: %[[DW:.*]] = arith.extf %[[D]] : tensor<8x128x{short}> to tensor<8x128xf32>
    CHECK: %[[R:.*]] = arith.divf %{{{{.*}}}}, %[[DW]] : tensor<8x128xf32>
    CHECK: arith.truncf %[[R]]
    """
    filecheck(text, checks)
    assert not any("divf" in line and f"x{short}>" in line for line in text.splitlines())


def test_more_than_three_launched_axes_fold_into_x():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    f32 = mp.ArrayType((2, 3, 4, 128), "float32")
    spec = mp.BlockSpec((None, None, None, 128), lambda a, b, c, d: (a, b, c, d))
    call = mp.pallas_call(kernel, f32, grid=(2, 3, 4, 1), in_specs=[spec], out_specs=spec)
    low = call.lower(f32, target="gpu")
    assert low.launch_grid == (6, 4, 1)
    text = low.as_text()
    assert "tt.get_program_id x" in text and "tt.get_program_id z" in text
    assert "arith.remui" in text and "arith.divui" in text


def test_collective_axes_are_rejected_with_upstream_tritons_message():
    def kernel(x_ref, o_ref):
        def body(tmp):
            tmp[...] = x_ref[...]
            o_ref[...] = tmp[...]

        mp.run_scoped(body, mp.tpu.VMEM((8, 128), "float32"), collective_axes=("x",))

    f32 = mp.ArrayType((8, 128), "float32")
    call = mp.pallas_call(kernel, f32)
    with pytest.raises(CollectiveAxesUnsupported) as info:
        call.lower(f32, target="gpu")
    assert str(info.value) == TRITON_MESSAGE  # upstream's Triton lowering has no run_scoped rule
    assert isinstance(info.value, NotImplementedError)
    (note,) = info.value.__notes__
    assert "which Triton GPU kernel lowering does not support." in note
    assert "discharging its scratch into each program's own values" in note
    assert "test_gpu_emit.py" in note


def test_non_power_of_two_blocks_are_rejected():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    f32 = mp.ArrayType((24, 128), "float32")
    spec = mp.BlockSpec((12, 128), lambda i: (i, 0))
    call = mp.pallas_call(kernel, f32, grid=(2,), in_specs=[spec], out_specs=spec)
    with pytest.raises(PassError, match="power-of-2 number of elements"):
        call.lower(f32, target="gpu")


def test_integer_pow_is_rejected_at_the_users_line():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] ** x_ref[...]

    i32 = mp.ArrayType((128,), "int32")
    with pytest.raises(PassError, match="on integers has no Triton op") as info:
        mp.pallas_call(kernel, i32).lower(i32, target="gpu")
    assert "test_gpu_emit.py" in str(info.value.loc)


def test_lower_to_triton_rejects_what_is_not_a_kernel():
    with pytest.raises(PassError, match="takes a traced Kernel"):
        lower_to_triton("add")
