"""Functions built with ``ir.Builder`` that, together, use every op, every indexer kind and every
attribute value shape the text format must carry. Shared by the printer, parser and round-trip
tests (not a test module itself)."""

import ml_dtypes
import numpy as np
from ir_types import F32, I32, REF8

from minipallas.ir import (
    TPU_SMEM,
    TPU_VMEM,
    Array,
    ArrayType,
    Builder,
    Dyn,
    Function,
    Int,
    Literal,
    Location,
    RefType,
    Slice,
    params,
)
from minipallas.ir.opset.arrays import (
    ARITHMETIC,
    BITWISE,
    COMPARISONS,
    FLOAT_BINARY,
    FLOAT_UNARY,
    INT_UNARY,
    SHIFTS,
)

REF2D = RefType((8, 128), "float32", TPU_VMEM)


def const(b, value, dtype="float32", shape=()):
    return b.create("constant", [], {"value": Literal.of(np.full(shape, value), dtype)}).result


def state_ops() -> Function:
    """get/swap/addupdate/load/store with static, strided, dynamic, array and full indices."""
    r, i, idx, idx0 = params([REF2D, I32, ArrayType((4,), "int32"), I32])
    b = Builder()
    row = b.create("get", [r, i], {"indexer": (Int(Dyn(0)), Slice(0, 128, 1))}).result
    win = b.create("get", [r, i], {"indexer": (Int(3), Slice(Dyn(0), 8, 2))}).result
    b.create("get", [r, i], {"indexer": (Slice(Dyn(0), 2, 1), Slice(0, 64, 2))})
    b.create("get", [r], {"indexer": (Slice(2, 3, 2), Slice(0, 43, 3))})  # stop past the end
    b.create("get", [r], {"indexer": (Slice(0, 0, 1), Slice(5, 1, 1))})
    gathered = b.create("get", [r, idx], {"indexer": (Array(Dyn(0)), Int(0))}).result
    b.create("get", [r, idx, i], {"indexer": (Array(Dyn(0)), Int(Dyn(1)))})
    b.create("swap", [r, idx, gathered], {"indexer": (Array(Dyn(0)), Int(1))})
    b.create("get", [r, idx0], {"indexer": (Int(0), Array(Dyn(0)))})  # a 0-d array index
    b.create("addupdate", [r, win], {"indexer": (Int(0), Slice(0, 8, 16))})
    b.create("addupdate", [r, row], {"indexer": (Int(7), Slice(0, 128, 1))})
    mask = b.create("gt", [win, win]).result
    other = const(b, 0.0)
    flags = {"masked": False, "has_other": False}
    idx8 = (Int(1), Slice(8, 8, 1))
    b.create("load", [r], {"indexer": idx8, **flags})
    b.create("load", [r, mask], {"indexer": idx8, "masked": True, "has_other": False})
    b.create("load", [r, mask, other], {"indexer": idx8, "masked": True, "has_other": True})
    b.create("load", [r, mask, win], {"indexer": idx8, "masked": True, "has_other": True})
    b.create("store", [r, win], {"indexer": idx8, "masked": False})
    b.create("store", [r, win, mask], {"indexer": idx8, "masked": True})
    return b.function("state_ops", [r, i, idx, idx0], [row])


def views() -> Function:
    """Chained ref.at (with a dynamic start), reshape, bitcast and transpose views."""
    (r, i) = params([REF2D, I32])
    b = Builder()
    at = b.create("ref.at", [r, i], {"indexer": (Slice(Dyn(0), 4, 1), Slice(0, 128, 1))}).result
    at2 = b.create("ref.at", [at], {"indexer": (Int(1), Slice(0, 64, 2))}).result
    flat = b.create("ref.reshape", [r], {"shape": (1024,)}).result
    bits = b.create("ref.bitcast", [flat], {"dtype": "int32"}).result
    tr = b.create("ref.transpose", [r], {"permutation": (1, 0)}).result
    v = b.create("get", [at2], {"indexer": (Slice(0, 64, 1),)}).result
    b.create("get", [bits], {"indexer": (Slice(0, 8, 1),)})
    b.create("swap", [tr, v], {"indexer": (Slice(0, 64, 1), Int(0))})
    return b.function("views", [r, i], [v])


