"""Pure array ops in Mosaic: arith/math by dtype, shapes, reductions, iota, converts and dot."""

# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)

import pytest
from filecheck_util import filecheck
from tpu_util import kernel, mosaic_refuses, spec

import minipallas.numpy as jnp
from minipallas.ir.errors import PassError
from minipallas.lowering.tpu import lower_to_mosaic


def emit(body, ins, outs) -> str:
    k = kernel(body, (1,), [spec(s, d) for s, d in ins], [spec(s, d) for s, d in outs])
    return lower_to_mosaic(k).as_text(debug_info=False)


F = ((8, 128), "float32")
I = ((8, 128), "int32")
U = ((8, 128), "uint32")


@pytest.mark.parametrize(
    "dtype, ops",
    [
        ("float32", ["arith.addf", "arith.divf", "arith.remf", "arith.maximumf", "math.powf"]),
        ("int32", ["arith.addi", "arith.divsi", "arith.remsi", "arith.maxsi"]),
        # Mosaic does not legalize arith.maxui: a signed compare with the top bits flipped
        ("uint32", ["arith.addi", "arith.divui", "arith.remui", "arith.cmpi sgt", "arith.select"]),
    ],
)
def test_binary_ops_follow_the_dtype(dtype, ops):
    def body(x_ref, y_ref, o_ref):
        x, y = x_ref[...], y_ref[...]
        quotient = (x + y) / y if dtype == "float32" else (x + y) // y
        top = jnp.maximum(quotient % y, x)
        o_ref[...] = top**y if dtype == "float32" else top

    out = emit(body, [((8, 128), dtype)] * 2, [((8, 128), dtype)])
    filecheck(out, "\n".join(f"CHECK: {op}" for op in ops))


def test_pow_of_integers_is_refused_ahead_of_time():
    """Mosaic does not legalize ``math.ipowi`` and upstream's rule emits ``powf``."""

    def body(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] ** y_ref[...]

    with pytest.raises(PassError, match="pow of integers has no Mosaic TPU lowering"):
        emit(body, [I, I], [I])


def test_comparisons_float_ne_is_upstreams_one_ints_signed_or_not():
    def body(x_ref, i_ref, u_ref, o_ref):
        a = x_ref[...] != x_ref[...]
        b = i_ref[...] < 3
        c = u_ref[...] < jnp.uint32(3)
        o_ref[...] = jnp.where(a | b | c, 1.0, 0.0)

    filecheck(
        emit(body, [F, I, U], [F]),
        """
        CHECK: arith.cmpf one
        CHECK: arith.cmpi slt
        CHECK: arith.cmpi ult
        """,
    )


def test_unary_ops():
    def body(x_ref, i_ref, o_ref, j_ref):
        x = x_ref[...]
        o_ref[...] = jnp.exp(-x) + jnp.abs(x) + jnp.rsqrt(x) + jnp.tanh(x)
        j_ref[...] = ~(-i_ref[...])

    filecheck(
        emit(body, [F, I], [F, I]),
        """
        CHECK: arith.negf
        CHECK: math.exp
        CHECK: math.absf
        CHECK: math.rsqrt
        CHECK: math.tanh
        CHECK: %[[N:.*]] = arith.subi %{{.*}}, %{{.*}} : vector<8x128xi32>
        CHECK: arith.xori %[[N]], %{{.*}} : vector<8x128xi32>
        """,
    )


def test_logistic_is_upstreams_expansion():
    def body(x_ref, o_ref):
        o_ref[...] = jnp.logistic(x_ref[...])

    filecheck(
        emit(body, [F], [F]),
        """
        CHECK: arith.negf
        CHECK-NEXT: math.exp
        CHECK-NEXT: arith.addf
        CHECK-NEXT: arith.divf
        """,
    )


@pytest.mark.parametrize(
    "src, dst, checks",
    [
        ("bool", "float32", ["arith.uitofp {{.*}} : vector<8x128xi1> to vector<8x128xf32>"]),
        ("float32", "bool", ["arith.cmpf one"]),
        ("int8", "int32", ["arith.extsi"]),
        ("int32", "int8", ["arith.trunci"]),
        ("float32", "bfloat16", ["arith.truncf"]),
        ("bfloat16", "float32", ["arith.extf"]),
        ("uint32", "float32", ["arith.uitofp"]),
        ("float32", "uint32", ["arith.fptoui"]),
        ("float32", "int32", ["arith.fptosi"]),
    ],
)
def test_convert_table(src, dst, checks):
    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(dst)

    filecheck(
        emit(body, [((8, 128), src)], [((8, 128), dst)]),
        "\n".join(f"CHECK: {c}" for c in checks),
    )


@pytest.mark.parametrize("src, dst", [("bf16", "f16"), ("f16", "bf16")])
@mosaic_refuses("a v5e has no f16 vectors: 'Invalid vector type for load'")
def test_convert_between_bf16_and_f16_goes_through_f32(src, dst):
    """Same width, so no single ``truncf``/``extf`` verifies; upstream rejects the cast."""
    names = {"bf16": "bfloat16", "f16": "float16"}

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(names[dst])

    filecheck(
        emit(body, [((8, 128), names[src])], [((8, 128), names[dst])]),
        f"""
        CHECK: %[[X:.*]] = vector.load
        CHECK: %[[W:.*]] = arith.extf %[[X]] : vector<8x128x{src}> to vector<8x128xf32>
        CHECK: %[[N:.*]] = arith.truncf %[[W]] : vector<8x128xf32> to vector<8x128x{dst}>
        CHECK: tpu.vector_store %arg2[%c0, %c0], %[[N]]
        """,
    )


