"""Kernels that span devices on the chip (issue 47, item 5): Pallas TPU kernels with remote
copies, remote signals and the barrier semaphore, in a ``jax.shard_map`` over a mesh of the one
v5e chip (so every remote copy and signal goes to the device itself), run under ``jax.jit`` two
ways and compared bit for bit with numpy and with each other:

- upstream: ``jax.jit(f)``, through upstream's Mosaic lowering;
- minipallas: ``jax.jit(on_tpu(f))``, the shard_map kept and its kernel as minipallas's own
  Mosaic module of one device (``platforms/devices_tpu.py``,
  ``lowering/tpu/rules/remote.py``) in the ``tpu_custom_call`` upstream emits.

Each side's time per call is the median of ``--repeats`` calls after a warm-up (the chip's
time, ``block_until_ready``). A kernel whose semaphores were wrong would hang the chip: a
watchdog ends the process, with the table so far, after ``--timeout`` seconds.

    python -m bench.chip.tpu_remote --out tpu_remote_v5e.txt   # on a TPU machine
    python -m bench.chip.tpu_remote --aot                      # no chip: both sides compiled
                                                               # for a v5e:1x1 with libtpu
    python -m bench.chip.tpu_remote --corpus --chips v5e,v6e,v4  # no chip: the corpus of
                                                               # kernels that span devices,
                                                               # compiled for slices of each

``--corpus`` takes every case of ``minipallas.tools.corpora.multi_device`` (2 to 8 devices; the
planted races, deadlocks and wrong counts compile too) onto a slice of each chip (``SLICES``),
compiles both sides ahead of time, and compares the remote ops of minipallas's module with
upstream's (``remote_ops``: each kind's ops in order, their memref operands and which of
``device_id``, ``core_id``, ``source_semaphore`` they have). The corpus builds its meshes from
``jax.devices()``; here its ``mesh`` helper is pointed at the slice's compile-only devices
while it runs (``_corpus_meshes``).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HEADER = (
    "kernel",
    "upstream",
    "minipallas",
    "bits equal",
    "upstream us/call",
    "minipallas us/call",
)


def kernels() -> dict[str, tuple[Any, dict]]:
    """name -> (kernel, pallas_call options): each on a mesh of one device along "x"."""
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    mesh_id, logical = pl.DeviceIdType.MESH, pl.DeviceIdType.LOGICAL

    def to_itself(x_ref, o_ref, send_sem, recv_sem):
        """A remote copy to the device itself, behind a signal of its own barrier semaphore."""
        me = lax.axis_index("x")
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(me,), device_id_type=mesh_id)
        pl.semaphore_wait(barrier, 1)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(me,),
                                            device_id_type=mesh_id)  # fmt: skip
        copy.start()
        copy.wait()

    def right_permute(x_ref, o_ref, send_sem, recv_sem):
        """Upstream's guide's right permute: on one device, the right neighbour is itself."""
        right = lax.rem(lax.axis_index("x") + 1, 1)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem,
                                            device_id=(right,), device_id_type=mesh_id)  # fmt: skip
        copy.start()
        copy.wait_send()
        copy.wait_recv()

    def logical_halves(x_ref, o_ref, send_sem, recv_sem):
        """Two remote copies (LOGICAL ids) of the two halves, swapped, each on its own
        semaphores, both started before either waits."""
        me = lax.axis_index("x")
        copies = [
            pltpu.make_async_remote_copy(
                x_ref.at[pl.ds(8 * k, 8)],
                o_ref.at[pl.ds(8 - 8 * k, 8)],
                send_sem.at[k],
                recv_sem.at[k],
                device_id=me,
                device_id_type=logical,
            )  # fmt: skip
            for k in (0, 1)
        ]
        for copy in copies:
            copy.start()
        for copy in copies:
            copy.wait()

    def signal_count(x_ref, o_ref, send_sem, recv_sem, sem):
        """Three remote signals to itself, one wait for all three, then the copy."""
        me = lax.axis_index("x")
        for _ in range(3):
            pl.semaphore_signal(sem, 1, device_id=(me,), device_id_type=mesh_id)
        pl.semaphore_wait(sem, 3)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(me,),
                                            device_id_type=mesh_id)  # fmt: skip
        copy.start()
        copy.wait()

    dma, regular = pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.REGULAR
    two = [dma, dma]
    return {
        "to_itself": (to_itself, {"scratch": two, "collective_id": 0}),
        "right_permute": (right_permute, {"scratch": two}),
        "logical_halves": (logical_halves, {"scratch": [dma((2,)), dma((2,))], "rows": 16}),
        "signal_count": (signal_count, {"scratch": [dma, dma, regular]}),
    }


def blocked_permute(n: int) -> Any:
    """The body of a ``shard_map`` over ``n`` devices along "x": a kernel with a grid of 2 over
    (8, 128) blocks of its (16, 128) shard (VMEM windows Mosaic moves), whose step ``i`` sends
    its block of x to rows ``8i..8i+7`` of the right neighbour's output (ANY) and writes twice
    the block into its blocked second output; the two outputs stacked."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, y_ref, send_sem, recv_sem):
        right = lax.rem(lax.axis_index("x") + 1, n)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref.at[pl.ds(pl.program_id(0) * 8, 8)],
                                            send_sem, recv_sem, device_id=(right,),
                                            device_id_type=pl.DeviceIdType.MESH)  # fmt: skip
        copy.start()
        y_ref[...] = x_ref[...] * 2.0
        copy.wait()

    block = pl.BlockSpec((8, 128), lambda i: (i, 0))
    call = pl.pallas_call(
        kernel,
        out_shape=[jax.ShapeDtypeStruct((16, 128), jnp.float32)] * 2,
        grid=(2,),
        in_specs=[block],
        out_specs=[pl.BlockSpec(memory_space=pl.ANY), block],
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
    )
    return lambda x: jnp.concatenate(call(x))


