"""Windows of register values in Mosaic: static ones from scratch promotion, dynamic ones from
loops over a value's rows (``lax.scan`` with extensive inputs/outputs, which upstream's Mosaic
lowering rejects), checked by FileCheck on the emitted module and by the MLIR verifier."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import re

import jax
import jax.numpy as jjnp
import numpy as np
import pytest
from filecheck_util import filecheck
from jax.experimental import pallas as pl
from tpu_util import spec, upstream_running_rows

import minipallas as mp
from minipallas.interop import from_jaxpr
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import PassError
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.parser import parse
from minipallas.ir.types import TPU_SMEM
from minipallas.kernels.pallas_call import lower_for_target
from minipallas.tools.difftest.mosaic import UpstreamError, upstream_mosaic

X = jax.ShapeDtypeStruct((8, 128), jjnp.float32)


_running_rows = upstream_running_rows


def _powers_of_a_row(x_ref, o_ref):
    """ys[i] = x[0] * (i + 1): a scan with an extensive output only."""

    def step(c, _):
        c = c + x_ref[0]
        return c, c

    _, ys = jax.lax.scan(step, jjnp.zeros((128,), jjnp.float32), None, length=8)
    o_ref[...] = ys


def _upstream(body):
    return pl.pallas_call(body, jax.ShapeDtypeStruct((8, 128), jjnp.float32))


def _mosaic(body) -> str:
    kernel = kernel_from_jaxpr(jax.make_jaxpr(_upstream(body))(X), memory_space=mp.tpu.VMEM)
    lowered = lower_for_target(kernel, "tpu")
    assert lowered.module.operation.verify()
    return lowered.as_text(debug_info=False)


@pytest.mark.parametrize("body", [_running_rows, _powers_of_a_row])
def test_upstream_mosaic_rejects_scans_with_extensive_outputs(body):
    with pytest.raises(UpstreamError, match=re.escape("Scan with 1 extensive output(s) is not")):
        upstream_mosaic(_upstream(body), X)


@pytest.mark.parametrize("body", [_running_rows, _powers_of_a_row])
def test_imported_scan_kernels_compute_upstreams_interpret_results(body):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128) / 7
    (got,) = mp.compile(from_jaxpr(jax.make_jaxpr(_upstream(body))(x)))(x)
    expected = pl.pallas_call(body, X, interpret=True)(x)
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(expected).view(np.uint32))


def test_scan_output_row_is_written_by_a_mask_on_the_loop_index():
    filecheck(
        _mosaic(_powers_of_a_row),
        """
        CHECK: scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}, %[[YS:.*]] = %{{.*}})
        CHECK: %[[ROW:.*]] = vector.broadcast %{{.*}} : vector<128xf32> to vector<8x128xf32>
        CHECK: %[[J:.*]] = tpu.iota {dimensions = array<i32: 0>} : vector<8x128xi32>
        CHECK: %[[AT:.*]] = vector.broadcast %[[I]] : i32 to vector<8x128xi32>
        CHECK: %[[HIT:.*]] = arith.cmpi eq, %[[J]], %[[AT]] : vector<8x128xi32>
        CHECK: arith.select %[[HIT]], %[[ROW]], %[[YS]] : vector<8x128xi1>, vector<8x128xf32>
        """,
    )


def test_scan_input_row_is_read_by_rotating_it_to_row_zero():
    filecheck(
        _mosaic(_running_rows),
        """
        CHECK: %[[XS:.*]] = vector.load %arg0[%c0, %c0] : memref<8x128xf32, #tpu.memory_space<vmem>>, vector<8x128xf32>
        CHECK: scf.for %[[I:[^ ]*]] =
        CHECK: %[[BACK:.*]] = arith.subi %c8_i32, %[[I]] : i32
        CHECK: %[[BY:.*]] = arith.remsi %[[BACK]], %c8_i32 : i32
        CHECK: %[[R:.*]] = tpu.dynamic_rotate %[[XS]] by %[[BY]] dim 0 : vector<8x128xf32>, i32 -> vector<8x128xf32>
        CHECK: vector.extract %[[R]][0] : vector<128xf32> from vector<8x128xf32>
        CHECK: arith.cmpi eq
        """,
    )


# Windows at a start read from SMEM (range unknown, so clamped into [0, 16 - size]).
WINDOWS = """
func @windows(%s: Ref{i32[1], tpu.smem}, %x: Ref{f32[16,128], tpu.vmem}, %o: Ref{f32[16,128], tpu.vmem}) -> () {
  %i = get %s[0] : i32[]
  %v = get %x[:, :] : f32[16,128]
  %w = dynamic_slice %v[ds(%i, 4), 0:128] : f32[4,128]
  %u = dynamic_update_slice %v[ds(%i, 4), 0:128], %w : f32[16,128]
  %r = slice %w[0, 0:64] : f32[64]
  %z = dynamic_update_slice %u[%i, 64:128], %r : f32[16,128]
  %old = swap %o[:, :], %z : f32[16,128]
  return
}
"""


def _text_kernel(text: str) -> Kernel:
    fn = parse(text)
    ins = [spec((1,), "int32", space=TPU_SMEM)(1), spec((16, 128), "float32")(1)]
    outs = [spec((16, 128), "float32")(1)]
    return Kernel(fn.name, fn, (1,), tuple(ins), tuple(outs), (), None)


def test_dynamic_windows_rotate_pad_and_mask():
    lowered = lower_for_target(_text_kernel(WINDOWS), "tpu")
    assert lowered.module.operation.verify()
    filecheck(
        lowered.as_text(debug_info=False),
        """
        CHECK: %[[S:.*]] = memref.load %arg1[%c0] : memref<1xi32, #tpu.memory_space<smem>>
        CHECK: %[[LO:.*]] = arith.maxsi %[[S]], %c0_i32 : i32
        CHECK: %[[I:.*]] = arith.minsi %[[LO]], %c12_i32 : i32
        CHECK: %[[BACK:.*]] = arith.subi %c16_i32, %[[I]] : i32
        CHECK: %[[BY:.*]] = arith.remsi %[[BACK]], %c16_i32 : i32
        CHECK: %[[R:.*]] = tpu.dynamic_rotate %{{.*}} by %[[BY]] dim 0
        CHECK: %[[W:.*]] = vector.extract_strided_slice %[[R]] {offsets = [0, 0], sizes = [4, 128], strides = [1, 1]} : vector<16x128xf32> to vector<4x128xf32>
        CHECK: %[[LO2:.*]] = arith.maxsi %[[S]], %c0_i32 : i32
        CHECK: %[[I2:.*]] = arith.minsi %[[LO2]], %c12_i32 : i32
        CHECK: %[[PAD:.*]] = tpu.concatenate %[[W]], %{{.*}} in 0 : vector<4x128xf32>, vector<12x128xf32> -> vector<16x128xf32>
        CHECK: %[[MOVED:.*]] = tpu.dynamic_rotate %[[PAD]] by %[[I2]] dim 0
        CHECK: %[[OFF:.*]] = arith.subi %{{.*}}, %{{.*}} : vector<16x128xi32>
        CHECK: %[[IN:.*]] = arith.cmpi ult, %[[OFF]], %{{.*}} : vector<16x128xi32>
        CHECK: %[[U:.*]] = arith.select %[[IN]], %[[MOVED]], %{{.*}} : vector<16x128xi1>, vector<16x128xf32>
        CHECK: %[[LO3:.*]] = arith.maxsi %[[S]], %c0_i32 : i32
        CHECK: %[[ROW:.*]] = arith.minsi %[[LO3]], %c15_i32 : i32
        CHECK: %[[HALF:.*]] = tpu.concatenate %{{.*}}, %{{.*}} in 1 : vector<1x64xf32>, vector<1x64xf32> -> vector<1x128xf32>
        CHECK: %[[ROWS:.*]] = vector.broadcast %[[HALF]] : vector<1x128xf32> to vector<16x128xf32>
        CHECK: %[[AT_ROW:.*]] = vector.broadcast %[[ROW]] : i32 to vector<16x128xi32>
        CHECK: %[[ON_ROW:.*]] = arith.cmpi eq, %{{.*}}, %[[AT_ROW]] : vector<16x128xi32>
        CHECK: %[[COLS:.*]] = arith.subi %{{.*}}, %{{.*}} : vector<16x128xi32>
        CHECK: %[[ON_COL:.*]] = arith.cmpi ult, %[[COLS]], %{{.*}} : vector<16x128xi32>
        CHECK: %[[BOTH:.*]] = arith.andi %[[ON_ROW]], %[[ON_COL]] : vector<16x128xi1>
        CHECK: %[[Z:.*]] = arith.select %[[BOTH]], %[[ROWS]], %[[U]]
        CHECK: tpu.vector_store %arg3[%c0, %c0], %[[Z]]
        """,
    )


def test_strided_window_of_a_value_is_refused_with_the_ref_fix():
    text = WINDOWS.replace("ds(%i, 4), 0:128] : f32[4,128]", "ds(%i, 4, 2), 0:128] : f32[4,128]")
    with pytest.raises(PassError) as caught:
        lower_for_target(_text_kernel(text), "tpu")
    assert str(caught.value) == (
        "5:8: 'dynamic_slice': a strided window of a register value has no Mosaic TPU "
        "lowering (vector.extract_strided_slice and insert_strided_slice take unit strides)\n"
        "  fix: read or write the strided window through a ref "
        "(x_ref[pl.ds(start, size, stride=k)]) instead"
    )
