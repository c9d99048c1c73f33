"""Kernels that span devices compiled to XLA collectives (issue 47): ``jax.jit(mp.on_devices(f))``
for a ``jax.shard_map`` over a ``pallas_call`` with remote copies gives the simulator's bits
and numpy's result on 4 and on 8 CPU devices (upstream's shipped ``ops/tpu/all_gather.py`` and
a kernel with a grid among them), each remote copy a ``collective-permute`` (or an
``all-gather`` where the target is computed from loop indices) in a program XLA runs on every
device, with no loop over the devices; communication that depends on data is refused with the
reason and runs in the simulator.

jax sees several CPU devices only when ``XLA_FLAGS`` says so before it starts, so the kernels
(``device_compile_cases.py``) run in a process of their own per device count; each case prints
its verdict as a JSON line.
"""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from device_cases import run_cases

from minipallas.interop import from_jaxpr, to_jax
from minipallas.ir import dtypes
from minipallas.ir.errors import MiniPallasError
from minipallas.ir.interpret import interpret
from minipallas.ir.parser import parse_module
from minipallas.kernels.devices import device_program

CASES = Path(__file__).with_name("device_compile_cases.py")
# no loop of their own (upstream's shipped all-gather unrolls its ring in Python; a shard_map
# with no kernel keeps its own body, a lax.ppermute)
STRAIGHT = ["right_permute", "shift_two_logical", "permute_along_y", "upstream_all_gather",
            "plain_ppermute"]  # fmt: skip
# one loop: a fori_loop over the ring's steps, or the kernel's grid (first_step_sends: its
# copy under pl.when on the grid step, a condition every device takes alike)
LOOPED = ["ring_all_gather", "ring_all_reduce", "chunked_permute", "first_step_sends"]


@pytest.fixture(scope="module", params=[4, 8], ids=["4-devices", "8-devices"])
def verdicts(request) -> dict:
    out = {}
    for v in run_cases(CASES, str(request.param), devices=request.param):
        assert v["devices"] == request.param
        out[v["case"]] = v
    return out


@pytest.mark.parametrize("case", [*STRAIGHT, *LOOPED, "all_to_all", "all_to_all_2d"])
def test_compiled_kernels_give_the_simulators_bits_and_numpys_result(verdicts, case):
    v = verdicts[case]
    if case == "upstream_all_gather" and v.get("simulate_error"):  # upstream's own bug
        assert v["simulate_error"] == "RaceError" and "semaphore" in v["simulate_text"], v
        assert v["numpy"] and v["partitions"], v  # compiled, each copy lands at its start
        return
    assert v.get("simulated_numpy") is True, v
    assert v["same_bits"] and v["numpy"], v
    assert v["partitions"], v  # one SPMD program over every device of the mesh


@pytest.mark.parametrize("case", [*STRAIGHT, *LOOPED])
def test_a_static_target_is_a_collective_permute_with_no_loop_over_devices(verdicts, case):
    v = verdicts[case]
    assert v["permute"] and not v["all_gather"], v
    assert v["loops"] == (1 if case in LOOPED else 0), v  # the kernel's own loop, no other


@pytest.mark.parametrize("case", ["all_to_all", "all_to_all_2d"])
def test_a_target_computed_from_the_loop_index_is_an_all_gather(verdicts, case):
    v = verdicts[case]
    assert v["all_gather"] and not v["permute"] and v["loops"] == 1, v


def test_lax_collectives_around_the_kernel_read_every_devices_row_by_an_all_gather(verdicts):
    v = verdicts["lax_around"]  # psum and pmax in the body: each an all-gather of the rows
    assert v.get("simulated_numpy") is True and v["same_bits"] and v["numpy"], v
    assert v["all_gather"] and v["permute"] and v["loops"] == 0, v


def test_compiled_ring_attention_gives_the_simulators_bits(verdicts):
    """exp, an online softmax's products and sums, a division by a broadcast: before
    ``to_jax(exact=True)`` and ``sum_order``, 2480 of 4096 elements differed (8 devices)."""
    v = verdicts["ring_attention"]
    assert v["same_bits"] and v["differing"] == 0, v
    assert v["numpy_abs"] <= 1e-5, v  # the corpus case's atol: numpy sums in its own order
    assert v["permute"] and v["partitions"], v