def scoped() -> Function:
    """Nested run_scoped with closed-over refs, 0-d refs, memory spaces, collective axes."""
    (r,) = params([REF8])
    b = Builder()
    inner = Builder()
    scratch, scalar_ref, outer_in = params(
        [RefType((8,), "float32", TPU_VMEM), RefType((), "int32", TPU_SMEM), REF8]
    )
    v = inner.create("get", [outer_in], {"indexer": (Slice(0, 8, 1),)}).result
    inner.create("swap", [scratch, v], {"indexer": (Slice(0, 8, 1),)})
    inner.create("swap", [scalar_ref, const(inner, 3, "int32")], {"indexer": ()})
    innermost = Builder()
    (cap,) = params([scratch.type])
    w = innermost.create("get", [cap], {"indexer": (Slice(0, 8, 1),)}).result
    nested = inner.create(
        "run_scoped", [scratch], {"collective_axes": ()}, [innermost.block([cap], [w])]
    ).result
    body = inner.block([scratch, scalar_ref, outer_in], [nested, v])
    out = b.create("run_scoped", [r], {"collective_axes": ("x", "y")}, [body]).results
    empty = Builder()
    (only,) = params([RefType((2, 2), "bfloat16")])
    b.create("run_scoped", [], {"collective_axes": ()}, [empty.block([only], [])])
    u = b.create("uninitialized", [], {"type": ArrayType((2, 3), "bfloat16")}).result
    return b.function("scoped", [r], [*out, u])


def callee() -> Function:
    r, x = params([REF8, F32])
    b = Builder()
    v = b.create("get", [r], {"indexer": (Slice(0, 8, 1),)}).result
    return b.function("<lambda>", [r, x], [v, x])


def control() -> Function:
    """for (with and without consts and carries), while, cond with 1..3 branches, call."""
    r, n, x = params([REF8, I32, F32])
    b = Builder()
    lo = const(b, 0, "int32")
    body = Builder()
    i, rr, acc = params([I32, REF8, F32])
    v = body.create("get", [rr, i], {"indexer": (Int(Dyn(0)),)}).result
    acc2 = body.create("add", [acc, v]).result
    loop = b.create("for", [lo, n, r, x], {"num_consts": 1}, [body.block([i, rr, acc], [acc2])])
    bare = Builder()
    (j,) = params([I32])
    b.create("for", [lo, n], {"num_consts": 0}, [bare.block([j], [])])
    cond_b, body_b = Builder(), Builder()
    cx, cc = params([F32, I32])
    pred = cond_b.create("lt", [cc, cc]).result
    br, bc = params([REF8, I32])
    one = const(body_b, 1, "int32")
    bc2 = body_b.create("add", [bc, one]).result
    wl = b.create(
        "while",
        [x, r, n],
        {"cond_nconsts": 1, "body_nconsts": 1},
        [cond_b.block([cx, cc], [pred]), body_b.block([br, bc], [bc2])],
    )
    branches = []
    for k in range(3):
        br_b = Builder()
        ba, bref = params([F32, REF8])
        out = br_b.create("neg", [ba]).result if k else ba
        branches.append(br_b.block([ba, bref], [out]))
    sel = b.create("cond", [n, x, r], {}, branches).result
    single = Builder()
    b.create("cond", [n], {}, [single.block([], [])])
    f = callee()
    called = b.create("call", [r, x], {"callee": f}).results
    return b.function("control", [r, n, x], [loop.result, wl.result, sel, *called])


