"""Which float reductions and dots XLA:CPU computes with the same bits batched as per point.

In exact mode a batched program must give each grid point the bits of the loop program, which
XLA compiles at the block's shape. How XLA:CPU adds a float reduction up depends on who runs it:
an op with at least ``YNN_MIN_ELEMENTS`` elements in its result or an operand goes to YNNPACK
(XLA's ``IsInstructionPreferredByYnn``), whose row sums keep their order whatever the batch dims
around them; a smaller reduction stays in XLA, which splits it into windows of 32
(``TreeReductionRewriter``) and adds those up in another order. Batching grows every op past
that threshold, so a reduction agrees only when it already went to YNNPACK per point. With it go
the elementwise ops XLA fuses into the YNNPACK graph: YNNPACK's ``exp``, ``tanh``, ``rsqrt``...
round differently from XLA's, so one that batching moves over the threshold could change sides.

``bench/numerics/batched_bits.py`` measures this on the programs the pass emits (the batched program
against the loop program, three seeds, normal values; f32 unless said):

- sums over rows of 8x1024 blocks, over columns of 8x512, over rows of 128x128 (both grid
  axes batched, blocks in place): identical; of 16x128, 8x256 and 1x1024 (under 4096
  elements a point): over three quarters of the sums differ; a 64x64 block summed to one
  number: 14 of 16 differ. bf16 and f16 sums (an f32 reduce between converts) agree even
  under 4096 elements, but only as their few bits round back alike: held to the same rule;
- sums down the columns (a reduced dimension that is not the minor one): of 8x512 blocks
  identical; of 128x128 blocks identical on the Intel Xeon but 45% differ on the AMD EPYC
  (AVX2), so a sum down more than 8 rows stays per point;
- max and min: identical at every size on normal values, but over +0 and -0 alone (the order
  of the comparisons picks the sign) 16x128 blocks differ, 8x1024 and 128x128 do not: the
  same rule as sums;
- products (never YNNPACK's: XLA's own both ways): identical at every size and dtype measured;
- dots into f32 (f32, or bf16 operands) of YNNPACK's forms (both sides at least 2 wide, the
  left side not transposed): 128x128x128, 32x32x128, 64x256x64, 8x2048x128 with both
  operands batched over different grid axes (one bigger matmul), identical; ``q @ k.T`` (the
  right side transposed) 128x64x128 identical in f32 and then ``exp``, but 7% of the bf16
  products differ; ``x.T @ y``: 1.4% differ; a 1-row or 1-column block: 83%. On the Intel
  Xeon (AVX-512, AMX) a right side narrower than 64 columns differs once batching widens it
  (8x512x8, 16x1024x16, ``q @ k.T`` 32xkx32 for k from 128 to 1024: 80-95% of the elements,
  over columns alone as over both axes; over rows alone, identical): ``NARROW_COLUMNS``;
- softmax of 8x1024 rows (``exp(x - max)`` summed) and flash attention: identical; layer norm
  of 16x1024 rows, whose ``rsqrt`` of 16 values a point crosses the threshold when 256 points
  are batched: a quarter of the elements differ (``approximate_crosses``), and with the
  ``rsqrt`` in two chunks of 128 points (``chunk_points``), none.

Rerun on a third CPU, an AMD EPYC with AVX-512 (family 25; the EPYC above has AVX2 only): 0
admitted cases differ there either.

``keeps_bits`` admits exactly those classes; everything else stays per point (``NotBatchable``).

A float sum XLA keeps per point can still be batched by writing out the order XLA adds it up
in (``spelled_tree``): at one point XLA sums each window of 32 left to right from 0, then the
windows' sums the same way, and a batched program of those slices and adds leaves XLA nothing
to reorder. Measured for the f32 sum of a 1024-element block, 8 and 1024 grid points, five
seeds and scales from 1e-3 to 1e3: every bit equal on the Intel Xeon (AVX-512) and on the AMD
EPYC (AVX2), where batching the sum as one reduce (a YNNPACK graph) differed on 5 of 6 inputs;
and row sums of 16x128, 8x256 and 1x1024 blocks (``bench/numerics/batched_bits.py``, three
seeds), of which three quarters differed batched as one reduce: none differs written out on the
Xeon, and the 16x128 and 1x1024 ones none on the 13-core EPYC
(``tests/kernels/test_batched_exact.py``).

Who runs a dot matters for speed too: YNNPACK ran a dot with batch dimensions slowly on the
13-core EPYC, and XLA's own dot kernel gives the bits YNNPACK gives to an f32 dot at most
``OWN_DOT_DEPTH`` deep and ``NARROW_COLUMNS`` wide, so such a batched dot goes there
(``own_dot``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from minipallas.ir import dtypes
from minipallas.ir.core import Op
from minipallas.ir.types import ArrayType, Type

YNN_MIN_ELEMENTS = 4096

# YNNPACK picks its dot kernel by the width of the right side: a narrower one widened by
# batching (its points' columns side by side) changes kernel and summing order.
NARROW_COLUMNS = 64

# XLA's own dot kernel (Eigen's, which XLA uses for a dot YNNPACK does not take) adds up an f32
# dot at most this deep and at least ``NARROW_COLUMNS`` wide as YNNPACK does: every bit equal,
# -0 rows included, on the Intel Xeon and the AMD EPYC, from 16x32x512 to 1024x128x1024 and
# batched 3x256x128x512; 128x512x128 differs on both (``own_dot``).
OWN_DOT_DEPTH = 256

# XLA:CPU's TreeReductionRewriter splits a reduction it keeps into windows of this many elements.
WINDOW = 32

# Chunks are independent XLA kernels, which XLA:CPU's runtime hands to other threads: each
# hand-off costs microseconds, so only a few chunks pay (``chunk_points``).
MAX_CHUNKS = 4

# Elementwise ops YNNPACK runs with its own approximations (the exactly rounded ones, + - * /
# sqrt max min and the like, give the same bits on either side).
APPROXIMATE = frozenset(
    {"exp", "expm1", "log", "log1p", "logistic", "rsqrt", "sin", "cos", "tan", "tanh", "erf", "pow"}
)

# The ops XLA may hand to YNNPACK with the elementwise ops around them.
OFFLOADED = frozenset({"reduce_sum", "reduce_max", "reduce_min", "dot"})


def keeps_bits(
    op: Op, per_point: list[ArrayType], transposed: list[bool], columns: int = 1
) -> str | None:
    """None when XLA:CPU gives ``op`` at the batched shape the bits it gives at the shape of
    one point (its operands' types ``per_point``; ``transposed``: which operands the program
    computes with a ``transpose``; ``columns``: for a dot, how many points' right sides
    batching puts side by side), else why not."""
    if not dtypes.is_float(op.result.type.dtype) or op.name == "reduce_prod":
        return None
    if op.name == "dot":
        return _dot(per_point, op.result.type.dtype, transposed, columns)
    (x,) = per_point
    if math.prod(x.shape) < YNN_MIN_ELEMENTS:
        return f"a float reduction of fewer than {YNN_MIN_ELEMENTS} elements a point stays in XLA"
    if math.prod(op.result.type.shape) == 1:
        return "a float reduction to one number a point is added up in another order batched"
    minor = len(x.shape) - 1
    if op.name == "reduce_sum" and any(a != minor and x.shape[a] > 8 for a in op.attrs["axes"]):
        return (
            "a float sum down the columns of a block is added up in another order batched "
            "on some CPUs (AMD EPYC)"
        )
    return None


def spelled_tree(op: Op, per_point: list[ArrayType]) -> bool:
    """Whether ``op`` is a float sum XLA keeps per point (under ``YNN_MIN_ELEMENTS``) whose
    order a batched program can write out: an f32 sum over the minor axis alone of a whole
    number of windows, two to ``WINDOW`` of them (one level of windows)."""
    (x,) = per_point
    n = x.shape[-1] if x.shape else 0
    return (
        op.name == "reduce_sum"
        and x.dtype == "float32"
        and tuple(op.attrs["axes"]) == (x.ndim - 1,)
        and n % WINDOW == 0
        and WINDOW < n <= WINDOW * WINDOW
        and math.prod(x.shape) < YNN_MIN_ELEMENTS
    )


def _dot(per_point: list[ArrayType], out: str, transposed: list[bool], columns: int) -> str | None:
    (a, b), (m, k), n = per_point, per_point[0].shape, per_point[1].shape[1]
    if out != "float32" or {a.dtype, b.dtype} not in ({"float32"}, {"bfloat16"}):
        return "only dots of f32 or bf16 into f32 are measured alike batched"
    if min(m, n) < 2 or max(m, k, n) < 8:
        return "a matrix-vector or tiny dot a point is XLA's, batched it is YNNPACK's"
    if columns > 1 and n < NARROW_COLUMNS:
        return (
            f"a dot of fewer than {NARROW_COLUMNS} columns a point is added up in another order "
            "once batching puts several points' columns side by side"
        )
    if transposed[0] or transposed[1] and a.dtype != "float32":
        return "a dot of a transposed operand is XLA's a point, batched it may be YNNPACK's"
    return None


def own_dot(a: ArrayType, b: ArrayType) -> bool:
    """Whether the dot ``a @ b`` (``[..., m, k] x [..., k, n]``) runs in XLA's own dot kernel
    (``policy.XlaCpu.dot_left``): it has batch dimensions, which YNNPACK runs slowly on the 13-core
    AMD EPYC (the 256x384x512 matmul's three 128-deep dots: 1.38 ms, XLA's own kernel 0.92,
    ``jax.jit``'s one 384-deep dot 0.60; the same on the Intel Xeon), and XLA's kernel gives it
    YNNPACK's bits. A 2-D dot stays YNNPACK's, faster there: flash attention's ran 2x slower in
    XLA's."""
    (m, k), n = a.shape[-2:], b.shape[-1]
    return (
        a.ndim > 2
        and a.dtype == b.dtype == "float32"
        and k <= OWN_DOT_DEPTH
        and n >= NARROW_COLUMNS
        and m >= 2
    )


def chunk_points(op: Op, batch: Sequence[int]) -> int | None:
    """How many points along the first batch axis (``batch``: the result layout's batch axis
    sizes, in order) one approximate elementwise op may take so that it stays under
    ``YNN_MIN_ELEMENTS``, as at one point: XLA then computes each chunk as it computes a point
    (``layer_norm``'s ``rsqrt`` of 16 values a point, 256 points: two chunks of 128, its bits). None
    when no chunking does: the other batch axes alone reach the threshold, or it would take more
    than ``MAX_CHUNKS`` chunks."""
    row = math.prod(op.result.type.shape) * math.prod(batch[1:])
    most = (YNN_MIN_ELEMENTS - 1) // row
    chunks = -(-batch[0] // most) if most else MAX_CHUNKS + 1
    if chunks > MAX_CHUNKS:
        return None
    return -(-batch[0] // chunks)  # as even as they go: 256 points as 128 and 128


def approximate_crosses(op: Op, batched: Type) -> bool:
    """Whether an approximate elementwise op could move into YNNPACK's graph when batched (its
    result of type ``batched``): it has fewer than ``YNN_MIN_ELEMENTS`` elements per point but
    not batched."""
    per_point, elements = (math.prod(t.shape) for t in (op.result.type, batched))
    return (
        op.name in APPROXIMATE
        and dtypes.is_float(op.result.type.dtype)
        and per_point < YNN_MIN_ELEMENTS <= elements
    )