def test_a_short_float_sum_is_added_in_xlas_order():
    """The interpreter's ``reduce_sum`` over at most 32 elements has ``jax.jit``'s bits
    (numpy's pairwise order differed in 3 of ring attention's 8 row sums)."""
    rng = np.random.default_rng(47)
    for shape, axis in [((8, 8), 1), ((16, 32), 1), ((32, 16), 0), ((4, 17, 9), 2)]:
        x = rng.standard_normal(shape).astype(np.float32)
        fn = from_jaxpr(jax.make_jaxpr(lambda a, axis=axis: jnp.sum(a, axis=axis))(x))
        want = np.asarray(jax.jit(lambda a, axis=axis: jnp.sum(a, axis=axis))(x))
        assert np.array_equal(interpret(fn, x)[0].view(np.uint32), want.view(np.uint32)), shape


def test_exact_to_jax_keeps_each_product_and_quotient_rounded_as_the_interpreter_does():
    """``acc * c + y`` and ``acc / total`` (a column broadcast): XLA:CPU would make the first
    one FMA and the second a multiply by ``1 / total``; ``exact=True`` keeps both roundings."""
    rng = np.random.default_rng(48)
    a, c, y = (rng.standard_normal((8, 128)).astype(np.float32) for _ in range(3))
    total = rng.uniform(1, 3, (8, 1)).astype(np.float32)

    def step(a, c, y, total):
        return (a * c + y) / total, a * 3.0 - y, y / 3.0

    args = (a, c, y, total)
    fn = from_jaxpr(jax.make_jaxpr(step)(*args))
    got = jax.jit(to_jax(fn, exact=True))(*args)
    for g, w in zip(got, interpret(fn, *args), strict=True):
        assert np.array_equal(np.asarray(g).view(np.uint32), np.asarray(w).view(np.uint32))


def test_a_target_computed_from_loaded_values_is_refused_and_simulated(verdicts):
    v = verdicts["target_from_data"]
    assert v["simulated_numpy"] is True, v  # the simulator runs it
    assert v["error"] == "MiniPallasError", v
    assert "targets a device computed from loaded values" in v["text"]
    assert "device_compile_cases.py:" in v["text"] and "collectives='simulate'" in v["text"]


def test_a_remote_copy_in_a_loop_whose_trip_count_is_read_is_refused_and_simulated(verdicts):
    v = verdicts["trips_from_data"]
    assert v["simulated_numpy"] is True, v
    assert v["error"] == "MiniPallasError" and "trip count is computed" in v["text"], v
    assert "device_compile_cases.py:" in v["text"] and "collectives='simulate'" in v["text"]


def test_a_remote_copy_under_a_condition_on_the_device_is_sent_by_the_devices_that_take_it(
    verdicts,
):
    v = verdicts["only_device_zero_sends"]  # pl.when(me == 0): pairs ((0, 1),), every device
    assert v.get("simulated_numpy") is True and v["same_bits"] and v["numpy"], v
    assert v["permute"] and v["loops"] == 0, v


def test_a_copy_after_a_handshake_only_some_devices_wait_on_is_refused(verdicts):
    v = verdicts["late_handoff"]  # race-free, so the simulator runs it
    assert "simulate_error" not in v and "simulate_s" in v, v
    assert v["error"] == "MiniPallasError", v
    assert "semaphore_wait" in v["text"] and "only some devices make" in v["text"], v
    assert v["text"].count("device_compile_cases.py:") == 2  # the copy's line and the wait's


def test_a_remote_copy_under_a_condition_read_from_the_input_is_refused_with_why(verdicts):
    v = verdicts["when_from_data"]
    assert v["simulated_numpy"] is True, v
    assert v["error"] == "MiniPallasError", v
    assert "under a condition that is computed from loaded values" in v["text"]
    assert "device_compile_cases.py:" in v["text"] and "collectives='simulate'" in v["text"]


