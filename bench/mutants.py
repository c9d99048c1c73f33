"""The mutant catalogue of ``bench/mutate.py``: bugs planted in minipallas's passes and lowering.

Each ``Mutant`` names one file (a path in the repository), an exact snippet that must occur
there exactly once, and its replacement: applying it to a copy of the sources plants the bug.
Categories are those of issue 11 (off-by-one window, wrong reduction axis, dropped write-back,
swapped operands, wrong rounding dtype, constant changed ~1e-6 relative) and a few more that
matter for a state-discharging compiler (wrong comparison, dropped clamp, add vs set,
transpose permutation, select branch order, wrong constant).

The reference interpreter (``ir/interpret``) is the oracle and is never mutated. A mutant
that cannot change what any program computes is marked ``equivalent`` with the reason; it is
left out of the kill rate's denominator. A mutant that changes programs no upstream jaxpr
imports to (so no corpus case can reach it; only minipallas's own front end and kernels do) is
marked ``unreachable`` with the reason: it stays in the denominator, a survivor if it survives.
The kill check's front-end stage (``tests/difftest/frontend_corpus.py``) is there for those:
each note names the check that reaches the mutant.
"""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES = (
    "off-by-one window",
    "wrong reduction axis",
    "dropped write-back",
    "swapped operands",
    "wrong rounding dtype",
    "constant ~1e-6 relative",
    "wrong comparison",
    "dropped clamp",
    "add vs set",
    "transpose permutation",
    "select branch order",
    "wrong constant",
)


@dataclass(frozen=True)
class Mutant:
    name: str
    category: str
    file: str  # path in the repository, e.g. "passes/discharge/state.py"
    find: str  # must occur exactly once in the file
    replace: str
    description: str
    equivalent: str = ""  # why no program can tell it apart ("" if some program can)
    unreachable: str = ""  # why no imported jaxpr reaches it ("" if one can); still counted


_BATCHED = (
    "the batched grid runs only minipallas's own pallas_call (the CPU path); an imported "
    "upstream pallas_call always becomes the loop program (interop/pallas_call.py); the "
    "front-end checks' kernels reach it"
)
_GATHER_DYN = (
    "an imported gather/scatter has no dynamic slice start: the importer turns a slice "
    "with a dynamic start next to an array into position arrays (interop/indexers.py); the "
    "front-end check dynamic_window_next_to_array reaches it"
)

# A float literal scaled by (1 + 1e-6): f32 moves by ~8 ulps, bf16/f16 round back to itself.
_NUDGED = "np.float32(1 + 1e-6)"

