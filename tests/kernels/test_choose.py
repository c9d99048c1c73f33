"""One decision for what the stablehlo row gets (``kernels/programs/choose.py``): the call's
``lower``, its ``program`` and ``lower_for_target`` given the same choices emit the same module,
and each choice changes it (before, ``lower_for_target`` honoured neither ``match_upstream`` nor
``collectives="simulate"``)."""

import pytest
from suite import BY_NAME

import minipallas as mp
from minipallas.kernels.programs.choose import cpu_program, lower_for_target

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