def test_a_remote_copy_under_a_condition_on_the_device_whose_branch_writes_compiles(verdicts):
    """pl.when(me == 0) around a write and the copy: the write stays under the condition, the
    copy leaves it as every device's collective (``kernels/devices/masked.py``)."""
    v = verdicts["when_on_device_writes"]
    assert v.get("simulated_numpy") is True and v["same_bits"] and v["numpy"], v
    assert v["permute"] and v["loops"] == 0, v


EXCHANGE = """func @f(%0: f32[4,8], %1: f32[8], %2: i32[], %3: i32[]) -> (f32[4,8], f32[4,8]) {
  %4 = exchange %0[%2, :], %1, axes ("x") (4), pairs (0, 1, 1, 2, 2, 3, 3, 0) : f32[4,8]
  %5 = exchange %0[%2, :], %1, to (%3), axes ("x") (4) : f32[4,8]
  %6 = gather_rows %1, axes ("x") (4) : f32[4,8]
  %7 = add %4, %6 : f32[4,8]
  return %7, %5
}"""


def test_exchange_prints_as_it_parses_and_checks_its_pairs():
    (fn,) = parse_module(EXCHANGE).functions
    assert str(fn).strip() == EXCHANGE
    with pytest.raises(MiniPallasError, match="each sender and receiver once"):
        parse_module(EXCHANGE.replace("pairs (0, 1, 1, 2,", "pairs (0, 1, 1, 1,"))


def test_exchange_run_by_one_program_alone_is_refused_with_a_fix():
    (fn,) = parse_module(EXCHANGE).functions
    with pytest.raises(MiniPallasError, match="exchange") as e:
        interpret(fn, *[np.zeros(t.shape, dtypes.to_numpy(t.dtype)) for t in fn.param_types])
    assert "collectives='simulate'" in e.value.fix


# A right permute's mesh_call body, as the importer gives it: a row per device of every ref.
PERMUTE = """func @k(%0: Ref{f32[4,8]}, %1: Ref{f32[4,8]}) -> () {
  run_scoped(%0, %1) collective_axes ("x") {
  ^(%2: Ref{i32[4], dma_semaphore}, %3: Ref{i32[4], dma_semaphore}, %4: Ref{f32[4,8]}, %5: Ref{f32[4,8]}):
    %6 = program_id axis 0 : i32[]
    %7 = constant 1 : i32[]
    %8 = add %6, %7 : i32[]
    %9 = constant 4 : i32[]
    %10 = rem %8, %9 : i32[]
    %11 = ref.at %4[%6, :] : Ref{f32[8]}
    %12 = ref.at %5[%10, :] : Ref{f32[8]}
    %13 = ref.at %3[%10] : Ref{i32[], dma_semaphore}
    dma_start %11, %12, %13
    %14 = ref.at %5[%6, :] : Ref{f32[8]}
    %15 = ref.at %3[%6] : Ref{i32[], dma_semaphore}
    dma_wait %14, %14, %15
    yield
  }
  return
}"""  # noqa: E501


def test_a_devices_program_has_its_shards_its_position_and_each_remote_copy_an_exchange():
    (fn,) = parse_module(PERMUTE).functions
    text = str(device_program(fn, ("x",), (4,)))
    assert "func @k_on_device(%0: Ref{f32[8]}, %1: Ref{f32[8]})" in text  # the shards
    assert 'axis_index ("x")' in text and "program_id" not in text
    assert "collective_axes" not in text and "dma_start" not in text
    assert 'exchange %12[:], %11, axes ("x") (4), pairs (0, 1, 1, 2, 2, 3, 3, 0)' in text


def test_a_target_loaded_from_memory_is_refused_naming_the_copy():
    row = "%16 = ref.at %2[%6] : Ref{i32[]}\n    %10 = get %16[] : i32[]"
    loaded = PERMUTE.replace("%10 = rem %8, %9 : i32[]", row).replace(
        "Ref{i32[4], dma_semaphore}, %3", "Ref{i32[4]}, %3"
    )  # %2, a buffer of ints; the target, a value read from its own row
    (fn,) = parse_module(loaded).functions
    with pytest.raises(MiniPallasError, match="targets a device computed from loaded values"):
        device_program(fn, ("x",), (4,))
