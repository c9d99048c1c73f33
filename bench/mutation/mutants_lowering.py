"""Mutants planted in the StableHLO lowering (``mutants.py`` gathers the catalogue)."""

from __future__ import annotations

from bench.mutation.mutant import GATHER_DYN, NUDGED, Mutant

LOWERING: tuple[Mutant, ...] = (
    # -- lowering/stablehlo ------------------------------------------------------------------
    Mutant(
        "binary-swapped-operands",
        "swapped operands",
        "lowering/stablehlo/rules/arrays.py",
        "return [_BINARY[op.name](x, y).result]",
        "return [_BINARY[op.name](y, x).result]",
        "binary ops lower with their operands swapped (sub computes y - x)",
    ),
    Mutant(
        "int-div-by-zero-zero",
        "wrong constant",
        "lowering/stablehlo/rules/arrays.py",
        "    constant=emit.like,\n",
        "    constant=lambda value, like: emit.like(0 if value == -1 else value, like),\n",
        "integer division by zero gives 0 instead of -1 (the lowering's constants for "
        "ir/opset/meanings.py's rule, which the interpreter reads unmutated)",
    ),
    Mutant(
        "pow-exponent-zero-negative",
        "wrong comparison",
        "lowering/stablehlo/rules/arrays.py",
        'limit, past = 0, "LT"',
        'limit, past = 0, "LE"',
        "integer pow treats exponent 0 as negative (x ** 0 = 0 for x != 1)",
        unreachable="the importer never emits an integer pow: lax.pow takes a float base, "
        "jnp.power of ints is a square-and-multiply chain and integer_pow is expanded; only "
        "the front end (x ** y on int arrays) makes one: the front-end check int_pow",
    ),
    Mutant(
        "reduce-max-identity",
        "wrong constant",
        "lowering/stablehlo/rules/arrays.py",
        'return -np.inf if name == "reduce_max" else np.inf',
        'return np.inf if name == "reduce_max" else -np.inf',
        "float reduce_max starts from +inf (and reduce_min from -inf)",
    ),
    Mutant(
        "bf16-sum-not-widened",
        "wrong rounding dtype",
        "lowering/stablehlo/rules/arrays.py",
        'dtype in ("bfloat16", "float16")\n    work',
        'dtype in ("float16",)\n    work',
        "a bfloat16 reduce_sum accumulates in bfloat16 instead of float32",
    ),
    Mutant(
        "dot-contracts-wrong-axis",
        "wrong reduction axis",
        "lowering/stablehlo/rules/arrays.py",
        "DotDimensionNumbers.get(lhs[:k], rhs[:k], [lhs[k + 1]], [rhs[k]])",
        "DotDimensionNumbers.get(lhs[:k], rhs[:k], [lhs[k]], [rhs[k]])",
        "dot contracts the left operand's rows instead of its columns (a^T b)",
    ),
    Mutant(
        "literal-constant-nudged",
        "constant ~1e-6 relative",
        "lowering/stablehlo/rules/arrays.py",
        "return [emit.constant(literal.array(), literal.type.dtype, literal.type.shape)]",
        "return [emit.constant((literal.array() * "
        + NUDGED
        + ").astype(literal.array().dtype) if dtypes.is_float(literal.type.dtype) "
        "else literal.array(), literal.type.dtype, literal.type.shape)]",
        "every float constant of the compiled program is scaled by 1 + 1e-6",
    ),
    Mutant(
        "logistic-one-nudged",
        "constant ~1e-6 relative",
        "lowering/stablehlo/rules/arrays.py",
        "    one = emit.like(1, x)\n    e = _in_float32",
        "    one = emit.like(1 + 1e-6, x)\n    e = _in_float32",
        "logistic computes (1 + 1e-6) / (1 + exp(-x))",
    ),
    Mutant(
        "float-to-int-top-ge",
        "wrong comparison",
        "lowering/stablehlo/rules/arrays.py",
        '((info.max, high, "GT"), (info.min, low, "LT"))',
        '((info.max, high, "GE"), (info.min, low, "LT"))',
        "float to int: the largest float inside the range (2147483520 for f32) saturates",
    ),
    Mutant(
        "window-start-clamp-off-by-one",
        "off-by-one window",
        "lowering/stablehlo/rules/indexed.py",
        "dyn[where.pos], types[where.pos].dtype, dim - indexing.span(entry), clamp)",
        "dyn[where.pos], types[where.pos].dtype, dim - indexing.span(entry) + 1, clamp)",
        "gather/scatter: a dynamic start is clamped one past the last valid start",
        unreachable=GATHER_DYN,
    ),
    Mutant(
        "index-clamp-dropped",
        "dropped clamp",
        "lowering/stablehlo/rules/indexed.py",
        "    return stablehlo.ClampOp(emit.like(0, value), value, emit.like(max(high, 0), value))"
        ".result",
        "    return value",
        "gather/scatter: dynamic starts and read indices are not clamped (XLA's gather clamps "
        "each slice itself; a strided window or a scatter start then differs)",
        unreachable=GATHER_DYN + "; an array index XLA's gather clamps itself",
    ),
    Mutant(
        "scatter-array-index-clamped",
        "dropped clamp",
        "lowering/stablehlo/rules/indexed.py",
        "value = _index(value, dtype, shape[d] - (0 if write else 1), clamp=not write)",
        "value = _index(value, dtype, shape[d] - (0 if write else 1), clamp=True)",
        "writes clamp a negative integer-array index to 0 instead of dropping the update",
    ),
    Mutant(
        "strided-gather-no-stride",
        "off-by-one window",
        "lowering/stablehlo/rules/indexed.py",
        "scaled = stablehlo.MulOp(steps.result, emit.like(entry.stride, steps.result)).result",
        "scaled = steps.result",
        "a strided window on the gather/scatter path steps by 1",
    ),
    Mutant(
        "gather-transpose-not-inverted",
        "transpose permutation",
        "lowering/stablehlo/rules/indexed.py",
        "return [emit.transpose(out, list(np.argsort(plan.to_plan)))]",
        "return [emit.transpose(out, list(plan.to_plan))]",
        "a gather's result goes back to numpy layout by the plan permutation, not its inverse",
    ),
    Mutant(
        "plan-index-block-first",
        "transpose permutation",
        "ir/indexing.py",
        "block = indexed[0] if adjacent else 0",
        "block = 0",
        "adjacent integer-array indices after a slice put their dims first, not in place",
    ),
    Mutant(
        "scatter-add-sets",
        "add vs set",
        "lowering/stablehlo/rules/indexed.py",
        "stablehlo.ReturnOp([stablehlo.AddOp(old, new).result if accumulate else new])",
        "stablehlo.ReturnOp([new])",
        "scatter_add overwrites instead of adding",
    ),
    Mutant(
        "for-loop-le",
        "off-by-one window",
        "lowering/stablehlo/rules/control.py",
        'stablehlo.ReturnOp([emit.compare(i, hi, "LT")])',
        'stablehlo.ReturnOp([emit.compare(i, hi, "LE")])',
        "a for loop runs one trip too many",
    ),
    Mutant(
        "cond-branches-swapped",
        "select branch order",
        "lowering/stablehlo/rules/control.py",
        "chosen = [branches[1], branches[0]]",
        "chosen = [branches[0], branches[1]]",
        "a two-branch cond runs branch 0 where the index picks branch 1, and back",
    ),
    Mutant(
        "cond-index-zero-ge",
        "wrong comparison",
        "lowering/stablehlo/rules/control.py",
        '"GT" if dtypes.is_signed(dtype) else "NE"',
        '"GE" if dtypes.is_signed(dtype) else "NE"',
        "a two-branch cond with a signed index 0 runs branch 1",
    ),
    Mutant(
        "case-index-unclamped",
        "dropped clamp",
        "lowering/stablehlo/rules/control.py",
        "    return stablehlo.ClampOp(emit.like(0, index), index, emit.like(n - 1, index)).result",
        "    return index",
        "a cond of 3+ branches passes its index unclamped (stablehlo.case runs the last "
        "branch for a negative one)",
        unreachable="a jaxpr's cond index is clamped in the jaxpr (lax.switch emits clamp), so "
        "the lowering sees an in-range index; only a front-end cond with a traced index can "
        "be out of range: the front-end check switch_out_of_range",
    ),
    Mutant(
        "scratch-fill-zero",
        "wrong constant",
        "lowering/stablehlo/rules/scoped.py",
        "emit.constant(dtypes.fill_value(t.dtype), t.dtype, t.shape)",
        "emit.constant(0, t.dtype, t.shape)",
        "fresh scratch holds 0 instead of NaN (floats) or the minimum (ints) in compiled programs",
    ),
    Mutant(
        "excess-precision-allowed",
        "wrong rounding dtype",
        "lowering/runtime/xla_cpu.py",
        'CPU_COMPILE_OPTIONS = (("xla_allow_excess_precision", False),)',
        'CPU_COMPILE_OPTIONS = (("xla_allow_excess_precision", True),)',
        "XLA may keep bf16 chains in f32 instead of rounding every op",
    ),
    Mutant(
        "small-loop-route-on",
        "wrong constant",
        "lowering/runtime/xla_cpu.py",
        'CPU_BACKEND_OPTIONS = (("xla_cpu_small_while_loop_byte_threshold", "0"),)',
        'CPU_BACKEND_OPTIONS = (("xla_cpu_small_while_loop_byte_threshold", "1024"),)',
        "XLA's small-loop route is back at its default, where LLVM may fuse bf16 ops and skip "
        "a rounding",
    ),
)