def blocked_by_prefetch(n: int) -> Any:
    """The body of a ``shard_map`` over ``n`` devices along "x": a kernel with scalar prefetch
    (``PrefetchScalarGridSpec``) whose step ``i`` reads block ``order[i]`` of x (the index map
    reads the prefetched order, ``[1, 0]``) and sends it to rows ``8i..8i+7`` of the right
    neighbour's output: the halves swapped."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(order_ref, x_ref, o_ref, send_sem, recv_sem):
        del order_ref  # read by the index map
        right = lax.rem(lax.axis_index("x") + 1, n)
        copy = pltpu.make_async_remote_copy(x_ref, o_ref.at[pl.ds(pl.program_id(0) * 8, 8)],
                                            send_sem, recv_sem, device_id=(right,),
                                            device_id_type=pl.DeviceIdType.MESH)  # fmt: skip
        copy.start()
        copy.wait()

    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(2,),
        in_specs=[pl.BlockSpec((8, 128), lambda i, order: (order[i], 0))],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA] * 2,
    )
    call = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32), grid_spec=spec
    )
    return lambda x: call(jnp.array([1, 0], jnp.int32), x)


def aliased_increment(n: int) -> Any:
    """The body of a ``shard_map`` over ``n`` devices along "x": a kernel whose output is its
    input (``input_output_aliases={0: 0}``, both in HBM) copies its shard into VMEM, adds one,
    and sends the result into the right neighbour's output (on one device: into its own)."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref, buf, local_sem, send_sem, recv_sem):
        load = pltpu.make_async_copy(x_ref, buf, local_sem)
        load.start()
        load.wait()
        buf[...] += 1.0
        right = lax.rem(lax.axis_index("x") + 1, n)
        copy = pltpu.make_async_remote_copy(buf, o_ref, send_sem, recv_sem, device_id=(right,),
                                            device_id_type=pl.DeviceIdType.MESH)  # fmt: skip
        copy.start()
        copy.wait()

    dma = pltpu.SemaphoreType.DMA
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32), dma, dma, dma],
        input_output_aliases={0: 0},
    )


