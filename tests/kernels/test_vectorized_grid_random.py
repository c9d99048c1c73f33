"""Property: on random kernels, the batched CPU program means what the loop program means.

Kernels from ``minipallas.tools.generate.kernels`` (random grids, squeezed and partial blocks, index
maps that are a grid index, a constant or computed, accumulating and overwriting bodies that
use ``program_id``, persistent scratch reset per sweep or only once). Both programs run under
the reference interpreter on the same inputs and must agree bit for bit: whichever axes the
plan batches, the answer must not change. (Dropping the scratch-liveness rule of
``vectorized_grid`` makes this fail within the CI's examples; dropping the scratch-prefix rule
takes ~1500 examples, and ``test_vectorized_grid.py`` checks it directly.)
"""

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from minipallas.ir.interpret import interpret
from minipallas.ir.verifier import verify
from minipallas.kernels.programs.grid import grid_program
from minipallas.kernels.programs.vectorized_grid import (
    vectorized_grid_plan,
    vectorized_grid_program,
)
from minipallas.tools.generate.check import same_bits
from minipallas.tools.generate.kernels import kernel_inputs, minipallas_call, random_kernel
from minipallas.tools.generate.strategies import DrawChoices


@st.composite
def kernels(draw):
    return random_kernel(DrawChoices(draw))


@settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(kernels(), st.integers(0, 2**16))
def test_the_batched_grid_program_is_the_loop_program(spec, seed):
    note(spec.describe())
    args = kernel_inputs(spec, seed)
    kernel = minipallas_call(spec).trace(*args)
    program = vectorized_grid_program(kernel)
    note(f"batched axes: {vectorized_grid_plan(kernel)}")
    if program is None:
        return
    verify(program)
    expected = interpret(grid_program(kernel), *args)
    got = interpret(program, *args)
    for g, e in zip(got, expected, strict=True):
        assert same_bits(g, e)
