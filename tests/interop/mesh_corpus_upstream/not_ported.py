"""What was not ported, and why."""

from __future__ import annotations

from mesh_corpus_upstream.common import _UP, NOT_PORTED
from mesh_corpus_upstream.fusible_matmul_1 import _FM, _FMS
from mesh_corpus_upstream.mpmd_1 import _MPMD
from mesh_corpus_upstream.pipeline_1 import _PIPE
from mesh_corpus_upstream.random_einshape import _EINSHAPE
from mesh_corpus_upstream.state import _STATE

# --------------------------------------------------------------------------------------------
# Not ported
# --------------------------------------------------------------------------------------------

_SC = "SparseCore mesh (plsc.VectorSubcoreMesh / plsc.ScalarSubcoreMesh)"
_DIST = _UP + "tpu_pallas_distributed_test.py"

NOT_PORTED += [
    (
        f"{_STATE}:CoreMapTest.test_can_create_tensorcore_mesh",
        "no kernel: it only calls create_tensorcore_mesh",
    ),
    (
        f"{_STATE}:CoreMapTest.test_capture_scalar[core_type=SC_SCALAR_SUBCORE,...]",
        f"{_SC}; the TC parameterization is ported (SC_VECTOR_SUBCORE is skipped upstream)",
    ),
    (
        f"{_DIST}:PallasCallRemoteDMATest.test_remote_dma_regular_semaphore[_tc]",
        "pl.kernel on a TC mesh inside a 2-device shard_map: REGULAR-semaphore signals and "
        "pltpu.async_remote_copy to device_id={'x': 1 - axis_index('x')} (remote DMA across "
        "devices)",
    ),
    (f"{_DIST}:PallasCallRemoteDMATest.test_remote_dma_regular_semaphore[_sc]", _SC),
    (
        f"{_DIST}:PallasCallRemoteDMATest.test_axis_dict_with_core_multi_device[joint_axis]",
        "core_map inside a multi-device shard_map: barrier semaphore over every (device, core), "
        "make_async_remote_copy from device 0 core 0 to device 1 core 1",
    ),
    (
        f"{_DIST}:PallasCallRemoteDMATest.test_multi_device_core_local_kernel",
        "core_map inside a multi-device shard_map (the kernel itself is core-local: a REGULAR "
        "semaphore barrier over the cores, then each core copies its slice, much like "
        "CoreMapTest.test_can_signal_cores)",
    ),
    (
        f"{_UP}tpu_pallas_async_test.py:PallasCallAsyncCopyTest."
        "test_axis_dict_with_core_single_device",
        "core_map (collective_id=7) inside shard_map over a 'device' axis: the barrier "
        "semaphore is signalled with device_id={'device': i, 'core': j}, and core 0 "
        "remote-copies to core 1 (make_async_remote_copy(device_id={'core': 1})); upstream runs "
        "it on 1 device with 2 cores",
    ),
    (
        f"{_UP}tpu_pallas_interpret_distributed_test.py:InterpretDistributedTest."
        "test_that_exception_does_not_cause_dma_to_wait_forever",
        "pl.kernel on a 2-core mesh inside a multi-device shard_map, async_remote_copy to the "
        "left neighbour device (interpret mode)",
    ),
    (
        f"{_UP}tpu_pallas_interpret_distributed_test.py:InterpretDistributedTest."
        "test_shard_map_of_core_map[1,2,4]",
        "multi-device shard_map of a core_map (the kernel is InterpretTest.test_core_map's, "
        "plus num_cores * axis_index('x') of the device axis)",
    ),
    (
        f"{_MPMD}:MpmdAsyncTest.test_async_sc_tc_prefetch_vmem[SCS,SCV]",
        f"{_SC} kernel DMAs into TC VMEM/semaphore outputs (`@ tc_mesh`) that a 1-core TC "
        "pl.kernel then waits on",
    ),
    (
        f"{_MPMD}:MpmdTest.<test>[core_type=SCS|SCV] of test_mpmd_capture_scalar, "
        "test_passing_in_refs, test_passing_in_multiple_refs, test_mixed_outputs_and_refs, "
        "test_passing_in_refs_read_only, test_passing_in_refs_with_scratch, "
        "test_passing_in_duplicate_refs_errors, test_closed_over_refs, "
        "test_closed_over_refs_with_scratch",
        f"{_SC}; their core_type=TC parameterizations are ported",
    ),
    (
        f"{_MPMD}:MpmdTest.test_mismatched_core_axis_name, test_parallel_subkernels, "
        "test_parallel_subkernels_with_kernel, test_vmap, test_vmap_captured_scalar_error, "
        "test_vmap_with_refs, test_parallel_subkernels_semaphores, "
        "test_copy_with_cross_core_signaling, "
        "test_parallel_subkernels_semaphores_missing_subcore_axis, "
        "test_mpmd_map_semaphore_mesh_enforcement",
        _SC,
    ),
    (f"{_MPMD}:MpmdHijaxTest.test_parallel_subkernels_hijax", _SC),
    (
        f"{_PIPE}:PallasCallPipelineTransformedRefsTest."
        "test_transformed_refs_as_inputs_nested_bitcast / _nested_3level",
        "skipped upstream without jax_use_emit_pipeline_primitive; ported as their "
        "PallasCallPipelineTransformedRefsPrimitiveTest twins",
    ),
    (
        f"{_EINSHAPE}:EinshapeTPUKernelTest.test_hypothesis_einshape",
        "hypothesis draws the equations (up to 200 per run); the kernel is "
        "test_einshape_basic's, ported with upstream's fixed equations",
    ),
    (
        f"{_FM}:FusibleMatmulTest.<test>[dtype=bfloat16,...]",
        "only the float32 parameterization is kept: the bfloat16 one is the same kernel with "
        "bfloat16 roundings in the epilogue (ExcessPrecisionTest's bfloat16 cases are ported)",
    ),
    (
        f"{_FM}:FusibleMatmulTest.test_matmul_input_concat_output",
        "skipped upstream ('select_n does not support more than 3 elements')",
    ),
    (
        f"{_FM}:FusibleMatmulTest.test_matmul_rhs_transpose_add_transpose",
        "tanh in the input fusion: no bit-exact numpy reference (upstream compares with "
        "tolerance against XLA's tanh)",
    ),
    (
        f"{_FM}:ExcessPrecisionTest.test_matmul_bf16_activation, "
        "test_matmul_out_bf16_with_f32_activation, test_matmul_out_bf16_with_bf16_activation",
        "exp(tanh(.)) epilogue compared bitwise with XLA's own exp/tanh: no exact numpy reference",
    ),
    (
        f"{_FM} and {_FMS}: every [impl=PALLAS_CALL] parameterization",
        "pallas_call, not a mesh",
    ),
    (
        f"{_UP}tpu_sparsecore_pallas_test.py, tpu_sparsecore_pallas_distributed_test.py, "
        "tpu_sparsecore_pallas_debug_check_test.py: every test",
        _SC,
    ),
    (f"{_UP}tpu_trace_value_test.py:SparseCoreTraceValueTest.test_trace_value", _SC),
]
