"""Upstream's async copies imported (``pltpu.make_async_copy`` / ``async_copy`` on
``SemaphoreType.DMA``, windows through ``x_ref.at[...]``): each DMA kernel of ``dma_cases``,
traced by upstream and imported, gives upstream's ``interpret=True`` bits through the compiled
program and ``to_jax``; remote copies are refused with a fix."""

import pathlib
import sys

import jax
import numpy as np
import pytest
from interop_helpers import ref
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import minipallas
from minipallas.interop import JaxprImportError, from_jaxpr, to_jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "kernels"))

from minipallas.tools.corpora.dma_cases import DMA_CASES, SEM_COUNT  # noqa: E402


@pytest.mark.parametrize("case", [*DMA_CASES, SEM_COUNT], ids=lambda c: c.name)
def test_an_imported_async_copy_kernel_gives_upstreams_bits(case):
    args = case.inputs()
    want = np.asarray(case.upstream()(*args)).tobytes()
    fn = from_jaxpr(jax.make_jaxpr(case.upstream(interpret=False))(*args))
    minipallas.verify(fn)
    assert "dma_start " in str(fn) and "dma_wait " in str(fn)
    (got,) = minipallas.compile(fn)(*args)
    assert np.asarray(got).tobytes() == want
    (again,) = jax.jit(to_jax(fn))(*args)
    assert np.asarray(again).tobytes() == want


def test_a_remote_copy_is_refused_with_a_fix():
    def kernel(x_ref, o_ref):
        def body(send, recv):
            pltpu.make_async_remote_copy(
                x_ref, o_ref, send, recv, device_id=0,
                device_id_type=pl.DeviceIdType.LOGICAL,
            ).start()  # fmt: skip

        pl.run_scoped(body, pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA)

    with pytest.raises(JaxprImportError, match="a remote dma_start") as e:
        from_jaxpr(jax.make_jaxpr(kernel)(ref((8,), np.float32), ref((8,), np.float32)))
    assert "make_async_copy" in e.value.fix


@pytest.mark.parametrize(
    "start, message", [({"priority": 1}, "priority 1"), ({"add": True}, "add=True")]
)
def test_a_start_with_other_options_is_refused_with_a_fix(start, message):
    def kernel(x_ref, o_ref):
        pl.run_scoped(
            lambda sem: pltpu.make_async_copy(x_ref, o_ref, sem).start(**start),
            pltpu.SemaphoreType.DMA,
        )

    with pytest.raises(JaxprImportError, match=message) as e:
        from_jaxpr(jax.make_jaxpr(kernel)(ref((8,), np.float32), ref((8,), np.float32)))
    assert e.value.fix
