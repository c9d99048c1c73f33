"""Mutants planted in the front ends (the importer, tracing) and the CPU path of
``pallas_call`` (``mutants.py`` gathers the catalogue)."""

from __future__ import annotations

from bench.mutation.mutant import Mutant

FRONT_ENDS: tuple[Mutant, ...] = (
    # -- the front ends: the importer (corpus, upstream fuzz) and tracing (kernels) --------------
    Mutant(
        "import-wrap-le",
        "wrong comparison",
        "minipallas/interop/importer/indexers.py",
        'negative = scope.emit("lt", [i, scope.constant(0, dtype, shape)])',
        'negative = scope.emit("le", [i, scope.constant(0, dtype, shape)])',
        "an imported traced index 0 wraps to dim (then clamps to the last row)",
    ),
    Mutant(
        "import-constant-nudged",
        "constant ~1e-6 relative",
        "minipallas/interop/importer/engine.py",
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