def semaphore_between_kernels(n: int) -> Any:
    """The body of a ``shard_map`` over ``n`` devices along "x": upstream's
    test_no_barrier_semaphore, a kernel that makes a semaphore (behind a barrier handshake)
    and a second that signals it on every device, waits for all, and adds one."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def make(_):
        barrier = pltpu.get_barrier_semaphore()
        for i in range(n):
            pl.semaphore_signal(barrier, device_id=i)
        pl.semaphore_wait(barrier, n)

    def use(x_ref, sem_ref, o_ref):
        for i in range(n):
            pl.semaphore_signal(sem_ref, device_id=i)
        pl.semaphore_wait(sem_ref, n)
        o_ref[...] = x_ref[...] + 1

    def body(x):
        sem = pl.pallas_call(
            make,
            out_specs=pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
            out_shape=pltpu.SemaphoreType.REGULAR(()),
            compiler_params=pltpu.CompilerParams(collective_id=0),
        )()
        vmem, sems = (
            pl.BlockSpec(memory_space=pltpu.VMEM),
            pl.BlockSpec(memory_space=pltpu.SEMAPHORE),
        )
        return pl.pallas_call(
            use,
            in_specs=[vmem, sems],
            out_specs=vmem,
            out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
            compiler_params=pltpu.CompilerParams(skip_device_barrier=True),
        )(x, sem)

    return body


# name -> (shard_map body over n devices, the shard's shape): kernels other than one pallas_call
BODIES = {
    "blocked_to_itself": (blocked_permute, (16, 128)),
    "blocked_by_prefetch": (blocked_by_prefetch, (16, 128)),
    "aliased_increment": (aliased_increment, (8, 128)),
    "semaphore_between_kernels": (semaphore_between_kernels, (8, 128)),
}


def names() -> list[str]:
    """Every kernel of the chip run."""
    return [*kernels(), *BODIES]


def _swap_halves(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x[8:], x[:8]])


REFERENCE = {
    "logical_halves": _swap_halves,
    "blocked_to_itself": lambda x: np.concatenate([x, x * 2]),
    "blocked_by_prefetch": _swap_halves,
    "aliased_increment": lambda x: x + 1,
    "semaphore_between_kernels": lambda x: x + 1,
}


def build(name: str, mesh: Any) -> tuple[Any, tuple[int, int]]:
    """The case's ``shard_map`` over ``mesh`` and its input's shape."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import PartitionSpec as P

    if name in BODIES:
        body, shape = BODIES[name]
        f = jax.shard_map(body(mesh.size), mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                          check_vma=False)  # fmt: skip
        return f, shape
    kernel, options = kernels()[name]
    shape = (options.get("rows", 8), 128)
    cid = options.get("collective_id")
    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct(shape, jnp.float32),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=options["scratch"],
        compiler_params=None if cid is None else pltpu.CompilerParams(collective_id=cid),
    )
    f = jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False)
    return f, shape


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"


def _timed(fn: Any, x: Any, repeats: int) -> tuple[np.ndarray, float]:
    """``fn(x)`` as numpy, and the median microseconds of ``repeats`` calls after a warm-up."""
    out = fn(x)
    out.block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x).block_until_ready()
        times.append(time.perf_counter() - start)
    return np.asarray(out), statistics.median(times) * 1e6


