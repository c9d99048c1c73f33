"""Chapter 11: Mosaic and Triton: one kernel emitted for a TPU and for a GPU.

The CPU program of chapter 7 discharged the whole kernel. A TPU or GPU kernel keeps it stateful:
the refs are the chip's own memory, and the grid is the chip's to run. So the ``tpu`` target's
pipeline discharges nothing (only the collective-axes check runs) and its emitter
(``lowering/tpu/``) writes Mosaic's dialect: one ``func`` whose ``window_params`` hold each
block spec (shape and index map), whose ``iteration_bounds`` are the grid and whose
``dimension_semantics`` say which axes may run in parallel (chapter 9); each ``get``/``swap``
becomes a ``vector.load``/``tpu.vector_store`` of VMEM. The ``gpu`` target discharges the scratch
and keeps the operands as pointers: Triton's ``tt.get_program_id`` gives the grid point, and
``tt.load``/``tt.store`` move whole blocks. Scratch in registers is the same choice on the
TPU: ``lower(..., target="tpu", promote_scratch=True)`` (``minipallas-opt --promote-scratch``).
Every Mosaic module the tests emit is compiled by libtpu (chapter 12).
"""

import minipallas as mp
import minipallas.numpy as jnp


def scaled_add(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + y_ref[...]


F32 = mp.ArrayType((64, 256), jnp.float32)
SPEC = mp.BlockSpec((8, 128), lambda i, j: (i, j))
KERNEL = mp.pallas_call(scaled_add, F32, grid=(8, 2), in_specs=[SPEC, SPEC], out_specs=SPEC)
ARGS = (F32, F32)  # a kernel file: minipallas-opt examples/ch11_mosaic_and_triton.py --emit=tpu


def main() -> None:
    mosaic = KERNEL.lower(F32, F32, target="tpu").as_text(debug_info=False)
    print("--- Mosaic TPU (--emit=tpu) ---")
    print(mosaic)
    assert "window_params" in mosaic and "tpu.vector_store" in mosaic

    triton = KERNEL.lower(F32, F32, target="gpu").as_text(debug_info=False)
    print("--- Triton GPU (--emit=gpu) ---")
    print(triton)
    assert "tt.get_program_id" in triton and "tt.store" in triton


if __name__ == "__main__":
    main()
