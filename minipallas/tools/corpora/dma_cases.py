"""Kernels with DMA semaphores and async copies (``make_async_copy`` / ``async_copy``), each
written once against a namespace ``ns`` (``OURS`` or ``upstream()``), as in ``suite.py``.

``DMA_CASES`` join the kernels marked for the TPU (``tpu_cases.py``): the hardware check runs
them on the chip through minipallas's Mosaic module and upstream's ``pallas_call``; the tests
compare them with upstream's ``interpret=True`` on the CPU first. ``SEM_COUNT`` reads a DMA
semaphore while its copy is in flight, which the chip does not define: CPU only.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import minipallas as mp
from minipallas import tpu
from minipallas.tools.corpora.suite import MP, inputs, jax_namespace, normal

OURS = types.SimpleNamespace(
    **vars(MP),
    make_async_copy=tpu.make_async_copy,
    async_copy=tpu.async_copy,
    semaphore_read=mp.semaphore_read,
    DMA=tpu.SemaphoreType.DMA,
    ANY=tpu.ANY,
    SMEM=tpu.SMEM,
)


@functools.cache
def upstream() -> types.SimpleNamespace:
    """Upstream's namespace: ``suite.jax_namespace()`` and the DMA names."""
    ns = jax_namespace()
    return types.SimpleNamespace(
        **vars(ns),
        make_async_copy=ns.pltpu.make_async_copy,
        async_copy=ns.pltpu.async_copy,
        semaphore_read=ns.pl.semaphore_read,
        DMA=ns.pltpu.SemaphoreType.DMA,
        ANY=ns.pl.ANY,
        SMEM=ns.pltpu.SMEM,
    )


# ----- kernels -----


def hbm_rows(ns, x_hbm, o_ref, buf, sem):
    """Each step copies its 8 rows from HBM (memory space ANY) into VMEM scratch."""
    i = ns.program_id(0)
    copy = ns.make_async_copy(x_hbm.at[ns.ds(i * 8, 8)], buf, sem)
    copy.start()
    copy.wait()
    o_ref[...] = buf[...] * 2.0


def double_buffer(ns, x_hbm, o_ref, buf, sems):
    """Manual double buffering: step i starts the copy of block i + 1 into the other slot,
    then waits for its own (step 0 starts block 0 first)."""
    i, n = ns.program_id(0), ns.num_programs(0)
    slot = i % 2

    def fetch(step, into):
        return ns.make_async_copy(x_hbm.at[ns.ds(step * 8, 8)], buf.at[into], sems.at[into])

    @ns.when(i == 0)
    def _():
        fetch(0, 0).start()

    @ns.when(i + 1 < n)
    def _():
        fetch(i + 1, 1 - slot).start()

    fetch(i, slot).wait()
    o_ref[...] = buf[slot] + 1.0


def vmem_chain(ns, x_ref, o_ref):
    """VMEM -> VMEM copies in a ``run_scoped`` with an array of DMA semaphores."""

    def body(buf, sems):
        first = ns.async_copy(x_ref, buf.at[0], sems.at[0])
        first.wait()
        second = ns.async_copy(buf.at[0], buf.at[1], sems.at[1])
        second.wait()
        o_ref[...] = buf[1] - x_ref[...] * 0.5

    ns.run_scoped(body, ns.VMEM((2, 8, 128), "float32"), ns.DMA((2,)))


def to_hbm(ns, x_ref, o_hbm, buf, sem):
    """The output lives in HBM (memory space ANY): each step computes in VMEM and copies its
    rows out."""
    i = ns.program_id(0)
    buf[...] = x_ref[...] * 3.0
    copy = ns.make_async_copy(buf, o_hbm.at[ns.ds(i * 8, 8)], sem)
    copy.start()
    copy.wait()


def gather_rows(ns, idx_ref, x_hbm, o_ref, sem):
    """Four row copies at indices read from SMEM, all in flight on one semaphore, then four
    waits: each wait takes back one row's count."""
    copies = [
        ns.make_async_copy(x_hbm.at[ns.ds(idx_ref[k], 1)], o_ref.at[ns.ds(k, 1)], sem)
        for k in range(4)
    ]
    for copy in copies:
        copy.start()
    for copy in copies:
        copy.wait()