def run_case(name: str, mesh: Any, aot: bool, repeats: int) -> tuple[str, ...]:
    """One row of the table."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from minipallas.platforms.mesh_tpu import on_tpu

    f, shape = build(name, mesh)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = REFERENCE.get(name, lambda a: a)(x)
    sharding = NamedSharding(mesh, P("x"))
    sides, outs, times = [], [], []
    for side in (f, on_tpu(f)):
        fn = jax.jit(side)
        try:
            if aot:
                spec = jax.ShapeDtypeStruct(shape, np.float32, sharding=sharding)
                fn.lower(spec).compile()
                sides.append("compiles (ahead of time)")
                continue
            out, us = _timed(fn, jax.device_put(x, sharding), repeats)
        except Exception as e:  # a refusal, whatever its class: upstream's or Mosaic's
            sides.append(_first_line(e))
            continue
        same = out.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
        sides.append("runs, numpy's bits" if same else "runs, other bits than numpy's")
        outs.append(out)
        times.append(f"{us:.1f}")
    equal = "-"
    if len(outs) == 2:
        equal = "yes" if outs[0].tobytes() == outs[1].tobytes() else "no"
    times += ["-"] * (2 - len(times))
    return (name, *sides, equal, *times)


REMOTE_OPS = (
    "tpu.sem_barrier",
    "tpu.sem_signal",
    "tpu.sem_wait",
    "tpu.enqueue_dma",
    "tpu.wait_dma2",
)
CORPUS_HEADER = ("case", "mesh", "expect", "upstream", "minipallas", "remote ops")


def remote_ops(module: Any) -> dict[str, list]:
    """Each remote op kind's ops of ``module`` in order: the types of their memref operands and
    their operand segment sizes (which optional operands they have)."""
    out: dict[str, list] = {}
    for op in _walk(module.operation):
        if op.name in REMOTE_OPS:
            attrs = op.attributes
            segments = (
                list(attrs["operandSegmentSizes"]) if "operandSegmentSizes" in attrs else None
            )
            types = [str(v.type) for v in op.operands if "memref" in str(v.type)]
            out.setdefault(op.name, []).append((types, segments))
    return out


def _walk(op: Any) -> Any:
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _walk(inner.operation)


# chip -> the slices libtpu 0.0.42 describes, smallest first, and their devices
SLICES = {
    "v5e": (("v5e:1x1", 1), ("v5e:2x2", 4), ("v5e:2x4", 8)),
    "v6e": (("v6e:2x2", 4), ("v6e:2x4", 8)),
    "v4": (("v4:2x2x1", 8),),
}


def slice_devices(n: int, chip: str = "v5e") -> list[Any]:
    """``n`` compile-only devices of the smallest slice of ``chip`` libtpu describes that has
    them."""
    from minipallas.lowering.runtime.libtpu import topology_devices

    topology = next(t for t, size in SLICES[chip] if n <= size)
    return list(topology_devices(topology)[:n])


@contextlib.contextmanager
def _corpus_meshes(chip: str = "v5e") -> Any:
    """The corpus's ``mesh`` helper, in each module that took it, over a slice of ``chip``."""
    import jax

    from minipallas.tools.corpora import multi_device as device_corpus

    def mesh(shape: Any, axes: Any) -> Any:
        devices = slice_devices(int(np.prod(shape)), chip)
        return jax.sharding.Mesh(np.array(devices).reshape(tuple(shape)), tuple(axes))

    modules = [m for m in vars(device_corpus).values() if hasattr(m, "mesh")]
    modules.append(sys.modules["minipallas.tools.corpora.multi_device.case"])
    old = [m.mesh for m in modules]
    try:
        for m in modules:
            m.mesh = mesh
        yield
    finally:
        for m, f in zip(modules, old, strict=True):
            m.mesh = f


