"""One decision for what the stablehlo row gets (``kernels/programs/choose.py``): the call's
``lower``, its ``program`` and ``lower_for_target`` given the same choices emit the same module,
and each choice changes it (before, ``lower_for_target`` honoured neither ``match_upstream`` nor
``collectives="simulate"``)."""

import pytest

import minipallas as mp
from minipallas.kernels.programs.choose import cpu_program, lower_for_target
from minipallas.tools.corpora.suite import BY_NAME

N = 4


def _exchange(x_ref, o_ref):
    """Each program writes its row of a shared buffer, then reads its neighbour's."""

    def body(shared):
        i = mp.axis_index("x")
        shared[i] = x_ref[0]
        mp.barrier(("x",))
        o_ref[0] = shared[(i + 1) % N]

    mp.run_scoped(body, mp.tpu.VMEM((N, 128), "float32"), collective_axes=("x",))


def text(lowered):
    return lowered.as_text(debug_info=False)


def test_match_upstream_false_reaches_lower_for_target_as_the_calls_lower():
    case = BY_NAME["matmul"]
    args = case.inputs()
    fast = case.minipallas(match_upstream=False)
    kernel = fast.trace(*args)
    chosen = text(lower_for_target(kernel, match_upstream=False))
    assert text(fast.lower(*args)) == chosen != text(lower_for_target(kernel))
    assert str(fast.program(*args)) == str(cpu_program(kernel, match_upstream=False))


def test_collectives_simulate_reaches_lower_for_target_as_the_calls_lower():
    spec = mp.BlockSpec((1, 128), lambda i: (i, 0))
    call = mp.pallas_call(_exchange, mp.ArrayType((N, 128), "float32"), grid=(N,),
                          in_specs=[spec], out_specs=spec, grid_names=("x",),
                          collectives="simulate")  # fmt: skip
    x = mp.ArrayType((N, 128), "float32")
    kernel = call.trace(x)
    assert text(call.lower(x)) == text(lower_for_target(kernel, collective_axes=("x",)))
    assert call.collective_axes == ("x",)
    with pytest.raises(mp.MiniPallasError, match="collective"):
        lower_for_target(kernel)  # the loop program: collective scratch is refused there


def test_the_stablehlo_target_prepares_a_kernel_as_its_cpu_program():
    """Issue 50 point 3: the CPU program is the stablehlo row's prepare step, so lowering a
    traced kernel through the table (``Target.lower``, ``minipallas.lower``) is the call's
    ``lower``, stage for stage, and ``prepared`` is the call's ``program``."""
    case = BY_NAME["matmul"]
    args = case.inputs()
    call = case.minipallas(match_upstream=False)
    kernel = call.trace(*args)
    row = mp.lowering.target("stablehlo")
    assert row.prepare.endswith("choose:cpu_program") and not row.kernel
    ours, theirs = [], []
    direct = row.lower(kernel, match_upstream=False, after_each=lambda *s: ours.append(s))
    assert text(direct) == text(call.lower(*args, after_each=lambda *s: theirs.append(s)))
    assert [(n, str(f)) for n, f in ours] == [(n, str(f)) for n, f in theirs]
    assert ours[-len(row.pipeline.split(",")) - 1][0] == "cpu-program"
    assert str(row.prepared(kernel, match_upstream=False)) == str(call.program(*args))
    assert text(mp.lower(kernel)) == text(case.minipallas().lower(*args))


def test_a_target_without_a_prepare_step_refuses_its_options():
    kernel = BY_NAME["matmul"].minipallas().trace(*BY_NAME["matmul"].inputs())
    tpu = mp.lowering.target("tpu")
    assert tpu.prepared(kernel) is kernel
    with pytest.raises(mp.MiniPallasError, match="no options"):
        tpu.prepared(kernel, match_upstream=False)
    with pytest.raises(mp.MiniPallasError, match="match_upstream"):
        mp.lower(
            mp.parse("func @f(%x: f32[4]) -> (f32[4]) {\n  return %x\n}"), match_upstream=False
        )
