# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
# Row softmax over 8x256 blocks: the row max and sum are tt.reduce with their combiner in the
# region, exp is libdevice's __nv_expf.
# RUN: minipallas-opt %s --emit=gpu | filecheck %s

# CHECK: "tt.reduce"(%{{.*}}) <{axis = 1 : i32}>
# CHECK: arith.maximumf
# CHECK: tt.reduce.return
# CHECK: symbol = "__nv_expf"
# CHECK: "tt.reduce"
# CHECK: arith.addf
# CHECK: arith.divf

import minipallas as mp
import minipallas.numpy as jnp


def softmax(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - x.max(axis=1, keepdims=True))
    o_ref[...] = e / e.sum(axis=1, keepdims=True)


f32 = mp.ArrayType((64, 256), "float32")
spec = mp.BlockSpec((8, 256), lambda i: (i, 0))
KERNEL = mp.pallas_call(softmax, f32, grid=(8,), in_specs=[spec], out_specs=spec)
ARGS = (f32,)
