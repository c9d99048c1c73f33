"""``pallas_call(..., grid_names=..., collectives="simulate")``: every program of the grid runs
together in the multi-program interpreter (kernels/collective/simulate.py, issue 15)."""

import numpy as np
import pytest
from kernel_helpers import assert_same_bits

import minipallas as mp
import minipallas.numpy as jnp
from minipallas import tpu
from minipallas.ir.collectives import CollectiveAxesUnsupported
from minipallas.ir.errors import RaceError, TraceError
from minipallas.kernels.programs.grid import grid_program
from minipallas.tools.corpora.suite import BY_NAME

N = 4
SPEC = mp.BlockSpec((1, 128), lambda i: (i, 0))
OUT = mp.ArrayType((N, 128), jnp.float32)

# kernels whose programs share nothing: each writes its own output blocks, reads only inputs
INDEPENDENT = [
    "add", "add_partial_blocks", "bias_relu", "scale_1d", "softmax", "staged_run_scoped",
    "batched_squeezed", "pick_rows", "bf16_gelu", "grid_ids", "transpose_blocks",
    "chunked_loop", "int_ops", "reversed_blocks", "layer_norm_partial", "compare_int8",
]  # fmt: skip


def _names(case):
    return tuple(f"a{k}" for k in range(len(case.grid)))


def shared_sum(x_ref, o_ref):
    """Each program writes its row of a shared buffer, meets the others, sums the buffer."""

    def body(shared):
        i = mp.axis_index("x")
        shared[mp.ds(i, 1), :] = x_ref[...]
        mp.barrier("x")
        o_ref[...] = shared[...].sum(axis=0, keepdims=True)

    mp.run_scoped(body, tpu.VMEM((N, 128), jnp.float32), collective_axes=("x",))


def _call(kernel, **options):
    return mp.pallas_call(kernel, OUT, grid=(N,), in_specs=[SPEC], out_specs=SPEC,
                          grid_names=("x",), **options)  # fmt: skip


def test_a_collective_kernel_runs_under_simulate():
    x = np.random.default_rng(0).standard_normal((N, 128)).astype(np.float32)
    out = _call(shared_sum, collectives="simulate")(x)
    total = np.zeros((1, 128), np.float32)
    for row in x:  # the kernel's sum over the shared buffer's rows, in row order
        total = total + row
    assert_same_bits(out, np.broadcast_to(total, (N, 128)))


def test_by_default_the_collective_kernel_is_still_rejected_with_upstreams_message():
    with pytest.raises(CollectiveAxesUnsupported) as e:
        _call(shared_sum)(np.zeros((N, 128), np.float32))
    assert str(e.value) == "run_scoped interpret rule does not support collective axes"


@pytest.mark.parametrize("name", INDEPENDENT)
def test_programs_that_share_nothing_give_the_loop_programs_bits(name):
    """Against the loop program on the same reference interpreter (XLA may sum floats in
    another order; the interpreter's order is the same both ways)."""
    case = BY_NAME[name]
    args = case.inputs()
    call = case.minipallas(grid_names=_names(case), collectives="simulate")
    expected = mp.interpret(grid_program(call.trace(*args)), *args)
    got = call(*args)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected, strict=True):
        assert_same_bits(g, e)


def test_accumulating_across_a_grid_axis_races_under_simulate():
    """row_sum's programs along axis 1 read and write one output block: run together, that is
    a race (the loop program runs them one after another)."""
    case = BY_NAME["row_sum"]
    with pytest.raises(RaceError, match="shared float32") as e:
        case.minipallas(grid_names=("i", "j"), collectives="simulate")(*case.inputs())
    assert e.value.first[0] in ("get", "swap") and e.value.first[2] != e.value.second[2]


def test_axis_index_is_program_id_on_every_path():
    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + mp.axis_index("x").astype(jnp.float32)

    def by_id(x_ref, o_ref):
        o_ref[...] = x_ref[...] + mp.program_id(0).astype(jnp.float32)

    spec = mp.BlockSpec((8, 128), lambda i: (i, 0))
    calls = [
        mp.pallas_call(
            k,
            mp.ArrayType((32, 128), jnp.float32),
            grid=(4,),
            in_specs=[spec],
            out_specs=spec,
            grid_names=("x",),
            name="k",
        )  # fmt: skip
        for k in (kernel, by_id)
    ]
    x = np.random.default_rng(1).standard_normal((32, 128)).astype(np.float32)
    assert_same_bits(calls[0](x), calls[1](x))
    for target in ("tpu", "gpu"):
        texts = [c.lower(x, target=target).as_text(debug_info=False) for c in calls]
        assert texts[0] == texts[1]


def test_misuse_is_refused_with_a_fix():
    with pytest.raises(TraceError, match="needs the grid axes named") as e:
        mp.pallas_call(shared_sum, OUT, grid=(N,), collectives="simulate")
    assert "grid_names" in e.value.fix
    with pytest.raises(TraceError, match="is not a mode"):
        _call(shared_sum, collectives="always")
    with pytest.raises(TraceError, match="one distinct name per grid axis"):
        mp.pallas_call(shared_sum, OUT, grid=(N,), grid_names=("x", "y"))
    with pytest.raises(TraceError, match=r"the grid's axes are named \('x',\)"):
        _call(lambda x_ref, o_ref: mp.axis_index("y"))(np.zeros((N, 128), np.float32))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_interleavings_give_the_lockstep_bits(seed):
    x = np.random.default_rng(seed).standard_normal((N, 128)).astype(np.float32)
    call = _call(shared_sum)
    assert_same_bits(call.simulate(x, schedule=seed), call.simulate(x))


def test_simulate_needs_named_axes():
    call = mp.pallas_call(shared_sum, OUT, grid=(N,), in_specs=[SPEC], out_specs=SPEC)
    with pytest.raises(TraceError, match="simulate needs the grid axes named"):
        call.simulate(np.zeros((N, 128), np.float32))


@pytest.mark.parametrize(
    "target, message",
    [
        ("tpu", "run_scoped lowering does not support collective axes"),
        ("gpu", "Unimplemented primitive in Pallas Triton lowering: run_scoped."),
    ],
)
def test_kernel_targets_keep_rejecting_with_upstreams_messages(target, message):
    def tiles(x_ref, o_ref):
        def body(shared):
            shared[mp.ds(mp.axis_index("x") * 8, 8), :] = x_ref[...]
            mp.barrier("x")
            o_ref[...] = shared[0:8, :]

        mp.run_scoped(body, tpu.VMEM((8 * N, 128), jnp.float32), collective_axes=("x",))

    spec = mp.BlockSpec((8, 128), lambda i: (i, 0))
    call = mp.pallas_call(tiles, mp.ArrayType((8 * N, 128), jnp.float32), grid=(N,),
                          in_specs=[spec], out_specs=spec, grid_names=("x",),
                          collectives="simulate")  # fmt: skip
    with pytest.raises(CollectiveAxesUnsupported) as e:
        call.lower(np.zeros((8 * N, 128), np.float32), target=target)
    assert str(e.value).startswith(message)
