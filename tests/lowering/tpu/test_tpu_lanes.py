# ruff: noqa: E501  (FileCheck patterns quote whole MLIR lines)
"""Upstream's TPU vector and view operations in Mosaic, as upstream emits them: ``pltpu.roll``
(``tpu.dynamic_rotate``), ``jnp.diagonal``'s ``platform_index``, ``pltpu.bitcast``
(``tpu.bitcast``) and ``ref.bitcast`` views of another width (``tpu.memref_bitcast``). Each kernel is
written against upstream Pallas, imported with ``kernel_from_jaxpr`` and emitted by minipallas;
the module must agree with upstream's (``difftest.mosaic.compare``) and compile with libtpu
(``tests/mosaic_compile.py``). The kernels marked for the chip are in
``minipallas/tools/corpora/tpu_cases.py``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tpu_util  # noqa: F401  (puts tests/kernels on the path)
from filecheck_util import filecheck
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from tpu_util import lower_case, upstream_module

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.interop import from_jaxpr
from minipallas.interop.importer.rules.kernel_call import kernel_from_jaxpr
from minipallas.ir.errors import MiniPallasError
from minipallas.kernels.pallas_call import lower_for_target
from minipallas.lowering.tpu.aot import libtpu_available
from minipallas.tools.corpora.tpu_cases import TPU_CASES
from minipallas.tools.difftest.mosaic import compare, upstream_mosaic

SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)
CASES = {case.name: case for case in TPU_CASES}


def _imported(call, *args):
    """Upstream's ``call`` imported and emitted by minipallas, and upstream's own module."""
    kernel = kernel_from_jaxpr(jax.make_jaxpr(call)(*args), memory_space=mp.tpu.VMEM)
    return lower_for_target(kernel, "tpu").module, upstream_mosaic(call, *args)


def _mosaic_refusal(kernel, x, out_dtype, match):
    """The error minipallas's Mosaic emission gives for upstream's one-block ``kernel``."""
    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((8, 128), out_dtype))
    kernel_ir = kernel_from_jaxpr(jax.make_jaxpr(call)(x), memory_space=mp.tpu.VMEM)
    with pytest.raises(MiniPallasError, match=match) as info:
        lower_for_target(kernel_ir, "tpu")
    return str(info.value)


def test_the_rolled_case_is_upstreams_module():
    case = CASES["rolled"]
    ours = lower_case(case)
    diff = compare(ours.module, upstream_module(case))
    assert diff.same_text, diff
    filecheck(
        ours.as_text(debug_info=False),
        """
        CHECK: tpu.dynamic_rotate %{{.*}} by %c3_i32 dim 1 : vector<8x256xf32>, i32 -> vector<8x256xf32>
        CHECK: tpu.dynamic_rotate %{{.*}} by %{{.*}} dim 0 : vector<8x256xf32>
        CHECK: tpu.dynamic_rotate %{{.*}} by %c1_i32 dim 1 {stride = 1 : si32, stride_dimension = 0 : si32}
        CHECK-NOT: arith.remsi
        """,
    )


def _shifted_by_a_scalar(s_ref, x_ref, o_ref):
    o_ref[...] = pltpu.roll(x_ref[...], s_ref[0], 1, stride=3, stride_axis=0)


CALL = pl.pallas_call(
    _shifted_by_a_scalar,
    jax.ShapeDtypeStruct((8, 128), jnp.float32),
    in_specs=[SMEM, pl.BlockSpec()],
)


def test_a_shift_of_unknown_range_is_reduced_modulo_the_size_first():
    """Upstream passes a shift it cannot bound to the chip as is; minipallas means
    ``jnp.roll``'s modulo (upstream's interpret mode) for every shift, so it reduces it."""
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    s = np.array([5], np.int32)
    ours, theirs = _imported(CALL, s, x)
    diff = compare(ours, theirs)
    # the two constants: 0 and 128
    assert diff.ops == {
        "arith.addi": 1,
        "arith.cmpi": 1,
        "arith.constant": 2,
        "arith.remsi": 1,
        "arith.select": 1,
    }
    filecheck(
        str(ours),
        """
        CHECK: %[[S:.*]] = memref.load %arg0[%c0] : memref<1xi32, #tpu.memory_space<smem>>
        CHECK: %[[R:.*]] = arith.remsi %[[S]], %c128_i32 : i32
        CHECK: %[[N:.*]] = arith.cmpi slt, %[[R]], %c0_i32 : i32
        CHECK: %[[A:.*]] = arith.addi %[[R]], %c128_i32 : i32
        CHECK: %[[M:.*]] = arith.select %[[N]], %[[A]], %[[R]] : i32
        CHECK: tpu.dynamic_rotate %{{.*}} by %[[M]] dim 1 {stride = 3 : si32, stride_dimension = 0 : si32}
        """,
    )


@pytest.mark.parametrize("shift", [5, -3, 131, -300, 2**31 - 2])
def test_any_shift_rolls_as_upstreams_interpret_mode(shift):
    x = np.arange(8 * 128, dtype=np.float32).reshape(8, 128)
    s = np.array([shift], np.int32)
    want = np.asarray(jax.jit(pl.pallas_call(
        _shifted_by_a_scalar, jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[SMEM, pl.BlockSpec()], interpret=True))(s, x))  # fmt: skip

    def ours(s_ref, x_ref, o_ref):
        o_ref[...] = mp.tpu.roll(x_ref[...], s_ref[0], 1, stride=3, stride_axis=0)

    got = mp.pallas_call(ours, mp.ArrayType((8, 128), "float32"))(s, x)
    assert np.asarray(got).tobytes() == want.tobytes()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda x: mp.tpu.roll(x, -1, 0), "shift -1 is negative"),
        (lambda x: mp.tpu.roll(x, 1, 2), "axis 2 is not a dim"),
        (lambda x: mp.tpu.roll(x, 1, 0, stride=1), "stride and stride_axis must be both"),
        (lambda x: mp.tpu.roll(x, 1, 0, stride=1, stride_axis=0), "stride 1 on stride_axis 0"),
        (lambda x: mp.tpu.roll(x, 1.5, 0), "shift must be an integer scalar"),
    ],
)
def test_bad_rolls_are_refused_at_the_users_line_with_a_fix(call, message):
    def kernel(x_ref, o_ref):
        o_ref[...] = call(x_ref[...])

    with pytest.raises(MiniPallasError, match=message) as info:
        mp.pallas_call(kernel, mp.ArrayType((8, 128), "float32"))(np.zeros((8, 128), np.float32))
    assert "test_tpu_lanes.py" in str(info.value)


def _diagonal(x_ref, o_ref):
    o_ref[...] = jnp.diagonal(x_ref[...])[None, :] * jnp.ones((8, 1), jnp.float32)


def test_diagonal_lowers_its_mosaic_branch_alone_as_upstream_does():
    """``platform_index`` is Mosaic's branch, a constant the range analysis knows, so the
    ``cond`` lowers that branch alone: the gather of the default branch never reaches Mosaic."""
    call = pl.pallas_call(_diagonal, jax.ShapeDtypeStruct((8, 128), jnp.float32))
    x = np.zeros((128, 128), np.float32)
    ours, theirs = _imported(call, x)
    assert compare(ours, theirs).same_text
    filecheck(
        str(ours),
        """
        CHECK: arith.cmpi eq
        CHECK: arith.mulf
        CHECK: vector.multi_reduction <add>, %{{.*}}, %{{.*}} [0] : vector<128x128xf32> to vector<128xf32>
        CHECK-NOT: scf.if
        """,
    )


def test_a_platform_index_without_a_mosaic_or_default_branch_is_refused_with_a_fix():
    def kernel(x_ref, o_ref):
        o_ref[...] = jax.lax.platform_dependent(x_ref[...], cpu=lambda x: x, tpu=lambda x: -x)

    x = np.zeros((8, 128), np.float32)
    error = _mosaic_refusal(kernel, x, jnp.float32, "no mosaic or default branch")
    assert "mosaic= or default=" in error and "test_tpu_lanes.py" in error


def test_the_repacked_case_is_upstreams_module():
    """``pltpu.bitcast`` is ``tpu.bitcast`` to the type with the second-minor dim scaled."""
    case = CASES["repacked"]
    ours = lower_case(case)
    assert compare(ours.module, upstream_module(case)).same_text
    filecheck(
        ours.as_text(debug_info=False),
        """
        CHECK: tpu.bitcast %{{.*}} : vector<8x128xi32> -> vector<16x128xi16>
        CHECK: tpu.bitcast %{{.*}} : vector<8x128xi32> -> vector<16x128xbf16>
        CHECK: tpu.bitcast %{{.*}} : vector<8x128xi32> -> vector<32x128xi8>
        CHECK: tpu.bitcast %{{.*}} : vector<32x128xi8> -> vector<8x128xi32>
        """,
    )


def test_a_bitcast_convert_type_that_changes_width_is_refused_for_mosaic_with_a_fix():
    def kernel(x_ref, o_ref):
        o_ref[...] = jax.lax.bitcast_convert_type(x_ref[...], jnp.int16)[..., 0]

    x = np.zeros((8, 128), np.int32)
    error = _mosaic_refusal(kernel, x, jnp.int16, "Changing bitwidths not supported")
    assert "minipallas.tpu.bitcast" in error


@pytest.mark.parametrize(
    ("shape", "source", "dtype", "message"),
    [
        ((128,), "int32", "int16", "needs at least 2 dims"),
        ((7, 128), "int16", "int32", "packs 2 rows into one, but the second-minor dim .* is 7"),
        ((8, 128), "int32", "bool", "cannot bitcast int32 to bool"),
    ],
)
def test_a_bitcast_the_width_ratio_cannot_pack_is_refused_at_the_users_line(
    shape, source, dtype, message
):
    def kernel(x_ref, o_ref):
        o_ref[...] = mp.tpu.bitcast(x_ref[...], dtype)

    with pytest.raises(MiniPallasError, match=message) as info:
        mp.pallas_call(kernel, mp.ArrayType(shape, source))(np.zeros(shape, source))
    assert "test_tpu_lanes.py" in str(info.value)


def test_the_bitcast_views_case_is_upstreams_module():
    """A ``ref.bitcast`` of another width is ``tpu.memref_bitcast`` to the memref with the
    second-minor dim scaled, after the window's ``tpu.memref_slice``."""
    case = CASES["bitcast_views"]
    ours = lower_case(case)
    assert compare(ours.module, upstream_module(case)).same_text
    filecheck(
        ours.as_text(debug_info=False),
        """
        CHECK: tpu.memref_bitcast %arg1 : memref<16x128xi32, #tpu.memory_space<vmem>> -> memref<32x128xi16, #tpu.memory_space<vmem>>
        CHECK: %[[W:.*]] = tpu.memref_slice %arg1[%c8_i32, %c0_i32] : memref<16x128xi32, #tpu.memory_space<vmem>> -> memref<8x128xi32, #tpu.memory_space<vmem>>
        CHECK: tpu.memref_bitcast %[[W]] : memref<8x128xi32, #tpu.memory_space<vmem>> -> memref<16x128xbf16, #tpu.memory_space<vmem>>
        """,
    )