def kernel_and_arrays() -> Function:
    """program_id, num_programs, iota and every pure array op."""
    x, y, m = params(
        [ArrayType((8, 16), "float32"), ArrayType((16, 4), "float32"), ArrayType((8, 16), "bool")]
    )
    b = Builder()
    b.create("program_id", [], {"axis": 0})
    b.create("num_programs", [], {"axis": 2})
    ints = b.create("iota", [], {"type": ArrayType((8, 16), "int32"), "dimension": 1}).result
    for name in ARITHMETIC + FLOAT_BINARY + COMPARISONS:
        b.create(name, [x, x])
    for name in SHIFTS:
        b.create(name, [ints, ints])
    for name in INT_UNARY:
        b.create(name, [ints])
    for name in BITWISE:
        b.create(name, [ints, ints])
        b.create(name, [m, m])
    for name in ("neg", "abs", *FLOAT_UNARY):
        b.create(name, [x])
    b.create("not", [m])
    b.create("select", [m, x, x])
    b.create("optimization_barrier", [x])
    b.create("optimization_barrier", [m])
    b.create("convert", [x], {"dtype": "bfloat16"})
    b.create("bitcast", [x], {"dtype": "uint32"})
    vec = b.create("reduce_sum", [x], {"axes": (1,)}).result
    b.create("reduce_max", [x], {"axes": (0, 1)})
    b.create("reduce_min", [x], {"axes": ()})
    b.create("broadcast_in_dim", [vec], {"shape": (8, 3), "dims": (0,)})
    b.create("reshape", [x], {"shape": (2, 4, 16)})
    b.create("transpose", [x], {"permutation": (1, 0)})
    b.create("dot", [x, y], {"dtype": "float32"})
    xb = b.create("convert", [x], {"dtype": "bfloat16"}).result
    yb = b.create("convert", [y], {"dtype": "bfloat16"}).result
    b.create("dot", [xb, yb], {"dtype": "float32"})
    b.create("dot", [x, y], {"dtype": "float32", "precision": ("highest", "default")})
    b.create("reciprocal", [x], {"approx": True, "full_range": False})
    b.create("reciprocal", [x], {"approx": False, "full_range": True})
    b.create("multiple_of", [ints], {"multiple": 8})
    return b.function("arrays", [x, y, m], [vec])


def indexed() -> Function:
    """The pure indexed ops discharge produces."""
    x, i, idx = params([ArrayType((8, 128), "float32"), I32, ArrayType((4,), "int32")])
    b = Builder()
    s = b.create("slice", [x], {"indexer": (Int(2), Slice(0, 64, 2))}).result
    d = b.create("dynamic_slice", [x, i], {"indexer": (Int(Dyn(0)), Slice(0, 64, 1))}).result
    g = b.create("gather", [x, idx], {"indexer": (Array(Dyn(0)), Slice(0, 128, 1))}).result
    b.create("dynamic_update_slice", [x, i, d], {"indexer": (Int(Dyn(0)), Slice(0, 64, 1))})
    b.create("dynamic_update_slice", [x, i, s], {"indexer": (Int(0), Slice(Dyn(0), 64, 2))})
    b.create("scatter", [x, idx, g], {"indexer": (Array(Dyn(0)), Slice(0, 128, 1))})
    b.create("scatter_add", [x, idx, g], {"indexer": (Array(Dyn(0)), Slice(0, 128, 1))})
    return b.function("indexed", [x, i, idx], [s])


def _bits(values, dtype, uint):
    return Literal(ArrayType((len(values),), dtype), np.array(values, uint).tobytes())


def constants() -> Function:
    """Splat and non-splat constants of every dtype, with NaN payloads, infinities, -0.0."""
    b = Builder()
    lits = [
        Literal.of(1.5, "float32"),
        Literal.of(np.full((8, 128), 0.1), "float32"),
        Literal.of([[1, 2, 3], [4, 5, 6]], "int32"),
        Literal.of([-128, 127], "int8"),
        Literal.of([0, 4294967295], "uint32"),
        Literal.of([True, False, True], "bool"),
        Literal.of(np.full((3,), True), "bool"),
        Literal.of([0.1, 1 / 3, 1e30, -2.5], "bfloat16"),
        Literal.of([0.1, 65504.0, 6e-8, -0.0], "float16"),
        Literal.of([np.nan, np.inf, -np.inf, -0.0, 1e-45, 3.4028235e38], "float32"),
        Literal.of(np.zeros((0, 3)), "float32"),
        Literal.of(np.zeros((2, 0)), "int32"),
        _bits([0x7FC00001, 0xFFC00000, 0x7F800001, 0x00000001], "float32", np.uint32),
        _bits([0x7E01, 0xFE00, 0x0001], "float16", np.uint16),
        _bits([0x7FC1, 0xFFC0, 0x0001], "bfloat16", np.uint16),
        Literal.of(np.array(ml_dtypes.bfloat16(3.0)), "bfloat16"),
    ]
    results = [b.create("constant", [], {"value": lit}).result for lit in lits]
    return b.function("constants", [], results)


