"""The kernel's way to its CPU program, stage by stage, is registered passes: run one at a
time from the text the previous stage prints (parsed, verified after each pass), they give
the IR the kernel path builds internally (``cpu_program(after_each=...)``), the same text at
every stage, and the same bits through the reference interpreter and XLA:CPU."""

import re

import numpy as np
import pytest
from kernel_helpers import assert_same_bits

import minipallas as mp
from minipallas.ir import dtypes
from minipallas.ir.parser import parse_module
from minipallas.ir.printer import print_function
from minipallas.ir.verifier import verify
from minipallas.kernels.programs.choose import cpu_program
from minipallas.kernels.programs.vectorized_grid import pure_body_pipeline
from minipallas.lowering.runtime.compiled import compile
from minipallas.passes.pipeline import pass_names, run
from minipallas.tools.corpora.suite import BY_NAME

# (suite kernel, whether its sequential axis leaves work to hoist)
CASES = [
    ("add", False),
    ("bias_relu", False),
    ("grid_ids", False),
    ("staged_run_scoped", False),
    ("chunked_loop", False),
    ("bf16_gelu", False),
    ("int_ops", False),
    ("compare_int8", False),
    ("masked_col_max", True),
    ("matmul", True),
]


def internal_stages(kernel):
    stages = []
    cpu_program(kernel, after_each=lambda name, fn: stages.append((name, fn)))
    return stages


def arguments(fn, grid, seed=0):
    """Random arrays for ``fn``'s parameters; the grid indices at the grid's last point."""
    rng = np.random.default_rng(seed)
    args = [np.int32(n - 1) for n in grid]
    for p in fn.params[len(grid) :]:
        dtype = dtypes.to_numpy(p.type.dtype)
        if np.issubdtype(dtype, np.floating):
            args.append(rng.standard_normal(p.type.shape).astype(dtype))
        elif dtype == np.bool_:
            args.append(rng.random(p.type.shape) < 0.5)
        else:
            args.append(rng.integers(-100, 100, p.type.shape).astype(dtype))
    return args


@pytest.mark.parametrize(("name", "hoists"), CASES, ids=[c[0] for c in CASES])
def test_each_stage_rerun_from_its_printed_input_gives_the_kernel_paths_ir(name, hoists):
    case = BY_NAME[name]
    kernel = case.minipallas().trace(*case.inputs())
    grid = "x".join(map(str, kernel.grid))
    pipeline = pure_body_pipeline(kernel)
    assert pipeline == (
        f"bind-grid{{grid={grid}}},discharge,cleanup,drop-inputs{{count={kernel.num_inputs}}},"
        "cleanup"
    )
    if hoists:
        pipeline += f",hoist-invariant{{grid={grid},inputs={kernel.num_inputs}}}"
    stages = internal_stages(kernel)
    assert [n for n, _ in stages] == [*pass_names(pipeline), "batch-grid", "cpu-program"]

    fn = kernel.body
    for item, (stage, expected) in zip(re.split(r",(?![^{]*})", pipeline), stages, strict=False):
        parsed = parse_module(print_function(fn)).entry
        fn = run(parsed, item, verify=True)
        verify(fn)
        assert print_function(fn) == print_function(expected), f"after {stage}"

    _, expected = stages[len(pass_names(pipeline)) - 1]
    args = arguments(fn, kernel.grid)
    for got, want in zip(mp.interpret(fn, *args), mp.interpret(expected, *args), strict=True):
        assert_same_bits(got, want)
    for got, want in zip(compile(fn)(*args), compile(expected)(*args), strict=True):
        assert_same_bits(got, want)


def test_a_kernel_on_loops_shows_its_bound_body_then_its_program():
    """A kernel whose grid points are not independent (it writes its input) runs as loops:
    its stages are the bound body and the program."""
    case = BY_NAME["input_written"]
    kernel = case.minipallas().trace(*case.inputs())
    stages = internal_stages(kernel)
    assert [n for n, _ in stages] == ["bind-grid", "cpu-program"]
    grid = "x".join(map(str, kernel.grid))
    bound = run(parse_module(print_function(kernel.body)).entry, f"bind-grid{{grid={grid}}}")
    assert print_function(bound) == print_function(stages[0][1])


def test_fast_mode_shows_the_pure_body_it_sums_then_its_program():
    """match_upstream=False sums a blocked matmul's k axis at once (accumulation.py) from the
    same pure body: its passes, then the program, with no batch-grid in between."""
    case = BY_NAME["matmul"]
    kernel = case.minipallas(match_upstream=False).trace(*case.inputs())
    stages = []
    cpu_program(kernel, match_upstream=False, after_each=lambda n, f: stages.append((n, f)))
    assert [n for n, _ in stages] == [*pass_names(pure_body_pipeline(kernel)), "cpu-program"]
    program = stages[-1][1]
    assert not any(
        op.name in ("for", "while") for f in (program, *program.callees()) for op in f.walk()
    )