def _write_through_views(x_ref, o_ref):
    """Writes through bitcast views of the output, chained with a window and a reshape."""
    o_ref.bitcast(jnp.int16)[...] = x_ref[...]
    o_ref.at[8:16].bitcast(jnp.int8)[0:16] = x_ref[0:16].astype(jnp.int8)
    o_ref.reshape(2, 8, 128).at[1].bitcast(jnp.int16)[8:16] = x_ref[16:24] + 1


def test_writes_through_bitcast_views_are_upstreams_module():
    call = pl.pallas_call(_write_through_views, jax.ShapeDtypeStruct((16, 128), jnp.int32))
    ours, theirs = _imported(call, np.zeros((32, 128), np.int16))
    assert compare(ours, theirs).same_text


def test_writes_through_bitcast_views_land_where_the_chip_puts_them():
    """Upstream's interpret mode cannot write through a bitcast view; minipallas's meaning is
    the TPU's packing (``repack``), checked here against numpy."""
    x = np.arange(32 * 128, dtype=np.int16).reshape(32, 128)

    def kernel(x_ref, o_ref):
        o_ref[...] = jnp.zeros((16, 128), jnp.int32)
        _write_through_views(x_ref, o_ref)

    call = pl.pallas_call(kernel, jax.ShapeDtypeStruct((16, 128), jnp.int32))
    fn = from_jaxpr(jax.make_jaxpr(call)(x))
    (got,) = mp.compile(fn)(x)
    want = np.zeros((16, 128), np.int32)
    halves = want.view(np.int16).reshape(16, 128, 2)
    halves[...] = np.moveaxis(x.reshape(16, 2, 128), 1, 2)
    quarters = want[8:16].view(np.int8).reshape(8, 128, 4)
    quarters[:4] = np.moveaxis(x[0:16].astype(np.int8).reshape(4, 4, 128), 1, 2)
    halves = want[8:16].view(np.int16).reshape(8, 128, 2)
    halves[4:8] = np.moveaxis((x[16:24] + 1).reshape(4, 2, 128), 1, 2)
    assert np.asarray(got).tobytes() == want.tobytes()
    (interpreted,) = mp.interpret(fn, x)
    assert np.asarray(interpreted).tobytes() == want.tobytes()