def located() -> Function:
    """Ops with file:line locations, a text line:col location and none."""
    (x,) = params([F32])
    b = Builder()
    y = b.create("neg", [x], loc=Location("/src/kernel.py", 12)).result
    z = b.create("abs", [y], loc=Location("", 3, 7)).result
    w = b.create("exp", [z], loc=Location('we"ird.py', 4, 2)).result
    v = b.create("sqrt", [w]).result
    return b.function("located", [x], [v])


def structural() -> Function:
    """reverse, pad, the cumulative ops, reduce_prod, sort, top_k, argmax and argmin."""
    from minipallas.ir.parser import parse

    return parse(
        """func @structural(%x: f32[4,6], %v: f32[]) -> (f32[7,10], i32[4,6], i32[4,3], i32[4]) {
  %r = reverse %x, dims (1) : f32[4,6]
  %p = pad %r, %v, low (1, 0), high (2, -1), interior (0, 1) : f32[7,10]
  %c = cumsum %x, axis 1, reverse : f32[4,6]
  %d = cumprod %c, axis 0 : f32[4,6]
  %e = cummax %d, axis 1 : f32[4,6]
  %f = cummin %e, axis 1 : f32[4,6]
  %g = cumlogsumexp %f, axis 0, reverse : f32[4,6]
  %i = iota dimension 1 : i32[4,6]
  %s, %t = sort %g, %i, dimension 1, num_keys 1 : f32[4,6], i32[4,6]
  %k, %ki = top_k %s, k 3 : f32[4,3], i32[4,3]
  %q = reduce_prod %k, axes (1) : f32[4]
  %b = broadcast_in_dim %q, dims (0) : f32[4,6]
  %a = argmax %b, axis 1 : i32[4]
  %n = argmin %x, axis 1 : i32[4]
  %z = add %a, %n : i32[4]
  return %p, %t, %ki, %z
}"""
    )


def debug() -> Function:
    """debug_print: positional and keyword operands, a quoted format, print options."""
    from minipallas.ir.parser import parse

    return parse(
        """func @debug(%x: f32[4], %i: i32[]) -> () {
  debug_print %i, %x, fmt "i={} \\"x\\"={x:}", names ("", "x"), options (precision 3, sign " ")
  debug_print fmt "no values", names ()
  return
}"""
    )


def collective() -> Function:
    """axis_index and barrier: programs that run together (issue 15)."""
    from minipallas.ir.parser import parse

    return parse(
        """func @collective() -> (i32[]) {
  %i = axis_index ("x") : i32[]
  barrier ("x", "y")
  return %i
}"""
    )


def semaphores() -> Function:
    """semaphore_signal, semaphore_wait (both forms) and semaphore_read."""
    from minipallas.ir.parser import parse

    return parse(
        """func @semaphores(%s: Ref{i32[4], semaphore}, %i: i32[]) -> (i32[]) {
  %one = constant 1 : i32[]
  semaphore_signal %s[%i], %one
  semaphore_wait %s[%i], %one
  semaphore_wait %s[0], %one, keep
  %c = semaphore_read %s[%i] : i32[]
  return %c
}"""
    )


