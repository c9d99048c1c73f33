"""tests/pallas/tpu_fusible_matmul_test.py and tpu_fusible_matmul_with_stateful_fusions_test.py.
Part 4 of 4."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from mesh_corpus_upstream.common import _add, _params
from mesh_corpus_upstream.fusible_matmul_1 import _FM, _FMS, KernelImpl
from mesh_corpus_upstream.fusible_matmul_2 import (
    _fm_mm_ref,
    _fmt_matmul,
    _fmt_matmul_plus_iota_custom_fusion,
    _fmt_matmul_reduce_sum,
    _fmt_matmul_reduce_sum_broadcast,
    _fmt_matmul_with_activation,
    _fmt_matmul_with_bias,
    _fmt_matmul_with_dynamic_slice,
    _fmt_matmul_with_dynamic_slice_bias,
    _fmt_matmul_with_mixed_slices,
    _fmt_matmul_with_multi_slice,
    _fmt_matmul_with_multiple_dynamic_slices,
    _fmt_matmul_with_multiple_mixed_slices_and_bias,
    _fmt_matmul_with_multiple_slices,
    _fmt_matmul_with_slice,
)
from mesh_corpus_upstream.fusible_matmul_3 import (
    _fmst_forbids_unsupported_ref_access,
    _fmst_read_only_refs,
    _fmst_simple_aliased_ref,
    _fmst_writes_that_do_not_depend_on_output,
    _fmt_dot_dot_fusion,
    _fmt_excess_precision,
    _fmt_matmul_double_concat,
    _fmt_matmul_dynamic_slice_concat,
    _fmt_matmul_input_concat_contract,
    _fmt_matmul_slice_concat,
    _fmt_matmul_slice_concat_slice,
    _fmt_out_custom_vjp_bwd,
    _fmt_out_custom_vjp_bwd_ref,
    _fmt_rhs,
    _lhs_transpose,
    _lhs_transpose_add,
    _out_custom_vjp_fwd,
    _out_transpose,
    _out_transpose_mul,
    _relu,
    _rhs_transpose_after_slice,
    _rhs_transpose_before_slice,
    _rhs_transpose_major_dim,
    _rhs_transpose_no_following_ops,
    _rhs_transpose_then_add,
    _rhs_transpose_transpose,
)

# (test name, upstream line, builder(impl, cores), reference)
_FM_TESTS = [
    ("test_matmul", 325, _fmt_matmul, lambda x, y: (_fm_mm_ref(x, y),)),
    (
        "test_matmul_with_activation",
        336,
        _fmt_matmul_with_activation,
        lambda x, y: (_relu(_fm_mm_ref(x, y)),),
    ),
    (
        "test_matmul_reduce_sum",
        357,
        _fmt_matmul_reduce_sum,
        lambda x, y: (_fm_mm_ref(x, y).sum(axis=1),),
    ),
    (
        "test_matmul_reduce_sum_broadcast",
        381,
        _fmt_matmul_reduce_sum_broadcast,
        lambda x, y: (np.broadcast_to(_fm_mm_ref(x, y).sum(axis=1, keepdims=True), (512, 128)),),
    ),
    (
        "test_matmul_plus_iota_custom_fusion",
        410,
        _fmt_matmul_plus_iota_custom_fusion,
        lambda x, y: (_fm_mm_ref(x, y) + np.arange(512, dtype=np.float32),),
    ),
    (
        "test_matmul_with_bias",
        448,
        _fmt_matmul_with_bias,
        lambda x, y, b: (_relu(_fm_mm_ref(x, y) + b[None, :]),),
    ),
    ("test_matmul_with_slice", 474, _fmt_matmul_with_slice, lambda x, y: (_fm_mm_ref(x, y[1]),)),
    (
        "test_matmul_with_dynamic_slice",
        494,
        _fmt_matmul_with_dynamic_slice,
        lambda x, y, i: (_fm_mm_ref(x, y[int(i)]),),
    ),
    (
        "test_matmul_with_dynamic_slice_bias",
        514,
        _fmt_matmul_with_dynamic_slice_bias,
        lambda x, y, b, i, j: (_fm_mm_ref(x, y[int(j)]) + b[int(i)],),
    ),
    (
        "test_matmul_with_multi_slice",
        537,
        _fmt_matmul_with_multi_slice,
        lambda x, y: (_fm_mm_ref(x, y[1, 1]),),
    ),
    (
        "test_matmul_with_multiple_slices",
        557,
        _fmt_matmul_with_multiple_slices,
        lambda x, y: (_fm_mm_ref(x, y[1][1]),),
    ),
    (
        "test_matmul_with_multiple_dynamic_slices",
        577,
        _fmt_matmul_with_multiple_dynamic_slices,
        lambda x, y, i, j: (_fm_mm_ref(x, y[int(i)][int(j)]),),
    ),
    (
        "test_matmul_with_mixed_slices",
        599,
        _fmt_matmul_with_mixed_slices,
        lambda x, y, i, j: (_fm_mm_ref(x, y[2, int(i), int(j)]),),
    ),
    (
        "test_matmul_with_multiple_mixed_slices_and_bias",
        621,
        _fmt_matmul_with_multiple_mixed_slices_and_bias,
        lambda x, y, b, i, j, k: (
            _fm_mm_ref(x[int(k)][3], y[2][int(i), int(j)]) + b[int(i), int(j)],
        ),
    ),
    (
        "test_matmul_input_concat_contract",
        679,
        _fmt_matmul_input_concat_contract,
        lambda x, y1, y2: (_fm_mm_ref(x, np.concatenate([y1, y2], axis=0)),),
    ),
    (
        "test_matmul_double_concat",
        705,
        _fmt_matmul_double_concat,
        lambda x, y1, y2, y3: (
            _fm_mm_ref(x, np.concatenate([np.concatenate([y1, y2], axis=0), y3], axis=1)),
        ),
    ),
    (
        "test_matmul_slice_concat",
        734,
        _fmt_matmul_slice_concat,
        lambda x, y1, y2: (_fm_mm_ref(x, np.concatenate([y1, y2[3]], axis=0)),),
    ),
    (
        "test_matmul_slice_concat_slice",
        759,
        _fmt_matmul_slice_concat_slice,
        lambda x, y1, y2: (_fm_mm_ref(x, np.concatenate([y1, y2[3]], axis=1)[1]),),
    ),
    (
        "test_matmul_dynamic_slice_concat",
        784,
        _fmt_matmul_dynamic_slice_concat,
        lambda x, y1, y2, i, j: (_fm_mm_ref(x, np.concatenate([y1, y2[int(i)]], axis=1)[int(j)]),),
    ),
    (
        "test_matmul_rhs_transpose_no_following_ops",
        809,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_no_following_ops,
            x_shape=(128, 256),
            y_shape=(512, 256),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y.T),),
    ),
    (
        "test_matmul_rhs_transpose_then_add",
        830,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_then_add,
            x_shape=(128, 256),
            y_shape=(512, 256),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y.T + 1),),
    ),
    (
        "test_matmul_rhs_transpose_after_slice",
        851,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_after_slice,
            x_shape=(128, 256),
            y_shape=(2, 512, 256),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y[1].T),),
    ),
    (
        "test_matmul_rhs_transpose_before_slice",
        872,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_before_slice,
            x_shape=(128, 256),
            y_shape=(2, 512, 256),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y.swapaxes(-1, -2)[1]),),
    ),
    (
        "test_matmul_rhs_transpose_major_dim",
        893,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_major_dim,
            x_shape=(128, 256),
            y_shape=(2, 3, 256, 512),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y.swapaxes(0, 1)[1, 0]),),
    ),
    (
        "test_matmul_rhs_transpose_transpose",
        914,
        functools.partial(
            _fmt_rhs,
            transform=_rhs_transpose_transpose,
            x_shape=(128, 256),
            y_shape=(256, 512),
            bn=256,
        ),
        lambda x, y: (_fm_mm_ref(x, y),),
    ),
    (
        "test_matmul_lhs_transpose",
        955,
        functools.partial(
            _fmt_rhs, transform=_lhs_transpose, x_shape=(256, 512), y_shape=(256, 384), bm=256
        ),
        lambda x, y: (_fm_mm_ref(x.T, y),),
    ),
    (
        "test_matmul_lhs_transpose_add",
        976,
        functools.partial(
            _fmt_rhs, transform=_lhs_transpose_add, x_shape=(256, 512), y_shape=(256, 384), bm=256
        ),
        lambda x, y: (_fm_mm_ref(x.T + 1, y),),
    ),
    (
        "test_matmul_out_transpose",
        997,
        functools.partial(
            _fmt_rhs, transform=_out_transpose, x_shape=(256, 256), y_shape=(256, 512), bn=256
        ),
        lambda x, y: (np.ascontiguousarray(_fm_mm_ref(x, y).T),),
    ),
    (
        "test_matmul_out_custom_vjp_fwd",
        1018,
        functools.partial(
            _fmt_rhs, transform=_out_custom_vjp_fwd, x_shape=(256, 256), y_shape=(256, 512), bn=256
        ),
        lambda x, y: (_relu(_fm_mm_ref(x, y)) * _fm_mm_ref(x, y),),
    ),
    (
        "test_matmul_out_custom_vjp_bwd",
        1051,
        _fmt_out_custom_vjp_bwd,
        _fmt_out_custom_vjp_bwd_ref,
    ),
    (
        "test_matmul_out_transpose_mul",
        1097,
        functools.partial(
            _fmt_rhs, transform=_out_transpose_mul, x_shape=(256, 256), y_shape=(256, 512), bn=256
        ),
        lambda x, y: (np.ascontiguousarray(_fm_mm_ref(x, y).T) * np.float32(2),),
    ),
    (
        "test_dot_dot_fusion",
        1118,
        functools.partial(_fmt_dot_dot_fusion, transpose=False),
        lambda x, y, w: (_fm_mm_ref(_fm_mm_ref(x, y), w),),
    ),
    (
        "test_dot_transpose_dot_fusion",
        1152,
        functools.partial(_fmt_dot_dot_fusion, transpose=True),
        lambda x, y, w: (_fm_mm_ref(_fm_mm_ref(x, y.T), w),),
    ),
]

_FM_EXCESS_PRECISION_TESTS = [
    (
        "test_matmul_bf16_out",
        1225,
        functools.partial(
            _fmt_excess_precision, shape_x=(512, 256), shape_y=(256, 384), downcast=False
        ),
        lambda x, y: (_fm_mm_ref(x, y),),
    ),
    (
        "test_matmul_f32_out_simple",
        1274,
        functools.partial(
            _fmt_excess_precision,
            shape_x=(512, 256),
            shape_y=(256, 384),
            downcast=False,
            bk=256,
            bn=128,
        ),
        lambda x, y: (_fm_mm_ref(x, y),),
    ),
    (
        "test_matmul_f32_out_fused_downcast",
        1303,
        functools.partial(
            _fmt_excess_precision,
            shape_x=(2048, 2048),
            shape_y=(2048, 2048),
            downcast=True,
            bm=512,
            bk=256,
            bn=1024,
        ),
        lambda x, y: (_fm_mm_ref(x, y).astype(jnp.bfloat16),),
    ),
]


def _cases_fusible_matmul():
    for cores in (2, 1):
        for impl in (KernelImpl.CORE_MAP, KernelImpl.KERNEL):
            for test, line, build, ref in _FM_TESTS:
                _add(
                    f"FusibleMatmulTest.{test}"
                    + _params(dtype="float32", impl=impl.name, cores=cores),
                    cores,
                    functools.partial(build, impl, cores),
                    ref,
                    what="fuser.fuse of a fusible matmul whose kernel is an emit_pipeline "
                    f"(core_axis_name='core') in a {impl.name.lower()}; {_FM}:{line}",
                )
            for test, line, build, ref in _FM_EXCESS_PRECISION_TESTS:
                _add(
                    f"ExcessPrecisionTest.{test}" + _params(impl=impl.name, cores=cores),
                    cores,
                    functools.partial(build, impl, cores),
                    ref,
                    what="bfloat16 operands, float32 accumulation (upstream compares bitwise "
                    f"with an XLA blocked dot); {_FM}:{line}",
                )
            for fuse in (True, False):
                p = _params(dtype="float32", impl=impl.name, cores=cores, fuse=fuse)
                _add(
                    f"FusibleMatmulTest.test_matmul_with_bias_and_read_only_refs{p}",
                    cores,
                    functools.partial(_fmst_read_only_refs, impl, cores, fuse),
                    lambda x, y, a, b: (_relu(_fm_mm_ref(x + a, y + b * np.float32(0.5)) + b),),
                    what="input fusions read refs closed over by the fused function; upstream "
                    "runs fuse=True (the whole function fused) and fuse=False (only the "
                    f"matmul) and asserts they agree; {_FMS}:404",
                )
                _add(
                    f"FusibleMatmulTest.test_matmul_with_bias_and_simple_aliased_ref{p}",
                    cores,
                    functools.partial(_fmst_simple_aliased_ref, impl, cores, fuse),
                    lambda x, y, b: (_relu(_fm_mm_ref(x, y) + b),),
                    what="the output fusion writes relu(x @ y + b) into the ref b was read from "
                    f"(aliased output); {_FMS}:445",
                )
            p = _params(impl=impl.name, cores=cores)
            _add(
                f"FusibleMatmulTest.test_matmul_forbids_unsupported_ref_access{p}",
                cores,
                functools.partial(_fmst_forbids_unsupported_ref_access, impl, cores),
                None,
                expect="raises_at_trace:Exception:fusible_matmul does not support",
                what="an input fusion reading a ref the output fusion writes is rejected; "
                f"{_FMS}:485",
            )
            _add(
                f"FusibleMatmulTest.test_matmul_with_writes_that_do_not_depend_on_output{p}",
                cores,
                functools.partial(_fmst_writes_that_do_not_depend_on_output, impl, cores),
                None,
                expect="raises_at_trace:Exception:must depend on an output",
                what=f"a ref write in the fusion that ignores the matmul is rejected; {_FMS}:513",
            )