def test_a_roll_strided_along_the_minor_most_dim_is_refused_ahead_of_time():
    """libtpu refuses it ('stride dimension is the minor most'); minipallas says so first."""

    def kernel(x_ref, o_ref):
        o_ref[...] = pltpu.roll(x_ref[...], 1, 0, stride=1, stride_axis=1)

    x = np.zeros((8, 128), np.float32)
    error = _mosaic_refusal(kernel, x, jnp.float32, "stride dimension is the minor most")
    assert "stride along another dim" in error


def test_initialization_is_tracked_through_widening_and_narrowing_views():
    """Under ``uninitialized="error"`` a write through a bitcast view marks the pieces it
    wrote, and a read through one needs every piece written."""

    def body(o_ref, rows):
        def scoped(s_ref):
            s_ref.bitcast(jnp.int32)[0:rows] = mnp.full((rows, 128), 7, mnp.int32)
            o_ref[...] = s_ref.bitcast(jnp.int8)[0:16]

        mp.run_scoped(scoped, mp.tpu.VMEM((16, 128), "int16"))

    for rows, ok in ((8, True), (3, False)):
        fn = mp.trace(lambda o, rows=rows: body(o, rows), mp.RefType((16, 128), "int8"))
        out = np.zeros((16, 128), np.int8)
        if ok:  # int8 row 4i + k is byte k of int32 row i (7: its low byte)
            mp.interpret(fn, out, uninitialized="error")
            assert out[:, 0].tolist() == [7, 0, 0, 0] * 4 and (out == out[:, :1]).all()
        else:
            with pytest.raises(MiniPallasError, match="never written"):
                mp.interpret(fn, out, uninitialized="error")


