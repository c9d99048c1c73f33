"""tests/pallas/tpu_pallas_mpmd_test.py: the TensorCore cases (their meshes have 1 core).
Part 2 of 2."""

from __future__ import annotations

import numpy as np

from mesh_corpus_upstream.common import _add, _identity, _params
from mesh_corpus_upstream.mpmd_1 import (
    _MPMD,
    _mpmd_capture_multiple_scalars,
    _mpmd_capture_scalar,
    _mpmd_capture_scalar_and_ref,
    _mpmd_capture_scalar_indexing,
    _mpmd_closed_over_hijax_refs,
    _mpmd_closed_over_refs,
    _mpmd_closed_over_refs_with_scratch,
    _mpmd_hijax_input_output_aliasing,
    _mpmd_map_physicalize,
    _mpmd_mixed_outputs_and_refs,
    _mpmd_mixed_outputs_and_refs_ref,
    _mpmd_pass_weird_tuple_into_mpmd_map,
    _mpmd_passing_in_duplicate_refs_errors,
    _mpmd_passing_in_multiple_refs,
    _mpmd_passing_in_refs,
    _mpmd_passing_in_refs_read_only,
    _mpmd_passing_in_refs_with_scratch,
    _mpmd_remat_with_checkpoint,
)


def _cases_mpmd():
    cls = "MpmdTest"
    tc = _params(core_type="TC")
    one = [
        (
            f"{cls}.test_mpmd_capture_scalar{tc}",
            _mpmd_capture_scalar,
            lambda x, i: (x[int(i)][None],),
            "pl.kernel body indexes x_ref with a closed-over traced scalar (upstream loops i over "
            f"0..3; kept i=2); {_MPMD}:167",
        ),
        (
            f"{cls}.test_mpmd_capture_multiple_scalars",
            _mpmd_capture_multiple_scalars,
            lambda x, i, j: (x[int(i) + int(j)][None],),
            f"two closed-over scalars, f(x, 1, 2) copies x[3]; {_MPMD}:186",
        ),
        (
            f"{cls}.test_mpmd_capture_scalar_indexing",
            _mpmd_capture_scalar_indexing,
            lambda x, i: (x[int(i)][None],),
            f"as test_mpmd_capture_scalar without jit, f(x, 1); {_MPMD}:204",
        ),
        (
            f"{cls}.test_mpmd_capture_scalar_and_ref",
            _mpmd_capture_scalar_and_ref,
            lambda x, i: (x[int(i)][None],),
            "a closed-over scalar and a closed-over ANY ref (copied to a jax.empty_ref VMEM "
            f"buffer inside the body); {_MPMD}:221",
        ),
        (
            f"{cls}.test_passing_in_refs{tc}",
            _mpmd_passing_in_refs,
            _identity,
            "pl.kernel(body=pltpu.sync_copy) called on two refs (no outputs) copies x; "
            f"{_MPMD}:355",
        ),
        (
            f"{cls}.test_passing_in_multiple_refs{tc}",
            _mpmd_passing_in_multiple_refs,
            lambda x, y: (y, x),
            f"two refs passed in swap contents through SMEM scratch; {_MPMD}:369",
        ),
        (
            f"{cls}.test_mixed_outputs_and_refs{tc}",
            _mpmd_mixed_outputs_and_refs,
            _mpmd_mixed_outputs_and_refs_ref,
            "an out_type output plus a ref argument the body mutates (row 0, first num_lanes "
            "lanes +1; upstream reads num_lanes from the SparseCore info, kept 16); "
            f"{_MPMD}:400",
        ),
        (
            f"{cls}.test_passing_in_refs_read_only{tc}",
            _mpmd_passing_in_refs_read_only,
            _identity,
            f"a ref passed to a body that ignores it is unchanged; {_MPMD}:428",
        ),
        (
            f"{cls}.test_passing_in_refs_with_scratch{tc}",
            _mpmd_passing_in_refs_with_scratch,
            _identity,
            f"refs in, SMEM scratch, copy x -> scratch -> o; {_MPMD}:445",
        ),
        (
            f"{cls}.test_closed_over_refs{tc}",
            _mpmd_closed_over_refs,
            _identity,
            f"a body with no arguments copies between closed-over refs; {_MPMD}:484",
        ),
        (
            f"{cls}.test_closed_over_refs_with_scratch{tc}",
            _mpmd_closed_over_refs_with_scratch,
            _identity,
            f"closed-over refs and a VMEM scratch argument; {_MPMD}:503",
        ),
        (
            f"{cls}.test_remat_with_checkpoint",
            _mpmd_remat_with_checkpoint,
            lambda x: (np.full_like(x, 2.0),),
            "jax.grad through jax.remat of a custom_vjp around pl.kernel(sync_copy) of x * 2; "
            f"{_MPMD}:571",
        ),
        (
            "MpmdHijaxTest.test_pass_weird_tuple_into_mpmd_map",
            _mpmd_pass_weird_tuple_into_mpmd_map,
            _identity,
            "a hijax WeirdTuple (two arrays) as pl.kernel input, output and VMEM scratch type "
            f"(f takes and returns its two arrays); {_MPMD}:915",
        ),
        (
            "MpmdHijaxTest.test_mpmd_map_hijax_input_output_aliasing",
            _mpmd_hijax_input_output_aliasing,
            lambda x0, x1: (x0 + 1, x1),
            "a WeirdTuple ref passed to pl.kernel, unpacked, x0 + 1, packed, written back; "
            f"{_MPMD}:941",
        ),
        (
            "MpmdHijaxTest.test_closed_over_hijax_refs",
            _mpmd_closed_over_hijax_refs,
            _identity,
            f"closed-over WeirdTuple refs copied through WeirdTuple VMEM scratch; {_MPMD}:1004",
        ),
        (
            "MpmdPhysicalizeTest.test_mpmd_map_physicalize",
            _mpmd_map_physicalize,
            lambda x, y: (x + y,),
            "fusible_dtype.physicalize of a fuser.fusible whose pl.kernel body packs/unpacks a "
            f"custom FusionDType; {_MPMD}:1047",
        ),
    ]
    for name, build, ref, what in one:
        _add(name, 1, build, ref, what=what)
    _add(
        f"{cls}.test_passing_in_duplicate_refs_errors{tc}",
        1,
        _mpmd_passing_in_duplicate_refs_errors,
        None,
        expect="raises_at_trace:NotImplementedError:"
        "Cannot pass the same ref into a mpmd map multiple times",
        what=f"the same ref passed twice to pl.kernel is rejected; {_MPMD}:468",
    )
