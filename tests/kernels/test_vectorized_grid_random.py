"""Property: on random kernels, the batched CPU program means what the loop program means.

Random grids (1-3 axes), block shapes (squeezed dimensions and partial blocks included),
index maps (a grid index, a constant, a grid index of another axis, a computed index that
rules batching out), accumulating and overwriting bodies that use ``program_id``, and
persistent scratch. Both programs run under the reference interpreter on the same inputs and
must agree bit for bit; whichever axes the plan batches, the answer must not change.
"""

import numpy as np
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import minipallas as mp
import minipallas.numpy as mnp
from minipallas.generate.check import same_bits
from minipallas.ir.interpret import interpret
from minipallas.ir.verifier import verify
from minipallas.kernels.grid import grid_program
from minipallas.kernels.vectorized_grid import vectorized_grid_plan, vectorized_grid_program


@st.composite
def kernels(draw):
    grid = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    rank = draw(st.integers(1, 2))
    block = tuple(draw(st.sampled_from([None, 1, 2, 4])) for _ in range(rank))
    if all(b is None for b in block):
        block = (*block[:-1], 2)
    n_axes = len(grid)

    def index_map(output=False):
        """Outputs mostly take distinct grid indices (what lets an axis batch)."""
        choices = ["axis"] * (6 if output else 2) + ["const", "computed"]
        kinds = [draw(st.sampled_from(choices)) for _ in range(rank)]
        order = draw(st.permutations(range(n_axes)))
        axes = [order[d % n_axes] for d in range(rank)]

        def f(*ids):
            out = []
            for kind, a in zip(kinds, axes, strict=True):
                if kind == "axis":
                    out.append(ids[a])
                elif kind == "const":
                    out.append(0)
                else:
                    out.append((ids[a] + 1) // 2)
            return tuple(out)

        return f, kinds, axes

    def array_shape():
        shape = []
        for b in block:
            count = draw(st.integers(1, 4))
            partial = draw(st.booleans()) and b not in (None, 1)
            shape.append(count if b is None else count * b - (1 if partial else 0))
        return tuple(shape)

    n_in = draw(st.integers(1, 2))
    ins = [(array_shape(), *index_map()) for _ in range(n_in)]
    out = (array_shape(), *index_map(output=True))
    accumulate = draw(st.booleans())
    scratch = draw(st.sampled_from([None, "reset", "reset", "running"]))
    scale_axis = draw(st.integers(0, n_axes - 1))
    reset_axis = draw(st.integers(0, n_axes - 1))
    return grid, block, ins, out, accumulate, (scratch, reset_axis), scale_axis


def _build(grid, block, ins, out, accumulate, scratch, scale_axis):
    def body(*refs):
        x_refs, o_ref = refs[: len(ins)], refs[len(ins)]
        value = x_refs[0][...] * 2.0
        for x in x_refs[1:]:
            value = value + x[...]
        value = value + mp.program_id(scale_axis).astype(mnp.float32)
        kind, reset_axis = scratch
        if kind:  # reset at the start of each sweep of one axis, or only at the very start
            s_ref = refs[-1]
            first = mp.program_id(reset_axis) == 0
            if kind == "running":
                first = mp.program_id(0) + mp.program_id(len(grid) - 1) == 0

            @mp.when(first)
            def _():
                s_ref[...] = mnp.zeros(s_ref.shape, mnp.float32)

            s_ref[...] += value
            value = s_ref[...]
        if accumulate:
            o_ref[...] += value
        else:
            o_ref[...] = value

    ref_shape = tuple(b for b in block if b is not None)
    return mp.pallas_call(
        body,
        mp.ArrayType(out[0], "float32"),
        grid=grid,
        in_specs=[mp.BlockSpec(block, f) for _, f, _, _ in ins],
        out_specs=mp.BlockSpec(block, out[1]),
        scratch_shapes=[mp.tpu.VMEM(ref_shape, mnp.float32)] if scratch[0] else [],
    )


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(kernels(), st.integers(0, 2**16))
def test_the_batched_grid_program_is_the_loop_program(spec, seed):
    grid, block, ins, out, *_ = spec
    note(f"grid={grid} block={block} ins={[(s, k, a) for s, _, k, a in ins]} out={out[0], out[2:]}")
    call = _build(*spec)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(shape).astype(np.float32) for shape, *_ in ins]
    kernel = call.trace(*args)
    program = vectorized_grid_program(kernel)
    note(f"batched axes: {vectorized_grid_plan(kernel)}")
    if program is None:
        return
    verify(program)
    expected = interpret(grid_program(kernel), *args)
    got = interpret(program, *args)
    for g, e in zip(got, expected, strict=True):
        assert same_bits(g, e)