DTYPES = ("int32", "uint32", "float32", "int16", "bfloat16", "int8", "uint8")


@pytest.mark.parametrize("form", ["ref.bitcast", "pltpu.bitcast"])
@pytest.mark.parametrize(
    ("source", "target"), [(a, b) for a in DTYPES for b in DTYPES if a != b], ids="->".join
)
def test_every_dtype_pair_bitcasts_as_upstream_in_every_path(source, target, form):
    """Upstream's own test of both forms (a block of ``32 / bits`` packed rows per row): the
    interpreter and the compiled program give upstream's interpret-mode bits, and the Mosaic
    module is upstream's (libtpu compiles it after the test)."""

    def kernel(x_ref, y_ref):
        if form == "ref.bitcast":
            y_ref[...] = x_ref.bitcast(target)[...]
        else:
            y_ref[...] = pltpu.bitcast(x_ref[...], target)

    rows = {d: 32 // (8 * jnp.dtype(d).itemsize) * 8 for d in DTYPES}
    out = jax.ShapeDtypeStruct((rows[target], 256), target)
    size = rows[source] * 256 * jnp.dtype(source).itemsize
    bits = np.random.default_rng(size).integers(0, 256, size, np.uint8)
    x = bits.view(jnp.dtype(source)).reshape(rows[source], 256)
    want = np.asarray(jax.jit(pl.pallas_call(kernel, out, interpret=True))(x))
    call = pl.pallas_call(kernel, out)
    fn = from_jaxpr(jax.make_jaxpr(call)(x))
    for got in (mp.compile(fn)(x)[0], mp.interpret(fn, x)[0]):
        assert np.asarray(got).tobytes() == want.tobytes()
    ours, theirs = _imported(call, x)
    assert compare(ours, theirs).same_text


def test_packed_rolls_across_sublanes_run_on_32_bits_where_upstreams_fail_to_compile():
    """Mosaic refuses a bf16 or int8 rotation across sublanes or strided ("unsupported packed
    type rotation"), upstream's too; minipallas rotates the bits zero-extended to 32 and
    truncates back, which libtpu compiles (the elements move, their bits do not change)."""
    from minipallas.lowering.runtime import libtpu

    case = CASES["rolled_packed"]
    text = lower_case(case).as_text(debug_info=False)
    filecheck(
        text,
        """
        CHECK: %[[B:.*]] = tpu.bitcast %{{.*}} : vector<16x256xbf16> -> vector<16x256xi16>
        CHECK: %[[W:.*]] = arith.extui %[[B]] : vector<16x256xi16> to vector<16x256xi32>
        CHECK: %[[R:.*]] = tpu.dynamic_rotate %[[W]] by %c5_i32 dim 0 : vector<16x256xi32>
        CHECK: %[[T:.*]] = arith.trunci %[[R]] : vector<16x256xi32> to vector<16x256xi16>
        CHECK: tpu.bitcast %[[T]] : vector<16x256xi16> -> vector<16x256xbf16>
        CHECK: tpu.dynamic_rotate %{{.*}} by %c3_i32 dim 1 : vector<16x256xbf16>
        CHECK: arith.extui %{{.*}} : vector<32x256xi8> to vector<32x256xi32>
        CHECK: tpu.dynamic_rotate %{{.*}} by %c7_i32 dim 1 {stride = 2 : si32, stride_dimension = 0 : si32} : vector<32x256xi32>
        """,
    )
    if not libtpu_available():
        pytest.skip("libtpu is not installed: upstream's compile cannot be tried")
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in case.inputs()]
    with jax.default_device(libtpu.tpu_device()):
        sharding = libtpu.tpu_sharding()
        args = [jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding) for s in specs]
        with pytest.raises(Exception, match="unsupported packed type rotation"):
            jax.jit(case.upstream(interpret=False), out_shardings=sharding).lower(*args).compile()