MUTANTS: tuple[Mutant, ...] = (
    # -- passes/discharge ---------------------------------------------------------------------
    Mutant(
        "addupdate-drops-write",
        "dropped write-back",
        "passes/discharge/state.py",
        "        access.write_window(known, dyn, total)\n",
        "",
        "addupdate with a basic index computes old + delta but never writes it back",
    ),
    Mutant(
        "swap-drops-write",
        "dropped write-back",
        "passes/discharge/state.py",
        "    access.write_window(known, dyn, new)\n    return [old]",
        "    return [old]",
        "swap (ref[i] = v) returns the old window and forgets the new one",
    ),
    Mutant(
        "scatter-addupdate-sets",
        "add vs set",
        "passes/discharge/state.py",
        "access.write_window(known, dyn, delta, accumulate=True)",
        "access.write_window(known, dyn, delta)",
        "addupdate through an integer-array index overwrites instead of accumulating",
    ),
    Mutant(
        "masked-store-select-swapped",
        "select branch order",
        "passes/discharge/state.py",
        '"select", [mask, new, old]',
        '"select", [mask, old, new]',
        "a masked store keeps the new value where the mask is off and the old where it is on",
    ),
    Mutant(
        "masked-load-select-swapped",
        "select branch order",
        "passes/discharge/state.py",
        '"select", [mask, window, fill]',
        '"select", [mask, fill, window]',
        "a masked load gives the fill value where the mask is on",
    ),
    Mutant(
        "masked-scatter-start-clamp",
        "off-by-one window",
        "passes/discharge/state.py",
        "clamped(dyn[e.start.pos], dim - span)",
        "clamped(dyn[e.start.pos], dim - span + 1)",
        "masked array store: a dynamic slice start is clamped one past the last valid start",
    ),
    Mutant(
        "masked-scatter-mask-inverted",
        "select branch order",
        "passes/discharge/state.py",
        '"select", [mask, positions[0], splat(shape[0])]',
        '"select", [mask, splat(shape[0]), positions[0]]',
        "masked array store: the masked-on lanes are the ones sent out of range",
    ),
    Mutant(
        "view-transpose-not-inverted",
        "transpose permutation",
        "passes/discharge/views.py",
        "out, view.loc, permutation=inverse)",
        "out, view.loc, permutation=perm)",
        "a write through a transpose view is pushed back with the permutation, not its "
        "inverse (differs only for permutations that are not their own inverse, rank >= 3)",
    ),
    Mutant(
        "view-cache-not-invalidated",
        "dropped write-back",
        "passes/discharge/views.py",
        "        root.derived = {}  # what it remembered was derived from the old value\n",
        "",
        "a write keeps the root's remembered windows, so a later read of the same window "
        "returns the value before the write",
    ),
    Mutant(
        "region-write-back-dropped",
        "dropped write-back",
        "passes/discharge/regions.py",
        "        group.write_back(scope, final)\n",
        "        pass\n",
        "a ref written inside a loop, cond or kept run_scoped keeps its value from before",
    ),
    Mutant(
        "group-written-needs-all",
        "wrong comparison",
        "passes/discharge/regions.py",
        "group.written = any(pos in writes for pos in members)",
        "group.written = all(pos in writes for pos in members)",
        "operands aliasing one buffer count as written only if every one of them is written",
    ),
    Mutant(
        "call-write-back-dropped",
        "dropped write-back",
        "passes/discharge/control.py",
        "                Access(scope, h, op.loc).write(final)\n",
        "                pass\n",
        "a callee's writes to a discharged ref are lost at the call",
    ),
    Mutant(
        "while-cond-final-writes-dropped",
        "dropped write-back",
        "passes/discharge/control.py",
        '    scope.inline(consts, op.group("cond_consts"))\n',
        "    pass\n",
        "the writes of a while condition's last (loop-ending) evaluation are dropped",
    ),
    Mutant(
        "accumulate-not-a-write",
        "wrong comparison",
        "passes/discharge/engine.py",
        "return {e.input for e in effects if e.kind is not READ}",
        "return {e.input for e in effects if e.kind.value == 'write'}",
        "refs a region only accumulates into (addupdate) are not carried out of it",
    ),
    Mutant(
        "discharged-results-reversed",
        "swapped operands",
        "passes/discharge/engine.py",
        "results += [root.value for root in roots]",
        "results += [root.value for root in reversed(roots)]",
        "the final values of discharged refs come back in reverse parameter order",
    ),
    # -- passes/cleanup -------------------------------------------------------------------------
    Mutant(
        "apart-off-by-one",
        "off-by-one window",
        "passes/cleanup_patterns.py",
        "return a.stop <= b.start or b.stop <= a.start",
        "return a.stop <= b.start + 1 or b.stop <= a.start + 1",
        "static windows overlapping by one element count as disjoint (reads skip a write)",
    ),
    Mutant(
        "relative-off-by-one",
        "off-by-one window",
        "passes/cleanup_patterns.py",
        "if rem or not 0 <= offset < w.size:",
        "if rem or not 0 <= offset <= w.size:",
        "an int read one past a written window is forwarded from the update",
    ),
    Mutant(
        "compose-transpose-order",
        "transpose permutation",
        "passes/cleanup_patterns.py",
        'attrs["permutation"] = tuple(first[p] for p in then)',
        'attrs["permutation"] = tuple(then[p] for p in first)',
        "two transposes fold into the composition in the wrong order (differs when the "
        "permutations do not commute, rank >= 3)",
    ),
    Mutant(
        "select-known-swapped",
        "select branch order",
        "passes/cleanup_patterns.py",
        "return on_true if bits.size == 0 or bool(bits.flat[0]) else on_false",
        "return on_false if bits.size == 0 or bool(bits.flat[0]) else on_true",
        "a select with a constant mask folds to the branch the mask does not pick",
    ),
    Mutant(
        "overwrite-swapped-operands",
        "swapped operands",
        "passes/cleanup_patterns.py",
        'pair(_relative, earlier.attrs["indexer"], op.attrs["indexer"])',
        'pair(_relative, op.attrs["indexer"], earlier.attrs["indexer"])',
        "a write is dropped when a later write covers a smaller window inside it",
    ),
    Mutant(
        "same-window-ignores-dynamic",
        "wrong comparison",
        "passes/cleanup_patterns.py",
        'return a.attrs["indexer"] == b.attrs["indexer"] and '
        'a.group("indices") == b.group("indices")',
        'return a.attrs["indexer"] == b.attrs["indexer"]',
        "windows with one indexer but different dynamic starts count as the same window",
    ),
    Mutant(
        "cleanup-cond-index-unclamped",
        "dropped clamp",
        "passes/cleanup.py",
        "op.regions[min(max(index or 0, 0), len(op.regions) - 1)]",
        "op.regions[min(index or 0, len(op.regions) - 1)]",
        "a cond with a negative constant index is inlined as its last branch (Python indexing)",
    ),
    Mutant(
        "cleanup-for-two-trips-inlined",
        "off-by-one window",
        "passes/cleanup.py",
        "if lower is None or upper is None or upper - lower > 1:",
        "if lower is None or upper is None or upper - lower > 2:",
        "a for loop of two constant trips is inlined as one trip",
    ),
    Mutant(
        "prune-drops-accumulate",
        "dropped write-back",
        "passes/cleanup.py",
        "return all(e.kind is READ for e in self.effects.op(op))",
        "return all(e.kind.value != 'write' for e in self.effects.op(op))",
        "an unused region op that only accumulates into a ref is pruned",
    ),
    # -- passes/batching (the CPU kernel path's batched grid) -----------------------------------
    Mutant(
        "batched-reduce-wrong-axis",
        "wrong reduction axis",
        "passes/batching/arrays.py",
        "positions = tuple(slots[a] for a in sorted(reduced))",
        "positions = tuple(sorted(reduced))",
        "a batched reduction reduces positions of the original axes, batch axes included",
        unreachable=_BATCHED,
    ),
    Mutant(
        "batched-transpose-perm",
        "transpose permutation",
        "passes/batching/arrays.py",
        "        full[slot] = slots[p]\n",
        "        full[slot] = p\n",
        "a batched transpose permutes by original axis numbers, ignoring the batch axes",
        unreachable=_BATCHED,
    ),
    Mutant(
        "batched-cond-select-lt",
        "wrong comparison",
        "passes/batching/control.py",
        'emit(builder, "eq", [index, _splat(bt, builder, k, index_type)])',
        'emit(builder, "eq", [index, _splat(bt, builder, k + 1, index_type)])',
        "a cond whose index differs between batch points picks branch k+1 at index k",
    ),
    Mutant(
        "batched-float-reduce-allowed",
        "wrong rounding dtype",
        "passes/batching/exactness.py",
        "if math.prod(x.shape) < YNN_MIN_ELEMENTS:",
        "if False:",
        "float sums of small blocks are batched, so XLA may add them in another order",
        unreachable=_BATCHED + " (wide_f32_row_sum, bit for bit against upstream's per-block sums)",
    ),
    Mutant(
        "batched-spelled-sum-reversed",
        "swapped operands",
        "passes/batching/arrays.py",
        "    for k in range(1, n):\n",
        "    for k in reversed(range(1, n)):\n",
        "a small float sum written out in XLA's order adds its terms right to left instead",
        unreachable=_BATCHED + " (wide_f32_row_sum, bit for bit against upstream's per-block sums)",
    ),
    Mutant(
        "own-dot-deeper",
        "wrong constant",
        "passes/batching/exactness.py",
        "OWN_DOT_DEPTH = 256",
        "OWN_DOT_DEPTH = 512",
        "batched f32 dots 512 deep run in XLA's own dot kernel too, which adds them up in "
        "another order than YNNPACK",
        unreachable=_BATCHED + " (deep_hoisted_dots, bit for bit against upstream)",
    ),
    Mutant(
        "recompute-exp",
        "wrong rounding dtype",
        "passes/batching/recompute.py",
        '"select", "convert", "broadcast_in_dim"}',
        '"select", "convert", "broadcast_in_dim", "exp"}',
        "past a chunked op, exp is computed again by XLA, which rounds it otherwise than "
        "YNNPACK's graph did",
        unreachable=_BATCHED + " (exp_past_a_break, bit for bit against upstream)",
    ),
    # -- lowering/stablehlo ------------------------------------------------------------------
    Mutant(
        "binary-swapped-operands",
        "swapped operands",
        "lowering/stablehlo/arrays.py",
        "return [_BINARY[op.name](x, y).result]",
        "return [_BINARY[op.name](y, x).result]",
        "binary ops lower with their operands swapped (sub computes y - x)",
    ),
    Mutant(
        "int-div-by-zero-zero",
        "wrong constant",
        "lowering/stablehlo/arrays.py",
        'on_zero = emit.like(-1, x) if op.name == "div" else x',
        'on_zero = emit.like(0, x) if op.name == "div" else x',
        "integer division by zero gives 0 instead of -1",
    ),
    Mutant(
        "pow-exponent-zero-negative",
        "wrong comparison",
        "lowering/stablehlo/arrays.py",
        'negative = emit.compare(y, emit.like(0, y), "LT")',
        'negative = emit.compare(y, emit.like(0, y), "LE")',
        "integer pow treats exponent 0 as negative (x ** 0 = 0 for x != 1)",
        unreachable="the importer never emits an integer pow: lax.pow takes a float base, "
        "jnp.power of ints is a square-and-multiply chain and integer_pow is expanded; only "
        "the front end (x ** y on int arrays) makes one: the front-end check int_pow",
    ),
    Mutant(
        "reduce-max-identity",
        "wrong constant",
        "lowering/stablehlo/arrays.py",
        'return -np.inf if name == "reduce_max" else np.inf',
        'return np.inf if name == "reduce_max" else -np.inf',
        "float reduce_max starts from +inf (and reduce_min from -inf)",
    ),
    Mutant(
        "bf16-sum-not-widened",
        "wrong rounding dtype",
        "lowering/stablehlo/arrays.py",
        'dtype in ("bfloat16", "float16")\n    work',
        'dtype in ("float16",)\n    work',
        "a bfloat16 reduce_sum accumulates in bfloat16 instead of float32",
    ),
    Mutant(
        "dot-contracts-wrong-axis",
        "wrong reduction axis",
        "lowering/stablehlo/arrays.py",
        "DotDimensionNumbers.get(batch, batch, [k + 1], [k])",
        "DotDimensionNumbers.get(batch, batch, [k], [k])",
        "dot contracts the left operand's rows instead of its columns (a^T b)",
    ),
    Mutant(
        "literal-constant-nudged",
        "constant ~1e-6 relative",
        "lowering/stablehlo/arrays.py",
        "return [emit.constant(literal.array(), literal.type.dtype, literal.type.shape)]",
        "return [emit.constant((literal.array() * "
        + _NUDGED
        + ").astype(literal.array().dtype) if dtypes.is_float(literal.type.dtype) "
        "else literal.array(), literal.type.dtype, literal.type.shape)]",
        "every float constant of the compiled program is scaled by 1 + 1e-6",
    ),
    Mutant(
        "logistic-one-nudged",
        "constant ~1e-6 relative",
        "lowering/stablehlo/arrays.py",
        "    one = emit.like(1, x)\n    e = _in_float32",
        "    one = emit.like(1 + 1e-6, x)\n    e = _in_float32",
        "logistic computes (1 + 1e-6) / (1 + exp(-x))",
    ),
    Mutant(
        "float-to-int-top-ge",
        "wrong comparison",
        "lowering/stablehlo/arrays.py",
        '((info.max, high, "GT"), (info.min, low, "LT"))',
        '((info.max, high, "GE"), (info.min, low, "LT"))',
        "float to int: the largest float inside the range (2147483520 for f32) saturates",
    ),
    Mutant(
        "window-start-clamp-off-by-one",
        "off-by-one window",
        "lowering/stablehlo/indexed.py",
        "dyn[where.pos], types[where.pos].dtype, dim - indexing.span(entry), clamp)",
        "dyn[where.pos], types[where.pos].dtype, dim - indexing.span(entry) + 1, clamp)",
        "gather/scatter: a dynamic start is clamped one past the last valid start",
        unreachable=_GATHER_DYN,
    ),
    Mutant(
        "index-clamp-dropped",
        "dropped clamp",
        "lowering/stablehlo/indexed.py",
        "    return stablehlo.ClampOp(emit.like(0, value), value, emit.like(max(high, 0), value))"
        ".result",
        "    return value",
        "gather/scatter: dynamic starts and read indices are not clamped (XLA's gather clamps "
        "each slice itself; a strided window or a scatter start then differs)",
        unreachable=_GATHER_DYN + "; an array index XLA's gather clamps itself",
    ),
    Mutant(
        "scatter-array-index-clamped",
        "dropped clamp",
        "lowering/stablehlo/indexed.py",
        "value = _index(value, dtype, shape[d] - (0 if write else 1), clamp=not write)",
        "value = _index(value, dtype, shape[d] - (0 if write else 1), clamp=True)",
        "writes clamp a negative integer-array index to 0 instead of dropping the update",
    ),
    Mutant(
        "strided-gather-no-stride",
        "off-by-one window",
        "lowering/stablehlo/indexed.py",
        "scaled = stablehlo.MulOp(steps.result, emit.like(entry.stride, steps.result)).result",
        "scaled = steps.result",
        "a strided window on the gather/scatter path steps by 1",
    ),
    Mutant(
        "gather-transpose-not-inverted",
        "transpose permutation",
        "lowering/stablehlo/indexed.py",
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
        "lowering/stablehlo/indexed.py",
        "stablehlo.ReturnOp([stablehlo.AddOp(old, new).result if accumulate else new])",
        "stablehlo.ReturnOp([new])",
        "scatter_add overwrites instead of adding",
    ),
    Mutant(
        "for-loop-le",
        "off-by-one window",
        "lowering/stablehlo/control.py",
        'stablehlo.ReturnOp([emit.compare(i, hi, "LT")])',
        'stablehlo.ReturnOp([emit.compare(i, hi, "LE")])',
        "a for loop runs one trip too many",
    ),
    Mutant(
        "cond-branches-swapped",
        "select branch order",
        "lowering/stablehlo/control.py",
        "chosen = [branches[1], branches[0]]",
        "chosen = [branches[0], branches[1]]",
        "a two-branch cond runs branch 0 where the index picks branch 1, and back",
    ),
    Mutant(
        "cond-index-zero-ge",
        "wrong comparison",
        "lowering/stablehlo/control.py",
        '"GT" if dtypes.is_signed(dtype) else "NE"',
        '"GE" if dtypes.is_signed(dtype) else "NE"',
        "a two-branch cond with a signed index 0 runs branch 1",
    ),
    Mutant(
        "case-index-unclamped",
        "dropped clamp",
        "lowering/stablehlo/control.py",
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
        "lowering/stablehlo/scoped.py",
        "emit.constant(dtypes.fill_value(t.dtype), t.dtype, t.shape)",
        "emit.constant(0, t.dtype, t.shape)",
        "fresh scratch holds 0 instead of NaN (floats) or the minimum (ints) in compiled programs",
    ),
    Mutant(
        "excess-precision-allowed",
        "wrong rounding dtype",
        "lowering/jaxlib_shim.py",
        'CPU_COMPILE_OPTIONS = (("xla_allow_excess_precision", False),)',
        'CPU_COMPILE_OPTIONS = (("xla_allow_excess_precision", True),)',
        "XLA may keep bf16 chains in f32 instead of rounding every op",
    ),
    Mutant(
        "small-loop-route-on",
        "wrong constant",
        "lowering/jaxlib_shim.py",
        'CPU_BACKEND_OPTIONS = (("xla_cpu_small_while_loop_byte_threshold", "0"),)',
        'CPU_BACKEND_OPTIONS = (("xla_cpu_small_while_loop_byte_threshold", "1024"),)',
        "XLA's small-loop route is back at its default, where LLVM may fuse bf16 ops and skip "
        "a rounding",
    ),
    # -- the front ends: the importer (corpus, upstream fuzz) and tracing (kernels) --------------
    Mutant(
        "import-wrap-le",
        "wrong comparison",
        "minipallas/interop/indexers.py",
        'negative = scope.emit("lt", [i, scope.constant(0, dtype, shape)])',
        'negative = scope.emit("le", [i, scope.constant(0, dtype, shape)])',
        "an imported traced index 0 wraps to dim (then clamps to the last row)",
    ),
    Mutant(
        "import-constant-nudged",
        "constant ~1e-6 relative",
        "minipallas/interop/importer.py",
        "        array = to_dtype(value, dtype)\n        splat",
        "        array = to_dtype(np.asarray(value, np.float64) * (1 + 1e-6) "
        "if dtypes.is_float(dtype) else value, dtype)\n        splat",
        "every float constant of an imported jaxpr is scaled by 1 + 1e-6",
    ),
    Mutant(
        "trace-constant-nudged",
        "constant ~1e-6 relative",
        "minipallas/frontend/values.py",
        'return emit_array("constant", [], value=Literal.of(value, dtype))',
        'return emit_array("constant", [], value=Literal.of(np.asarray(value, np.float64) * '
        "(1 + 1e-6) if dtypes.is_float(dtype) else value, dtype))",
        "every float constant the front end traces (kernel bodies) is scaled by 1 + 1e-6",
    ),
    Mutant(
        "trace-weak-float-promotes",
        "wrong rounding dtype",
        "minipallas/frontend/promotion.py",
        'return other if dtypes.is_float(other) else "float32"',
        'return "float32"',
        "a Python float next to a bf16 array promotes it to f32 (rounded once at the end)",
    ),
    Mutant(
        "trace-wrap-le",
        "wrong comparison",
        "minipallas/frontend/values.py",
        "return where(i < 0, i + n, i)",
        "return where(i <= 0, i + n, i)",
        "a traced index 0 wraps to n (then clamps): kernel block starts computed by index maps",
    ),
    # -- minipallas/kernels: the CPU path of pallas_call -----------------------------------------
    Mutant(
        "grid-skips-first-point",
        "off-by-one window",
        "minipallas/kernels/programs/grid.py",
        "fori_loop(0, grid[len(indices)], body, ())",
        "fori_loop(1, grid[len(indices)], body, ())",
        "the loop program skips index 0 of every grid axis",
    ),
    Mutant(
        "grid-axes-reversed",
        "wrong reduction axis",
        "minipallas/kernels/programs/grid.py",
        "loop_nest(grid, [*indices, i], step)",
        "loop_nest(grid, [i, *indices], step)",
        "the loop program hands the grid indices to the body in reverse order",
    ),
    Mutant(
        "grid-block-start-off-by-one",
        "off-by-one window",
        "minipallas/kernels/programs/grid.py",
        "start = i if b is None or d in spec.element_dims else i * b\n",
        "start = i if b is None or d in spec.element_dims else i * b + 1\n",
        "the loop program's blocks start one element late",
    ),
    Mutant(
        "vgrid-output-revisit-batched",
        "wrong comparison",
        "minipallas/kernels/programs/vectorized_grid.py",
        "if len(identities) != 1 if k >= n_in else len(identities) > 1:",
        "if len(identities) > 1:",
        "an axis along which an output block is revisited (an accumulator) is batched",
    ),
    Mutant(
        "vgrid-axes-reversed",
        "wrong reduction axis",
        "minipallas/kernels/programs/vectorized_grid.py",
        "return _loop_nest(sizes, [*indices, i], carry, step, unroll)",
        "return _loop_nest(sizes, [i, *indices], carry, step, unroll)",
        "the batched program's sequential loops take their indices in reverse order",
    ),
)

BY_NAME = {m.name: m for m in MUTANTS}