def corpus_row(case: Any, chip: str = "v5e") -> tuple[str, ...]:
    """One case of the corpus compiled both ways for its slice of ``chip`` (inside
    ``_corpus_meshes(chip)``), its remote ops compared."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from minipallas.lowering.compat.jaxlib_shim import canonicalize
    from minipallas.platforms.devices_tpu import device_module, equations, spans_devices
    from minipallas.platforms.mesh_tpu import on_tpu
    from minipallas.tools.difftest.mosaic import _capture

    f = case.build()
    devices = slice_devices(case.devices, chip)
    mesh = jax.sharding.Mesh(np.array(devices), ("all",))
    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=NamedSharding(mesh, P()))
             for x in case.inputs()]  # fmt: skip
    row = [case.name, "x".join(map(str, case.mesh)), case.expect]
    theirs: list = []
    for side in (f, on_tpu(f)):
        try:
            with _capture() as modules:
                jax.jit(lambda *xs, side=side: side(*xs)).lower(*specs).compile()
            theirs = theirs or modules
            row.append("compiles")
        except Exception as e:  # a refusal, whatever its class: upstream's or minipallas's
            row.append(_first_line(e))
    if row[3:] != ["compiles", "compiles"]:
        return (*row, "-")
    mine = []
    for eqn in equations(jax.make_jaxpr(f)(*specs)):
        for call in equations(eqn.params["jaxpr"]) if eqn.primitive.name == "shard_map" else ():
            if call.primitive.name == "pallas_call" and spans_devices(call):
                mine.append(device_module(call, eqn.params["mesh"])[1].module)
    for module in (*mine, *theirs):
        canonicalize(module)
    ours, upstream = [remote_ops(m) for m in mine], [remote_ops(m) for m in theirs]
    if ours == upstream:
        return (*row, "same as upstream's")
    kinds = sorted({k for a, b in zip(ours, upstream, strict=False) for k in {*a, *b}
                    if a.get(k) != b.get(k)})  # fmt: skip
    return (*row, f"differ: {', '.join(kinds) or 'kernel count'}")


def corpus(out: Path | None, chips: list[str]) -> int:
    """The ``--corpus`` table of each chip, and a summary line each; the number of rows whose
    remote ops differ from upstream's."""
    from minipallas.tools.corpora.multi_device import CASES

    text, differ = [], 0
    for chip in chips:
        lines = [
            f"## {chip} ({', '.join(t for t, _ in SLICES[chip])})",
            "| " + " | ".join(CORPUS_HEADER) + " |",
            "| " + " | ".join("---" for _ in CORPUS_HEADER) + " |",
        ]
        rows = []
        with _corpus_meshes(chip):
            for case in CASES:
                rows.append(corpus_row(case, chip))
                lines.append("| " + " | ".join(rows[-1]) + " |")
                print(lines[-1], flush=True)
        differ += sum(row[-1].startswith("differ") for row in rows)
        lines += ["", summary(chip, rows), ""]
        print(lines[-2])
        text += lines
    if out:
        out.write_text("\n".join(text))
    return differ


def summary(chip: str, rows: list[tuple[str, ...]]) -> str:
    """How many cases each side compiles, both, and with upstream's remote ops."""
    up, mine = (sum(r[k] == "compiles" for r in rows) for k in (3, 4))
    both = sum(r[3] == r[4] == "compiles" for r in rows)
    same = sum(r[-1] == "same as upstream's" for r in rows)
    return (f"{chip}: {len(rows)} cases; upstream compiles {up}, minipallas {mine}, both {both}; "
            f"{same} with upstream's remote ops op for op")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aot", action="store_true", help="compile for a v5e:1x1, no chip")
    parser.add_argument("--corpus", action="store_true", help="the device corpus, ahead of time")
    parser.add_argument("--chips", default="v5e", help="--corpus: chips, e.g. v5e,v6e,v4")
    parser.add_argument("--kernels", help="comma-separated names (default: all)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.corpus:
        return 1 if corpus(args.out, args.chips.split(",")) else 0
    import jax

    from minipallas.lowering.runtime.libtpu import topology_devices

    devices = topology_devices("v5e:1x1") if args.aot else jax.devices()[:1]
    mesh = jax.sharding.Mesh(np.array(devices), ("x",))
    chosen = args.kernels.split(",") if args.kernels else names()
    lines = ["| " + " | ".join(HEADER) + " |", "| " + " | ".join("---" for _ in HEADER) + " |"]
    failed = 0
    for name in chosen:
        faulthandler.dump_traceback_later(args.timeout, exit=True)
        row = run_case(name, mesh, args.aot, args.repeats)
        faulthandler.cancel_dump_traceback_later()
        failed += not args.aot and row[3] != "yes"
        lines.append("| " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    device = devices[0]
    head = f"# {getattr(device, 'device_kind', device)}, jax {jax.__version__}"
    text = "\n".join([head, *lines]) + "\n"
    if args.out:
        args.out.write_text(text)
    print(f"{len(chosen)} kernels, {failed} where the two sides do not give the same bits")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