def lanes() -> Function:
    """roll (pltpu.roll), plain and strided; platform_index and the cond it picks for;
    packed_bitcast (pltpu.bitcast) and bitcast across widths."""
    from minipallas.ir.parser import parse

    return parse(
        """func @lanes(%x: f32[8,128], %s: i32[]) -> (f32[8,128], i16[16,128], i8[8,128,4]) {
  %r = roll %x, %s, axis 1, stride () : f32[8,128]
  %t = roll %r, %s, axis 0, stride (2, 1) : f32[8,128]
  %i = platform_index ("mosaic", "tpu"), (), default : i32[]
  %u = cond %i (%t) [{
  ^(%a: f32[8,128]):
    yield %a
  }, {
  ^(%b: f32[8,128]):
    %n = neg %b : f32[8,128]
    yield %n
  }, {
  ^(%c: f32[8,128]):
    yield %c
  }] : f32[8,128]
  %h = packed_bitcast %u : i16[16,128]
  %w = packed_bitcast %h : f32[8,128]
  %v = bitcast %w : i8[8,128,4]
  %z = bitcast %v : i32[8,128]
  %q = packed_bitcast %z : i16[16,128]
  return %u, %q, %v
}"""
    )


def dma() -> Function:
    """dma_start and dma_wait, between windows (ref.at views) of two memory spaces."""
    from minipallas.ir.parser import parse

    return parse(
        "func @dma(%x: Ref{f32[4,128]}, %b: Ref{f32[2,128], tpu.vmem}, "
        """%s: Ref{i32[2], dma_semaphore}, %i: i32[]) -> () {
  %w = ref.at %x[ds(%i, 2), :] : Ref{f32[2,128]}
  %k = ref.at %s[1] : Ref{i32[], dma_semaphore}
  dma_start %w, %b, %k
  dma_wait %w, %b, %k
  return
}"""
    )


def atomics() -> Function:
    """atomic_add (masked and not), atomic_max, atomic_min and atomic_cas."""
    from minipallas.ir.parser import parse

    return parse(
        """func @atomics(%r: Ref{f32[8]}, %q: Ref{i32[2,4]}, %v: f32[4], %m: bool[4], %i: i32[])
    -> (f32[4], i32[]) {
  %a = atomic_add %r[ds(%i, 4)], %v : f32[4]
  %b = atomic_add %r[0:4], %v, mask %m : f32[4]
  %c = atomic_min %r[4:8], %b : f32[4]
  %w = constant 7 : i32[4]
  %d = atomic_max %q[1, :], %w, mask %m : i32[4]
  %z = constant 0 : i32[]
  %e = atomic_cas %q[0, %i], %z, %i : i32[]
  return %c, %e
}"""
    )


def mesh() -> Function:
    """mesh_call: a kernel body on every core of a mesh (issue 38), with an alias."""
    from minipallas.ir.parser import parse_module

    return parse_module(
        """func @body(%x: Ref{f32[8]}, %o: Ref{f32[8]}) -> () {
  %v = get %x[:] : f32[8]
  %w = swap %o[:], %v : f32[8]
  return
}

func @mesh(%x: f32[8]) -> (f32[8]) {
  %o = mesh_call @body(%x), mesh ("core") (2), aliases (0, 0) : f32[8]
  return %o
}"""
    ).entry


def exchange() -> Function:
    """exchange (static pairs, computed targets) and gather_rows: a compiled kernel's devices
    talking (issue 47)."""
    from minipallas.ir.parser import parse_module

    return parse_module(
        """func @f(%d: f32[4,8], %p: f32[8], %i: i32[], %t: i32[]) -> (f32[4,8], f32[4,8]) {
  %a = exchange %d[%i, :], %p, axes ("x") (4), pairs (0, 1, 1, 2, 2, 3, 3, 0) : f32[4,8]
  %b = exchange %d[%i, :], %p, to (%t), axes ("x") (4) : f32[4,8]
  %g = gather_rows %p, axes ("x") (4) : f32[4,8]
  %s = add %a, %g : f32[4,8]
  return %s, %b
}"""
    ).entry


ALL = [
    state_ops,
    views,
    scoped,
    control,
    kernel_and_arrays,
    indexed,
    constants,
    located,
    structural,
    debug,
    collective,
    mesh,
    semaphores,
    lanes,
    dma,
    atomics,
    exchange,
]
