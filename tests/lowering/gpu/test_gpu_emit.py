"""The Triton module the GPU path emits: its shape (FileCheck on the text), the schedule of the
grid, scratch carried in registers, and the errors for what Triton cannot express."""

import pathlib
import subprocess
import sys

import numpy as np
import pytest
from gpu_kernels import EXTRA, masked_io_call
from gpu_util import KERNELS, lowered

import minipallas as mp
import minipallas.numpy as jnp
from minipallas.errors import PassError
from minipallas.lowering.gpu import lower_kernel
from minipallas.lowering.jaxlib_shim import ir, make_triton_context
from minipallas.passes.collectives import TRITON_MESSAGE, CollectiveAxesUnsupported

FILECHECK = pathlib.Path(sys.executable).parent / "filecheck"
ALL = [*KERNELS, *EXTRA]


def filecheck(text: str, checks: str, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "checks.txt"
    path.write_text(checks)
    done = subprocess.run([str(FILECHECK), str(path)], input=text, capture_output=True, text=True)
    assert done.returncode == 0, f"{done.stderr}\n--- emitted:\n{text}"


def lower_case(case):
    return case.minipallas().lower(*case.inputs(), target="gpu")


@pytest.mark.parametrize("case", ALL, ids=lambda c: c.name)
def test_every_kernel_emits_a_module_the_triton_dialect_parses_and_verifies(case):
    low = lower_case(case)
    with make_triton_context():
        module = ir.Module.parse(low.as_text())
        assert module.operation.verify()
    assert low.target == "gpu" and str(low).startswith("#loc")


def test_operands_are_pointers_and_blocks_pointer_tensors(tmp_path):
    checks = """
    CHECK: tt.func public @add(%[[X:[a-z0-9]+]]: !tt.ptr<f32> {tt.divisibility = 32 : i32},
    CHECK-SAME: %[[Y:[a-z0-9]+]]: !tt.ptr<f32> {tt.divisibility = 32 : i32},
    CHECK-SAME: %[[O:[a-z0-9]+]]: !tt.ptr<f32> {tt.divisibility = 32 : i32})
    CHECK-NEXT: %[[I:.*]] = tt.get_program_id x : i32
    CHECK-NEXT: %[[J:.*]] = tt.get_program_id y : i32
    CHECK: tt.make_range {end = 8 : i32, start = 0 : i32} : tensor<8xi32>
    CHECK: tt.expand_dims
    CHECK: tt.broadcast
    CHECK: %[[PX:.*]] = tt.addptr %[[X]], %[[OFF:.*]] : !tt.ptr<f32>, i32
    CHECK-NEXT: tt.splat %[[PX]] : !tt.ptr<f32> -> tensor<8x128x!tt.ptr<f32>>
    CHECK: %[[A:.*]] = tt.load %{{.*}} : tensor<8x128x!tt.ptr<f32>>
    CHECK: tt.addptr %[[Y]], %[[OFF]]
    CHECK: %[[B:.*]] = tt.load
    CHECK: %[[S:.*]] = arith.addf %[[A]], %[[B]] : tensor<8x128xf32>
    CHECK: tt.addptr %[[O]], %[[OFF]]
    CHECK-NOT: tt.load
    CHECK: tt.store %{{.*}}, %[[S]] : tensor<8x128x!tt.ptr<f32>>
    CHECK-NEXT: tt.return
    """
    filecheck(lowered("add").as_text(debug_info=False), checks, tmp_path)


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


def test_overhanging_blocks_are_masked(tmp_path):
    """20x300 in 8x128 blocks: loads read the fill value past the end, stores are masked."""
    checks = """
    CHECK: arith.cmpi slt
    CHECK: %[[M:.*]] = arith.andi %{{.*}}, %{{.*}} : tensor<8x128xi1>
    CHECK: %[[NAN:.*]] = arith.bitcast %{{.*}} : i32 to f32
    CHECK: tt.load %{{.*}}, %[[M]], %{{.*}} : tensor<8x128x!tt.ptr<f32>>
    CHECK: tt.load %{{.*}}, %[[M]], %{{.*}} : tensor<8x128x!tt.ptr<f32>>
    CHECK: tt.store %{{.*}}, %{{.*}}, %[[M]] : tensor<8x128x!tt.ptr<f32>>
    """
    filecheck(lowered("add_partial_blocks").as_text(debug_info=False), checks, tmp_path)


def test_blocks_that_divide_the_array_have_no_masks():
    assert "tt.load %" in lowered("softmax").as_text() and "i1>" not in lowered("add").as_text()


def test_masked_load_and_store_from_the_ir_map_onto_triton_masks(tmp_path):
    x = np.arange(100, dtype=np.float32)
    text = masked_io_call().lower(x, target="gpu").as_text(debug_info=False)
    checks = """
    CHECK: %[[KEEP:.*]] = arith.cmpi slt, %{{.*}} : tensor<64xi32>
    CHECK: %[[BOTH:.*]] = arith.andi %[[KEEP]], %[[BOUND:.*]] : tensor<64xi1>
    CHECK: tt.load %{{.*}}, %[[BOTH]], %{{.*}} : tensor<64x!tt.ptr<f32>>
    CHECK: %[[W:.*]] = arith.andi %{{.*}}, %[[BOUND]] : tensor<64xi1>
    CHECK-NEXT: tt.store %{{.*}}, %{{.*}}, %[[W]] : tensor<64x!tt.ptr<f32>>
    """
    filecheck(text, checks, tmp_path)


def test_source_locations_are_the_users_lines():
    text = lowered("softmax").as_text()
    assert 'loc("' in text and "suite.py" in text


def test_scratch_matmul_carries_the_accumulator_in_registers(tmp_path):
    """Grid (i, j, k), k 'arbitrary': i, j are launched, k is a loop carrying the scratch
    accumulator as an iter_arg; the k == 0 init and the last-k store are scf.if. The f32 dot
    is IEEE (the dialect's default, so not printed), not TF32."""
    checks = """
    CHECK: tt.get_program_id x
    CHECK: tt.get_program_id y
    CHECK-NOT: tt.get_program_id
    CHECK: %[[INIT:.*]] = tt.splat %{{.*}} : f32 -> tensor<32x128xf32>
    CHECK: scf.for %[[K:[a-z0-9]+]] = %{{[a-z0-9_]+}} to %{{[a-z0-9_]+}} step %{{[a-z0-9_]+}}
    CHECK-SAME: iter_args(%[[ACC:.*]] = %[[INIT]]) -> (tensor<32x128xf32>)  : i32
    CHECK: scf.if
    CHECK: tt.dot %{{.*}}, %{{.*}}, %{{.*}} : tensor<32x32xf32> * tensor<32x128xf32>
    CHECK: scf.if
    CHECK: tt.store
    CHECK: scf.yield
    CHECK-NOT: tt.load
    CHECK: tt.return
    """
    low = lowered("matmul")
    assert low.schedule.looped == (2,) and low.launch_grid == (2, 2)
    filecheck(low.as_text(debug_info=False), checks, tmp_path)
    assert "tf32" not in low.as_text()


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


def test_softmax_with_scratch_and_online_scratch_emit_and_verify(tmp_path):
    text = lower_case(EXTRA[1]).as_text(debug_info=False)
    checks = """
    CHECK: tt.get_program_id x
    CHECK: scf.for {{.*}} iter_args({{.*}}) -> (tensor<16x1xf32>, tensor<16x1xf32>)
    CHECK: tt.reduce
    CHECK: tt.extern_elementwise {{.*}}symbol = "__nv_expf"
    CHECK: scf.yield
    """
    filecheck(text, checks, tmp_path)
    assert "tt.load" in lower_case(EXTRA[0]).as_text()


def test_reductions_and_transcendentals(tmp_path):
    checks = """
    CHECK: "tt.reduce"(%{{.*}}) <{axis = 1 : i32}>
    CHECK: arith.maximumf
    CHECK: tt.reduce.return
    CHECK: symbol = "__nv_expf"
    CHECK: "tt.reduce"
    CHECK: arith.addf
    CHECK: arith.divf
    """
    filecheck(lowered("softmax").as_text(debug_info=False), checks, tmp_path)


def test_revisited_output_axis_becomes_a_loop_unless_semantics_say_otherwise():
    low = lowered("sum_and_max")  # no dimension_semantics: inferred from the index maps
    assert low.schedule.looped == (1,) and "index map ignores it" in low.schedule.why[0]
    assert low.as_text().count("tt.get_program_id") == 1 and "scf.for" in low.as_text()
    assert lowered("add").schedule.looped == ()


@pytest.mark.parametrize("dtype, short", [("bfloat16", "bf16"), ("float16", "f16")])
def test_16_bit_division_is_computed_in_f32_and_rounded_once(dtype, short, tmp_path):
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
    filecheck(text, checks, tmp_path)
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


def test_lower_kernel_rejects_what_is_not_a_kernel():
    with pytest.raises(PassError, match="takes a traced Kernel"):
        lower_kernel("add")