def loop_chunks(ns, x_hbm, o_ref, buf, sems):
    """fori_loop over 4 chunks of a (4, 8, 128) HBM array, int-indexed (x_hbm.at[k]),
    double-buffered on sems.at[k % 2], summing into the output."""

    def fetch(k):
        return ns.make_async_copy(x_hbm.at[k], buf.at[k % 2], sems.at[k % 2])

    fetch(0).start()
    o_ref[...] = ns.np.zeros((8, 128), ns.np.float32)

    def step(k, carry):
        @ns.when(k + 1 < 4)
        def _():
            fetch(k + 1).start()

        fetch(k).wait()
        o_ref[...] += buf[k % 2]
        return carry

    ns.fori_loop(0, 4, step, 0)


def column_window(ns, x_hbm, o_ref, buf, sem):
    """A 2-D window (rows and a 128-lane column block) of an HBM array."""
    i = ns.program_id(0)
    ns.async_copy(x_hbm.at[ns.ds(8, 8), ns.ds(i * 128, 128)], buf, sem).wait()
    o_ref[...] = buf[...] - 1.0


def update_in_place(ns, pos_ref, new_ref, cache_hbm, o_hbm, sem):
    """A KV-cache style update: the aliased HBM output gets rows new_ref at row pos."""
    ns.async_copy(new_ref, o_hbm.at[ns.ds(pos_ref[0], 8)], sem).wait()


def hbm_to_hbm(ns, x_hbm, o_hbm, sem):
    """HBM -> HBM: the two row blocks of the input, swapped into the output."""
    ns.async_copy(x_hbm.at[ns.ds(8, 8)], o_hbm.at[ns.ds(0, 8)], sem).wait()
    ns.async_copy(x_hbm.at[ns.ds(0, 8)], o_hbm.at[ns.ds(8, 8)], sem).wait()


def to_smem(ns, x_hbm, o_ref, buf, sem):
    """HBM -> SMEM scratch, then scalar reads."""
    ns.async_copy(x_hbm, buf, sem).wait()
    o_ref[0] = buf[3] + buf[5]


def sem_count(ns, x_hbm, o_ref, buf, sem):
    """The DMA semaphore's count after a start and after its wait (CPU only)."""
    copy = ns.make_async_copy(x_hbm, buf, sem)
    copy.start()
    o_ref[0] = ns.semaphore_read(sem)
    copy.wait()
    o_ref[1] = ns.semaphore_read(sem)


# ----- cases -----

ANY = "any"  # a spec: the whole operand, in memory space ANY
SMEM = "smem"  # the whole operand, in SMEM
Spec = tuple[tuple[int, ...], Callable[..., Any]] | str | None


@dataclass(frozen=True)
class DmaCase:
    """A kernel with what ``pallas_call`` needs, like ``suite.Case`` (the hardware check uses
    the same ``name``, ``inputs``, ``minipallas`` and ``upstream``); specs may name a memory
    space (``ANY``, ``SMEM``) and ``scratch`` is a function of the namespace, so it may hold
    DMA semaphores."""

    name: str
    kernel: Callable[..., None]
    out_shape: tuple[tuple[int, ...], str]
    make_inputs: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
    grid: tuple[int, ...] = ()
    in_specs: Sequence[Spec] = ()
    out_specs: Spec = None
    scratch: Callable[[Any], list] = lambda ns: []
    aliases: tuple[tuple[int, int], ...] = ()  # input_output_aliases, as (input, output) pairs

    def inputs(self, seed: int = 0) -> tuple[np.ndarray, ...]:
        return self.make_inputs(np.random.default_rng(seed))

    def minipallas(self, **options: Any) -> Any:
        return mp.pallas_call(
            functools.partial(self.kernel, OURS),
            mp.ArrayType(*self.out_shape),
            grid=self.grid,
            in_specs=[_spec(mp.BlockSpec, OURS, s) for s in self.in_specs],
            out_specs=_spec(mp.BlockSpec, OURS, self.out_specs),
            scratch_shapes=self.scratch(OURS),
            input_output_aliases=dict(self.aliases),
            name=self.name,
            **options,
        )

    def upstream(self, interpret: bool = True, **options: Any) -> Callable[..., Any]:
        """The jitted upstream ``pallas_call`` (``interpret=True``: on the CPU)."""
        ns = upstream()
        call = ns.pl.pallas_call(
            functools.partial(self.kernel, ns),
            ns.jax.ShapeDtypeStruct(*self.out_shape),
            grid=self.grid,
            in_specs=[_spec(ns.pl.BlockSpec, ns, s) for s in self.in_specs],
            out_specs=_spec(ns.pl.BlockSpec, ns, self.out_specs),
            scratch_shapes=self.scratch(ns),
            input_output_aliases=dict(self.aliases),
            interpret=interpret,
            name=self.name,
            **options,
        )
        return ns.jax.jit(call)


