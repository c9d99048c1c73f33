# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# Kernel files that cannot be lowered report the user's line and exit with status 1 (no --emit: the IR).
# RUN: not minipallas-opt %s --emit=tpu 2>&1 | filecheck %s
# RUN: minipallas-opt %s 2>&1 | filecheck %s --check-prefix=NOEMIT

# CHECK: {{^[^ ]*}}errors.py:17: 'ref.transpose': transposed views of refs have no Mosaic TPU lowering
# CHECK-NEXT: fix: load the window and transpose the value

# NOEMIT: ref.transpose %0, permutation (1, 0)

import minipallas as mp

f32 = mp.ArrayType((128, 128), "float32")


def transposed(x_ref, o_ref):
    o_ref[...] = x_ref.T[...]


KERNEL = mp.pallas_call(transposed, f32)
ARGS = (f32,)
