# A run_scoped scratch buffer, in VMEM or promoted to vector registers.
# RUN: minipallas-opt %s --emit=tpu | filecheck %s
# RUN: minipallas-opt %s --emit=tpu --promote-scratch | filecheck %s --check-prefix=REG

# CHECK: "tpu.region"() ({
# CHECK-NEXT: %[[T:.*]] = memref.alloca() : memref<16x128xf32, #tpu.memory_space<vmem>>
# CHECK: tpu.vector_store %[[T]]
# CHECK: vector.load %[[T]]
# CHECK: tpu.yield

# REG-NOT: memref.alloca
# REG: vector.extract_strided_slice
# REG: tpu.concatenate
# REG-NOT: tpu.region

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu


def staged(x_ref, o_ref):
    def body(tmp_ref):
        tmp_ref[...] = x_ref[...] * 3.0
        tmp_ref[0:8, :] = tmp_ref[8:16, :] - 1.0
        o_ref[...] = tmp_ref[...] + x_ref[...]

    mp.run_scoped(body, tpu.VMEM((16, 128), jnp.float32))


f32 = mp.ArrayType((32, 128), "float32")
spec = mp.BlockSpec((16, 128), lambda i: (i, 0))
kernel = mp.pallas_call(staged, f32, grid=(2,), in_specs=[spec], out_specs=spec)
args = (f32,)