def _spec(block_spec: type, ns: Any, spec: Spec) -> Any:
    if spec is None:
        return block_spec()
    if isinstance(spec, str):
        return block_spec(memory_space={ANY: ns.ANY, SMEM: ns.SMEM}[spec])
    return block_spec(*spec)


ROWS = ((8, 128), lambda i: (i, 0))


def _indices(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    return rng.permutation(16)[:4].astype(np.int32), normal(16, 128)(rng)


def _update(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    return np.array([16], np.int32), normal(8, 128)(rng), normal(32, 128)(rng)


def _ints(rng: np.random.Generator) -> tuple[np.ndarray]:
    return (rng.integers(0, 100, 16).astype(np.int32),)


DMA_CASES: list[DmaCase] = [
    DmaCase("dma_hbm_rows", hbm_rows, ((32, 128), "float32"), inputs(normal(32, 128)),
            grid=(4,), in_specs=[ANY], out_specs=ROWS,
            scratch=lambda ns: [ns.VMEM((8, 128), "float32"), ns.DMA]),
    DmaCase("dma_double_buffer", double_buffer, ((32, 128), "float32"), inputs(normal(32, 128)),
            grid=(4,), in_specs=[ANY], out_specs=ROWS,
            scratch=lambda ns: [ns.VMEM((2, 8, 128), "float32"), ns.DMA((2,))]),
    DmaCase("dma_vmem_chain", vmem_chain, ((16, 128), "float32"), inputs(normal(16, 128)),
            grid=(2,), in_specs=[ROWS], out_specs=ROWS),
    DmaCase("dma_to_hbm", to_hbm, ((32, 128), "float32"), inputs(normal(32, 128)),
            grid=(4,), in_specs=[ROWS], out_specs=ANY,
            scratch=lambda ns: [ns.VMEM((8, 128), "float32"), ns.DMA]),
    DmaCase("dma_gather_rows", gather_rows, ((4, 128), "float32"), _indices,
            in_specs=[SMEM, ANY], scratch=lambda ns: [ns.DMA]),
    DmaCase("dma_loop_chunks", loop_chunks, ((8, 128), "float32"), inputs(normal(4, 8, 128)),
            in_specs=[ANY], scratch=lambda ns: [ns.VMEM((2, 8, 128), "float32"), ns.DMA((2,))]),
    DmaCase("dma_column_window", column_window, ((8, 256), "float32"),
            inputs(normal(16, 256)), grid=(2,), in_specs=[ANY],
            out_specs=((8, 128), lambda i: (0, i)),
            scratch=lambda ns: [ns.VMEM((8, 128), "float32"), ns.DMA]),
    DmaCase("dma_update_in_place", update_in_place, ((32, 128), "float32"), _update,
            in_specs=[SMEM, None, ANY], out_specs=ANY, scratch=lambda ns: [ns.DMA],
            aliases=((2, 0),)),
    DmaCase("dma_hbm_to_hbm", hbm_to_hbm, ((16, 128), "float32"), inputs(normal(16, 128)),
            in_specs=[ANY], out_specs=ANY, scratch=lambda ns: [ns.DMA]),
    DmaCase("dma_to_smem", to_smem, ((1,), "int32"), _ints, in_specs=[ANY], out_specs=SMEM,
            scratch=lambda ns: [ns.SMEM((16,), "int32"), ns.DMA]),
]  # fmt: skip

SEM_COUNT = DmaCase("dma_sem_count", sem_count, ((2,), "int32"), inputs(normal(8, 128)),
                    in_specs=[ANY], out_specs=SMEM,
                    scratch=lambda ns: [ns.VMEM((8, 128), "float32"), ns.DMA])  # fmt: skip