def test_a_bitcast_view_of_a_block_with_a_squeezed_leading_dim_compiles_where_upstreams_fails():
    """Upstream types the bitcast memref without the squeezed dim its source keeps, and MLIR's
    verifier rejects the module; minipallas's keeps it (``(1, 8, 128)`` i32 as ``(1, 16, 128)``
    i16), libtpu compiles it, and it agrees with upstream's interpret mode."""
    from minipallas.tools.difftest.mosaic import UpstreamError

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref.bitcast(jnp.int16)[...]

    def call(interpret=False):
        return pl.pallas_call(
            kernel, jax.ShapeDtypeStruct((2, 16, 128), jnp.int16), grid=(2,),
            in_specs=[pl.BlockSpec((None, 8, 128), lambda i: (i, 0, 0))],
            out_specs=pl.BlockSpec((None, 16, 128), lambda i: (i, 0, 0)), interpret=interpret,
        )  # fmt: skip

    x = np.arange(2 * 8 * 128, dtype=np.int32).reshape(2, 8, 128)
    with pytest.raises(UpstreamError, match="Verification failed"):
        upstream_mosaic(call(), x)
    kernel_ir = kernel_from_jaxpr(jax.make_jaxpr(call())(x), memory_space=mp.tpu.VMEM)
    text = lower_for_target(kernel_ir, "tpu").as_text(debug_info=False)
    assert "memref<1x8x128xi32, #tpu.memory_space<vmem>> -> memref<1x16x128xi16" in text
    want = np.asarray(jax.jit(call(interpret=True))(x))
    fn = from_jaxpr(jax.make_jaxpr(call())(x))
    assert np.asarray(mp.compile(fn)(x)[0]).tobytes() == want.tobytes()
