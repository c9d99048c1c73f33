"""``collectives="simulate"`` on discharge and in the pipeline (``collectives{mode=simulate}``,
``discharge{collectives=simulate}``): one function is one program, the only one of its group,
so its collective allocation is its own; the default still raises upstream's errors."""

import numpy as np
import pytest

import minipallas as mp
from minipallas.ir.collectives import CollectiveAxesUnsupported
from minipallas.ir.errors import PassError
from minipallas.passes import pipeline

PROGRAM = """
func @f(%0: Ref{f32[4]}) -> () {
  run_scoped(%0) collective_axes ("x") {
  ^(%s: Ref{f32[4]}, %r: Ref{f32[4]}):
    %v = get %r[:] : f32[4]
    %w = add %v, %v : f32[4]
    %o = swap %s[:], %w : f32[4]
    %u = get %s[:] : f32[4]
    %p = swap %r[:], %u : f32[4]
    yield
  }
  return
}
"""


def test_discharge_takes_the_collective_allocation_as_the_programs_own():
    fn = mp.parse(PROGRAM)
    with pytest.raises(CollectiveAxesUnsupported, match="run_scoped discharge does not support"):
        mp.discharge(fn)
    pure = mp.discharge(fn, collectives="simulate")
    assert "run_scoped" not in str(pure)
    x = np.arange(4, dtype=np.float32)
    (out,) = mp.interpret(pure, x)
    simulated = x.copy()
    mp.interpret(fn, simulated, grid=(1,), grid_names=("x",), collectives="simulate")
    assert out.tobytes() == simulated.tobytes() == (x + x).tobytes()


def test_the_pipeline_options():
    fn = mp.parse(PROGRAM)
    with pytest.raises(CollectiveAxesUnsupported):
        pipeline.run(fn, "collectives")
    assert pipeline.run(fn, "collectives{mode=simulate}") is fn
    pure = pipeline.run(fn, "discharge{collectives=simulate},cleanup", verify=True)
    assert "run_scoped" not in str(pure)
    with pytest.raises(PassError, match="is not a mode"):
        mp.discharge(fn, collectives="sometimes")
