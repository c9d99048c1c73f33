"""The parameter corpus of issue 46 ("every parameter upstream honours is honoured or refused"):
one small TPU kernel per parameter upstream's Mosaic lowering reads, each an upstream Pallas
program run two ways on the chip, ``jax.jit(f)`` and ``jax.jit(on_tpu(f))``, with what must
hold between them (``param_op_cases.py``'s doc: ``same-bits``, ``both-refuse``,
``beyond-upstream``).

``PARAM_CASES`` gathers the primitives' parameters (``param_op_cases.OP_CASES``: dot_general,
convert_element_type, round, the reductions, roll, the transcendentals and their ``accuracy=``,
reciprocal, the powers, clamp, select_n, iota, mul) and, here, the call's own: the grid and the
grid queries (``program_id``, ``num_programs``, ``multiple_of`` in the body and in an index map),
the block specs (squeezed dims, ``pl.Element`` windows, ``pipeline_mode``, memory spaces, scalar
prefetch), the compiler params and the custom call's fields (``cost_estimate``, ``metadata``,
``name``, ``input_output_aliases``). ``tests/kernels/test_param_cases.py`` checks every case
without a chip; ``python -m bench.chip.tpu_params`` runs them on one.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from minipallas.tools.corpora.param_op_cases import (
    OP_CASES,
    TILE,
    TN,
    ParamCase,
    X,
    call,
    dot,
    f64,
    inputs,
    normal,
    ref_dot,
    refused,
)

F32 = jnp.float32
ROWS = pl.BlockSpec((8, 128), lambda i: (i, 0))
TWO_TILES = ((16, 128), F32)


def _np_tiles(fn: Any, tiles: int = 2) -> Any:
    """A reference over (8, 128) row tiles: ``fn(tile, i)`` for each."""
    return lambda x: np.concatenate([fn(f64(x[i * 8 : i * 8 + 8]), i) for i in range(tiles)])


# ----- the grid and its queries -----


def _scaled(x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] * 2.0 + pl.program_id(0).astype(F32)


def _two_ids(x_ref: Any, o_ref: Any) -> None:
    i, j = pl.program_id(0), pl.program_id(1)
    o_ref[...] = x_ref[...] + (i * 10 + j).astype(F32)


def _np_two_ids(x: np.ndarray) -> np.ndarray:
    rows, cols = np.indices(x.shape)
    return f64(x) + (rows // 8) * 10 + cols // 128


def _counts(x_ref: Any, o_ref: Any) -> None:
    steps = pl.num_programs(0).astype(F32)  # a value: the grid's size is traced
    o_ref[...] = x_ref[...] * steps + pl.program_id(0).astype(F32)


def _dynamic_grid(interpret: bool) -> Any:
    """A grid as long as ``n[0]``, a traced value (``num_programs`` of a static grid is a
    Python int, no primitive)."""

    def f(n: Any, x: Any) -> Any:
        call = pl.pallas_call(_counts, jax.ShapeDtypeStruct(*TWO_TILES), grid=(n[0],),
                              in_specs=[ROWS], out_specs=ROWS, interpret=interpret)  # fmt: skip
        return call(x)

    return f


def _dynamic_rows(x_ref: Any, o_ref: Any) -> None:
    """A window of the whole input at a row offset the compiler is told is a multiple of 8."""
    start = pl.multiple_of(pl.program_id(0) * 8, 8)
    o_ref[...] = x_ref[pl.ds(start, 8), :] * 3.0


def _every_other(i: Any) -> tuple[Any, Any]:
    return pl.multiple_of(i * 2, 2), 0


GRID_2X2 = {
    "grid": (2, 2),
    "in_specs": [pl.BlockSpec((8, 128), lambda i, j: (i, j))],
    "out_specs": pl.BlockSpec((8, 128), lambda i, j: (i, j)),
}
TILES = {"grid": (2,), "in_specs": [ROWS], "out_specs": ROWS}
GRID = [
    ParamCase("grid_1d_program_id", "grid (2,) program_id(0)",
              call(_scaled, TWO_TILES, **TILES), inputs(normal(16, 128)),
              _np_tiles(lambda t, i: t * 2 + i)),
    ParamCase("grid_2d_program_ids", "grid (2, 2) program_id(0), program_id(1)",
              call(_two_ids, ((16, 256), F32), **GRID_2X2), inputs(normal(16, 256)),
              _np_two_ids),
    ParamCase("grid_dynamic_num_programs", "grid (n,) traced: num_programs(0), program_id(0)",
              _dynamic_grid, inputs(lambda rng: np.array([2], np.int32), normal(16, 128)),
              lambda n, x: _np_tiles(lambda t, i: t * 2 + i)(x)),
    ParamCase("grid_multiple_of_body", "multiple_of values=(8,) in the body",
              call(_dynamic_rows, TWO_TILES, grid=(2,), in_specs=[pl.BlockSpec((16, 128),
                   lambda i: (0, 0))], out_specs=ROWS),
              inputs(normal(16, 128)), lambda x: f64(x) * 3, shows=("tpu.assume_multiple",)),
    ParamCase("grid_multiple_of_index_map", "multiple_of values=(2,) in an index map",
              call(_scaled, TWO_TILES, grid=(2,), in_specs=[pl.BlockSpec((8, 128), _every_other)],
                   out_specs=ROWS),
              inputs(normal(32, 128)),
              lambda x: np.concatenate([f64(x[0:8]) * 2, f64(x[16:24]) * 2 + 1]),
              shows=("tpu.assume_multiple",)),
]  # fmt: skip


# ----- block specs -----


def _double(x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] * 2.0


def _shifted_window(x_ref: Any, o_ref: Any) -> None:
    """Rows 8..16 of a 16-row element window that starts 8 rows before the block (Mosaic
    refuses low padding)."""
    o_ref[...] = x_ref[8:16, :] * 2.0


def _window_head(x_ref: Any, o_ref: Any) -> None:
    """The first 8 rows of a 16-row element window; the last step's window ends 8 rows past
    the array, in its padding."""
    o_ref[...] = x_ref[0:8, :] * 2.0


def _overlapping(x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[0:8, :] + x_ref[8:16, :] * 0.5


def _gather(idx_ref: Any, x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] + idx_ref[pl.program_id(0)].astype(F32)


def _scale_by_smem(s_ref: Any, x_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] * s_ref[0] + s_ref[1]


def _buffered(n: int, **options: Any) -> dict[str, Any]:
    mode = pl.Buffered(n, **options)
    spec = pl.BlockSpec((8, 128), lambda i: (i, 0), pipeline_mode=mode)
    return {"grid": (2,), "in_specs": [spec], "out_specs": ROWS}


def _gathered(idx: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.concatenate([f64(x[k * 8 : k * 8 + 8]) + i for i, k in enumerate(idx)])


def _indices(rng: np.random.Generator) -> np.ndarray:
    return rng.permutation(4)[:2].astype(np.int32)


ELEMENT = (pl.Element(16), pl.Element(128))
PADDED = (pl.Element(16, (0, 8)), pl.Element(128))
LOW_PADDED = (pl.Element(16, (8, 0)), pl.Element(128))
PREFETCH = pltpu.PrefetchScalarGridSpec(
    num_scalar_prefetch=1, grid=(2,),
    in_specs=[pl.BlockSpec((8, 128), lambda i, idx: (idx[i], 0))],
    out_specs=pl.BlockSpec((8, 128), lambda i, idx: (i, 0)),
)  # fmt: skip
SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)
BUFFERS = "Only single (1) and double (2) buffering are supported"
BLOCK_SPEC = [
    ParamCase("block_squeezed_none", "block_spec block_shape=(None, 8, 128)",
              call(_double, ((2, 8, 128), F32), grid=(2,),
                   in_specs=[pl.BlockSpec((None, 8, 128), lambda b: (b, 0, 0))],
                   out_specs=pl.BlockSpec((None, 8, 128), lambda b: (b, 0, 0))),
              inputs(normal(2, 8, 128)), lambda x: f64(x) * 2),
    ParamCase("block_squeezed_marker", "block_spec block_shape=(pl.squeezed, 8, 128)",
              call(_double, ((2, 8, 128), F32), grid=(2,),
                   in_specs=[pl.BlockSpec((pl.squeezed, 8, 128), lambda b: (b, 0, 0))],
                   out_specs=pl.BlockSpec((pl.squeezed, 8, 128), lambda b: (b, 0, 0))),
              inputs(normal(2, 8, 128)), lambda x: f64(x) * 2),
    ParamCase("block_element", "block_spec pl.Element(16) windows, overlapping",
              call(_overlapping, ((24, 128), F32), grid=(3,),
                   in_specs=[pl.BlockSpec(ELEMENT, lambda i: (i * 8, 0))], out_specs=ROWS),
              inputs(normal(32, 128)),
              lambda x: np.concatenate([f64(x[i * 8 : i * 8 + 8]) + f64(x[i * 8 + 8 : i * 8 + 16])
                                        * 0.5 for i in range(3)]),
              shows=("element_window",)),
    ParamCase("block_element_padding", "block_spec pl.Element(16, padding=(0, 8))",
              call(_window_head, ((32, 128), F32), grid=(4,),
                   in_specs=[pl.BlockSpec(PADDED, lambda i: (i * 8, 0))], out_specs=ROWS),
              inputs(normal(32, 128)), lambda x: f64(x) * 2,
              shows=("element_window<[0, 0], [8, 0]>",)),
    ParamCase("block_element_low_padding", "block_spec pl.Element(16, padding=(8, 0))",
              call(_shifted_window, ((32, 128), F32), grid=(4,),
                   in_specs=[pl.BlockSpec(LOW_PADDED, lambda i: (i * 8, 0))], out_specs=ROWS),
              inputs(normal(32, 128)), lambda x: f64(x) * 2,
              refused("Low padding not supported yet")),
    ParamCase("block_buffered_1", "block_spec pipeline_mode=Buffered(1)",
              call(_double, TWO_TILES, **_buffered(1)), inputs(normal(16, 128)),
              lambda x: f64(x) * 2, shows=("#tpu.pipeline_mode<synchronous>",)),
    ParamCase("block_buffered_2", "block_spec pipeline_mode=Buffered(2)",
              call(_double, TWO_TILES, **_buffered(2)), inputs(normal(16, 128)),
              lambda x: f64(x) * 2, shows=("#tpu.pipeline_mode<double_buffered>",)),
    ParamCase("block_buffered_3", "block_spec pipeline_mode=Buffered(3)",
              call(_double, TWO_TILES, **_buffered(3)), inputs(normal(16, 128)),
              lambda x: f64(x) * 2, refused(BUFFERS)),
    ParamCase("block_buffered_lookahead", "block_spec pipeline_mode=Buffered(2, use_lookahead)",
              call(_double, TWO_TILES, **_buffered(2, use_lookahead=True)),
              inputs(normal(16, 128)), lambda x: f64(x) * 2,
              refused("Lookahead is not supported")),
    ParamCase("block_scalar_prefetch", "block_spec PrefetchScalarGridSpec(num_scalar_prefetch=1)",
              call(_gather, TWO_TILES, grid_spec=PREFETCH),
              inputs(_indices, normal(32, 128)), _gathered),
    ParamCase("block_smem", "block_spec memory_space=SMEM",
              call(_scale_by_smem, TILE, in_specs=[SMEM, pl.BlockSpec()]),
              inputs(normal(2), X), lambda s, x: f64(x) * f64(s[0]) + f64(s[1])),
]  # fmt: skip


# ----- compiler params -----


def _params(**fields: Any) -> dict[str, Any]:
    return {**TILES, "compiler_params": pltpu.CompilerParams(**fields)}


def _transposed_dot(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
    o_ref[...] = dot(TN, preferred_element_type=F32)(x_ref[...], y_ref[...])


def _sum(x: np.ndarray) -> np.ndarray:
    return f64(x) * 2


DOUBLE = inputs(normal(16, 128))
PARAMS = [
    (
        "dimension_semantics_parallel",
        "dimension_semantics=('parallel',)",
        {"dimension_semantics": ("parallel",)},
        (),
    ),
    (
        "dimension_semantics_arbitrary",
        "dimension_semantics=('arbitrary',)",
        {"dimension_semantics": ("arbitrary",)},
        (),
    ),
    ("vmem_limit_bytes", "vmem_limit_bytes=32 MiB", {"vmem_limit_bytes": 32 << 20}, ()),
    (
        "flags",
        "flags={'XLA_TPU_FORCE_LP_LLO_SCHEDULER': True}",
        {"flags": {"XLA_TPU_FORCE_LP_LLO_SCHEDULER": True}},
        (),
    ),
    ("allow_input_fusion", "allow_input_fusion=(True,)", {"allow_input_fusion": (True,)}, ()),
    ("disable_bounds_checks", "disable_bounds_checks=True", {"disable_bounds_checks": True}, ()),
    ("has_side_effects", "has_side_effects=True", {"has_side_effects": True}, ()),
    (
        "internal_scratch",
        "internal_scratch_in_bytes=64 KiB",
        {"internal_scratch_in_bytes": 64 << 10},
        (),
    ),
    ("skip_device_barrier", "skip_device_barrier=True", {"skip_device_barrier": True}, ()),
    (
        "shape_invariant_numerics_off",
        "shape_invariant_numerics=False",
        {"shape_invariant_numerics": False},
        (),
    ),
]
COMPILER_PARAMS = [
    ParamCase(f"params_{name}", f"compiler_params {parameter}",
              call(_double, TWO_TILES, **_params(**fields)), DOUBLE, _sum, shows=shows)
    for name, parameter, fields, shows in PARAMS
] + [
    ParamCase("params_fuse_transposed_lhs", "compiler_params fuse_transposed_lhs_in_matmul=True",
              call(_transposed_dot, ((128, 128), F32), compiler_params=pltpu.CompilerParams(
                  fuse_transposed_lhs_in_matmul=True)),
              inputs(normal(128, 128), normal(128, 128)), ref_dot(TN),
              shows=("transpose_lhs_hint = true",)),
]  # fmt: skip


# ----- the custom call's fields -----


def _add_into(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
    o_ref[...] = x_ref[...] + y_ref[...]


COST = pl.CostEstimate(flops=16 * 128, transcendentals=0, bytes_accessed=3 * 16 * 128 * 4)
CUSTOM_CALL = [
    ParamCase("call_cost_estimate", "custom_call cost_estimate=CostEstimate(...)",
              call(_double, TWO_TILES, cost_estimate=COST, **TILES), DOUBLE, _sum),
    ParamCase("call_metadata", "custom_call metadata={'issue': '46'}",
              call(_double, TWO_TILES, metadata={"issue": "46"}, **TILES), DOUBLE, _sum),
    ParamCase("call_name", "custom_call name='param_named_kernel'",
              call(_double, TWO_TILES, name="param_named_kernel", **TILES), DOUBLE, _sum),
    ParamCase("call_input_output_aliases", "custom_call input_output_aliases={1: 0}",
              call(_add_into, TWO_TILES, input_output_aliases={1: 0}, grid=(2,),
                   in_specs=[ROWS, ROWS], out_specs=ROWS),
              inputs(normal(16, 128), normal(16, 128)), lambda x, y: f64(x) + f64(y)),
]  # fmt: skip

CALL_CASES: list[ParamCase] = [*GRID, *BLOCK_SPEC, *COMPILER_PARAMS, *CUSTOM_CALL]
PARAM_CASES: list[ParamCase] = [*OP_CASES, *CALL_CASES]
BY_NAME = {case.name: case for case in PARAM_CASES}
