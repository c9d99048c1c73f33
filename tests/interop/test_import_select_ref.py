"""Async copies over ``pl.select_ref`` (jax 0.10.2 has it; its Mosaic lowering makes nested
``scf.if``s, its interpret modes have no rule): imported as one copy per option under a
``cond``, the option Mosaic's ifs take for every index, out-of-range ones included (the last).
The device corpus's ``select_ref_*`` ports run them across devices.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas as mp
from minipallas.ir.parser import parse
from minipallas.ir.printer import print_function

ANY = pl.BlockSpec(memory_space=pl.ANY)


def _kernel(idx_ref, a_ref, b_ref, c_ref, o_ref, sems):
    """Copies the option ``idx`` picks into ``o``, its semaphore picked by ``idx % 2``."""
    i = idx_ref[0]
    sem = pl.select_ref(i % 2, sems.at[0], sems.at[1])
    pltpu.async_copy(pl.select_ref(i, a_ref, b_ref, c_ref), o_ref, sem).wait()


def _call(interpret=False):
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pltpu.SMEM), ANY, ANY, ANY],
        out_specs=ANY,
        scratch_shapes=[pltpu.SemaphoreType.DMA((2,))],
        interpret=interpret,
    )


def _inputs(i):
    options = [np.full((8, 128), k + 1, np.float32) for k in range(3)]
    return (np.array([i], np.int32), *options)


def _imported():
    return mp.from_jaxpr(jax.make_jaxpr(_call())(*_inputs(0)))


@pytest.mark.parametrize("i, picked", [(0, 0), (1, 1), (2, 2), (5, 2), (-1, 2)])
def test_each_index_picks_the_option_mosaics_nested_ifs_pick(i, picked):
    args = _inputs(i)
    (out,) = mp.interpret(_imported(), *args, checks=True)
    assert np.array_equal(out, args[1 + picked])


def test_the_import_is_a_cond_per_select_and_prints_back():
    fn = _imported()
    text = print_function(fn)
    assert print_function(parse(text)) == text
    ops = [op for f in (fn, *fn.callees()) for op in f.walk()]
    conds = [op for op in ops if op.name == "cond"]
    assert [len(op.regions) for op in conds[:2]] == [3, 2]  # the source's, then the semaphore's
    assert sum(op.name == "dma_start" for op in ops) == 3 * 2


@pytest.mark.parametrize(
    "interpret, error",
    [(True, AssertionError), (pltpu.InterpretParams(), NotImplementedError)],
    ids=["interpret=True", "tpu-interpret-mode"],
)
def test_upstreams_interpret_modes_cannot_run_it(interpret, error):
    """interpret=True's discharge rule asserts on the select; the TPU interpret mode says
    "Unsupported transform: SelectTransform"."""
    with pytest.raises(error):
        jax.jit(_call(interpret=interpret))(*_inputs(0))