@pytest.mark.parametrize("src, dst", [("bfloat16", "float16"), ("float16", "bfloat16")])
def test_bf16_f16_convert_through_f32_is_xlas_on_every_value(src, dst):
    """The f32 detour rounds once: bit for bit XLA's direct convert, on all 2**16 inputs."""
    import jax
    import numpy as np

    bits = np.arange(2**16, dtype=np.uint16)
    x = jax.lax.bitcast_convert_type(bits, src)
    direct = jax.jit(lambda x: x.astype(dst))(x)
    detour = jax.jit(lambda x: x.astype("float32").astype(dst))(x)
    same = jax.lax.bitcast_convert_type(direct, "uint16") == jax.lax.bitcast_convert_type(
        detour, "uint16"
    )
    nan = np.isnan(np.asarray(direct, np.float32))
    assert bool(np.all(np.asarray(same) | (nan & np.isnan(np.asarray(detour, np.float32)))))


def test_upstream_mosaic_rejects_bf16_to_f16():
    import jax
    import jax.numpy as jjnp
    from jax.experimental import pallas as pl

    from minipallas.tools.difftest.mosaic import UpstreamError, upstream_mosaic

    def body(x_ref, o_ref):
        o_ref[...] = x_ref[...].astype(jjnp.float16)

    call = pl.pallas_call(body, jax.ShapeDtypeStruct((8, 128), jjnp.float16))
    with pytest.raises(UpstreamError, match="Unsupported cast: bfloat16 -> float16"):
        upstream_mosaic(call, jax.ShapeDtypeStruct((8, 128), jjnp.bfloat16))


def test_reductions_to_a_row_and_to_a_scalar():
    def body(x_ref, o_ref):
        x = x_ref[...]
        o_ref[...] = jnp.sum(x, axis=1, keepdims=True) + jnp.max(x)

    filecheck(
        emit(body, [F], [((8, 1), "float32")]),
        """
        CHECK-DAG: %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<8xf32>
        CHECK-DAG: %[[NINF:.*]] = arith.constant dense<0xFF800000> : vector<1xf32>
        CHECK: vector.multi_reduction <add>, %{{.*}}, %[[ZERO]] [1] : vector<8x128xf32> to vector<8xf32>
        CHECK: %[[LIFT:.*]] = vector.shape_cast %{{.*}} : vector<8x128xf32> to vector<1x8x128xf32>
        CHECK: %[[R:.*]] = vector.multi_reduction <maximumf>, %[[LIFT]], %[[NINF]] [1, 2] : vector<1x8x128xf32> to vector<1xf32>
        CHECK: vector.extract %[[R]][0] : f32 from vector<1xf32>
        """,
    )


def test_bool_reductions_go_through_floats():
    def body(x_ref, o_ref):
        o_ref[...] = jnp.where(jnp.max(x_ref[...] > 0.0), 1.0, 0.0) * jnp.ones((8, 128))

    filecheck(
        emit(body, [F], [F]),
        """
        CHECK: %[[P:.*]] = arith.cmpf ogt
        CHECK: %[[AS:.*]] = arith.select %[[P]]
        CHECK: vector.multi_reduction <maximumf>
        CHECK: %[[M:.*]] = vector.extract
        CHECK: arith.cmpf ogt, %[[M]], %{{.*}} : f32
        """,
    )


def test_iota_broadcast_transpose():
    def body(o_ref, t_ref):
        row = jnp.broadcasted_iota(jnp.int32, (128,), 0)
        o_ref[...] = jnp.broadcast_to(row[None, :], (8, 128)) + jnp.broadcasted_iota(
            jnp.int32, (8, 128), 0
        )
        t_ref[...] = o_ref[...].T

    filecheck(
        emit(body, [], [I, ((128, 8), "int32")]),
        """
        CHECK: %[[ROW:.*]] = tpu.iota {dimensions = array<i32: 1>} : vector<1x128xi32>
        CHECK: vector.broadcast %[[ROW]] : vector<1x128xi32> to vector<8x128xi32>
        CHECK: tpu.iota {dimensions = array<i32: 0>} : vector<8x128xi32>
        CHECK: tpu.transpose %{{.*}}, [1, 0] : vector<8x128xi32> -> vector<128x8xi32>
        """,
    )


def test_dot_is_tpu_matmul_into_zeros():
    def body(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

    bf = ((128, 128), "bfloat16")
    filecheck(
        emit(body, [bf, bf], [((128, 128), "float32")]),
        """
        CHECK: %[[Z:.*]] = arith.constant dense<0.000000e+00> : vector<128x128xf32>
        CHECK: tpu.matmul %{{.*}}, %{{.*}}, %[[Z]] {dimension_numbers = #tpu.dot_dimension_numbers<[1], [0], [0], [1], [0, 0, 1, 1], [], []>, transpose_lhs_hint = false} : vector<128x128xbf16>, vector<128x128xbf16>, vector<128x128xf32> -> vector<128x128xf32>
        """,
    )


def test_unsigned_dot_is_rejected_as_upstream_does():
    def body(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...])

    u = ((128, 128), "uint32")
    with pytest.raises(PassError, match="unsigned"):
        emit(body, [u, u], [u])


def test_float_constants_keep_their_bits():
    def body(o_ref):
        o_ref[...] = jnp.full((8, 128), -0.0, jnp.float32)

    filecheck(emit(body, [], [F]), "CHECK: arith.constant dense<-0.000000e+00> : vector<8x128xf32>")
