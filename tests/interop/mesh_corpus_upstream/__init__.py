"""Upstream JAX's own TensorCore-mesh kernel tests (``pl.kernel`` / ``pl.core_map`` over
``pltpu.create_tensorcore_mesh``), ported into ``MeshCase`` entries.

Ported from jax-ml/jax at tag ``jax-v0.10.2`` (commit
990e6a0b84138346e6a38785412f36356e0e5dc3), the version installed here, from:

- tests/pallas/tpu_pallas_state_test.py (CoreMapTest)
- tests/pallas/tpu_pallas_interpret_test.py (InterpretTest: the core_map tests, run there on CPU
  in TPU interpret mode)
- tests/pallas/tpu_pallas_memory_space_test.py (TPUCoreMapMemorySpaceTest)
- tests/pallas/tpu_pallas_mpmd_test.py (the TensorCore parameterizations of MpmdTest,
  MpmdHijaxTest, MpmdPhysicalizeTest)
- tests/pallas/tpu_pallas_pipeline_test.py (emit_pipeline inside pl.kernel / core_map, and the
  ``...PrimitiveTest`` subclasses that rerun them with ``jax_use_emit_pipeline_primitive``)
- tests/pallas/tpu_pallas_random_test.py (PRNGTest.test_key_in_core_map)
- tests/pallas/einshape_test.py (EinshapeTPUKernelTest.test_einshape_basic)
- tests/pallas/tpu_fusible_matmul_test.py and
  tests/pallas/tpu_fusible_matmul_with_stateful_fusions_test.py (the CORE_MAP and KERNEL
  implementations of the fused matmul)

Each ``what`` names the upstream file and line of the test. Kernel bodies are upstream's;
what changed:

- ``num_cores``: where upstream reads the device's core count (``create_tensorcore_mesh(name)``,
  ``get_tpu_info().num_cores``) the case fixes it (``cores``), with a 2-core and a 1-core
  variant; where upstream fixes it, the case keeps upstream's number.
- data: ``jax.random`` inputs became deterministic integer-valued numpy arrays, small enough
  that every product and sum is exact in float32 and every matmul operand exact in bfloat16,
  so the references are exact whatever the matmul precision.
- a test that loops over scalar arguments keeps one of them (the ``what`` says which).
- every ``f`` runs its body under ``assume_chip("TPU_V5E")``: upstream asks ``get_tpu_info()`` while
  tracing (``emit_pipeline``'s tiling inference), which raises on a CPU; the context manager
  registers a v5e's info for the local device kind, the way minipallas.tools.difftest.mosaic does,
  and does nothing on a TPU.

``expect`` is one of:

- ``"ok"``: ``f(*args)`` returns ``reference(*args)`` (a tuple), bit for bit unless ``what`` says
  otherwise.
- ``"raises_at_trace:<Exception>:<regex>"``: tracing ``f`` raises (checked below).
- ``"raises_later:<Exception>:<regex>"``: ``f`` traces; upstream's error comes when it lowers,
  compiles or runs (Mosaic, or TPU interpret mode).
- ``"lower_only"``: upstream only lowers the kernel and checks the HLO text; it asserts no
  values.

Tests that need more than TensorCore meshes are listed in ``NOT_PORTED``.

Running it: ``python -m mesh_corpus_upstream`` (from tests/interop) builds and traces every case
(``jax.make_jaxpr``) on any machine, checking each reference's shapes and dtypes and each
``raises_at_trace`` error. ``--run [REGEX]`` also runs the cases on the default device (a TPU;
cases with more cores than the chip has are only traced), ``--interpret [REGEX]`` under
``pltpu.force_tpu_interpret_mode()`` on a CPU. Seen so far: on one TPU v5e chip (1 core) every
1-core case returns its reference bit for bit, except the 1-core InterpretTest cases, which set
``InterpretParams`` and run on the CPU backend only (on a TPU backend they fail to lower:
"Lowering rule for `mpmd_map` needs to set `tokens_out`"); in interpret mode on a CPU every
2-core case that interpret mode can run returns its reference. Interpret mode cannot run: the
``...PrimitiveTest`` twins (the emit_pipeline primitive), refs in SMEM/VMEM made outside the
kernel, ``jax.empty_ref`` inside a kernel body ("No state discharge rule ... io_callback"),
``semaphore_signal(device_id={'x': i})`` between cores, a traced scalar closed over by a jitted
``pl.kernel`` (it reads a buffer id for the value), PRNG keys in SMEM, and Mosaic's integer
poison (it has its own uninitialized-memory fill).

Importing this module registers ``WeirdTuple`` as a hijax type (as tpu_pallas_mpmd_test does).
"""

from __future__ import annotations

from mesh_corpus_upstream import not_ported  # noqa: F401  (fills NOT_PORTED)
from mesh_corpus_upstream.common import CASES, NOT_PORTED, MeshCase
from mesh_corpus_upstream.fusible_matmul_4 import _cases_fusible_matmul
from mesh_corpus_upstream.interpret import _cases_interpret
from mesh_corpus_upstream.memory_space import _cases_memory_space
from mesh_corpus_upstream.mpmd_2 import _cases_mpmd
from mesh_corpus_upstream.pipeline_3 import _cases_pipeline
from mesh_corpus_upstream.random_einshape import _cases_random_einshape
from mesh_corpus_upstream.state import _cases_state

for _cases in (
    _cases_state,
    _cases_interpret,
    _cases_memory_space,
    _cases_mpmd,
    _cases_random_einshape,
    _cases_pipeline,
    _cases_fusible_matmul,
):
    _cases()

__all__ = ["CASES", "NOT_PORTED", "MeshCase"]
