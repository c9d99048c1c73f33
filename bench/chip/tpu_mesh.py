"""One-core mesh kernels on the chip: every one-core kernel of the mesh corpus
(``minipallas/tools/corpora/mesh_corpus/``, ``ONE_CORE``: upstream's ``pl.kernel`` over
``create_tensorcore_mesh("core", num_cores=1)``) run under ``jax.jit`` on a TPU two ways:

- upstream: ``jax.jit(f)`` as it is, through upstream's Mosaic lowering, which refuses every
  kernel with a collective ``run_scoped`` ("run_scoped lowering does not support collective
  axes"); its message is recorded;
- minipallas: ``jax.jit(on_tpu(f))``, each mesh kernel as minipallas's Mosaic module
  (``platforms/mesh_tpu.py``: collective allocations over the one core made plain, its
  barriers gone) in the ``tpu_custom_call`` upstream emits;

each compared bit for bit with the corpus's numpy reference (and with upstream's bits where
upstream runs); the kernels with ``exp``/``rsqrt`` (``exact=False``) also give their distance
in ulps. Prints a table; exits 1 when an exact kernel minipallas runs gives other bits.

    python -m bench.chip.tpu_mesh                    # on a TPU machine, one process
    python -m bench.chip.tpu_mesh --aot              # no chip: compile both sides for a v5e with
                                                # libtpu, bits from the Mosaic kernel's CPU program
    python -m bench.chip.tpu_mesh --kernels allreduce_sum_x1,softmax_x1 --out tpu-mesh.txt
    python -m bench.chip.tpu_mesh --also double_buffer_x2   # and a 2-core mesh that shares nothing

The TPU machine has jax, libtpu and numpy but not minipallas: install its wheel on PYTHONPATH
as docs/guides/tpu.md says ("Running kernels on a TPU"). A kernel whose semaphore waits were
wrong would hang the chip: the kernels that wait on semaphores run last, and a watchdog ends the
process (with the table so far) when one kernel takes longer than ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from minipallas.tools.corpora.mesh_corpus import CASES, ONE_CORE

WAITS = ("producer_consumer_x1",)  # waits on semaphores at one core: last
HEADER = ("kernel", "upstream", "minipallas on chip", "bits equal")


class Refused(str):
    """Why a side did not compile (its error's first line)."""


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


def run_on_chip(fn: Any, args: tuple[np.ndarray, ...], device: Any) -> Any:
    """``fn``'s outputs on ``device`` (numpy), or ``Refused`` when it does not compile."""
    import jax

    values = [jax.device_put(a, device) for a in args]
    try:
        compiled = jax.jit(fn).lower(*values).compile()
    except Exception as e:  # a refusal, whatever its class: upstream's or Mosaic's
        return Refused(_first_line(e))
    outs = jax.block_until_ready(compiled(*values))
    return tuple(np.asarray(o) for o in jax.tree.leaves(outs))


def compile_ahead(fn: Any, args: tuple[np.ndarray, ...]) -> Refused | None:
    """``fn`` compiled by libtpu for a v5e without a chip: None, or why not."""
    import jax

    from minipallas.lowering.runtime import libtpu

    try:
        with jax.default_device(libtpu.tpu_device()):
            sharding = libtpu.tpu_sharding()
            specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in args]
            jax.jit(fn).lower(*specs).compile()
    except Exception as e:
        return Refused(_first_line(e))
    return None


def cpu_bits(f: Any, args: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """What the chip should give: the Mosaic kernel's CPU program (``--aot``)."""
    import jax

    import minipallas as mp
    from minipallas.kernels.programs.choose import cpu_program
    from minipallas.platforms.mesh_tpu import mesh_eqn, mosaic_kernel

    eqn = mesh_eqn(jax.make_jaxpr(f)(*args).jaxpr)
    outs = mp.interpret(mp.discharge(cpu_program(mosaic_kernel(eqn))), *args)
    return tuple(np.asarray(o) for o in outs)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return bool(np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))


def ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance in units in the last place between two float32 arrays."""

    def ordered(x: np.ndarray) -> np.ndarray:
        i = np.asarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, np.int64(-(2**31)) - i, i)

    return int(np.max(np.abs(ordered(a) - ordered(b)), initial=0))


def check(case: Any, device: Any, aot: bool) -> dict[str, Any]:
    """One kernel both ways (module doc); a row of the table."""
    from minipallas.platforms.mesh_tpu import on_tpu

    f, args = case.build()
    want = case.reference(*args)
    row: dict[str, Any] = {"kernel": case.name}
    start = time.perf_counter()
    if aot:
        theirs = compile_ahead(f, args) or "compiles (ahead of time)"
        refusal = compile_ahead(on_tpu(f), args)
        ours = refusal if refusal is not None else cpu_bits(f, args)
    else:
        theirs = run_on_chip(f, args, device)
        ours = run_on_chip(on_tpu(f), args, device)
    row["seconds"] = round(time.perf_counter() - start, 2)
    row["upstream"] = theirs if isinstance(theirs, str) else "runs"
    if isinstance(ours, Refused):
        row.update(minipallas=f"refused: {ours}", bits="-", ok=False)
        return row
    row["minipallas"] = "runs (its CPU program)" if aot else "runs"
    equal = [same_bits(o, w) for o, w in zip(ours, want, strict=True)]
    bits = "yes" if all(equal) else "no"
    if not all(equal) and all(np.asarray(w).dtype == np.float32 for w in want):
        bits += f" ({max(ulps(o, w) for o, w in zip(ours, want, strict=True))} ulps)"
    if not isinstance(theirs, str):
        upstream_same = all(same_bits(o, t) for o, t in zip(ours, theirs, strict=True))
        row["upstream"] = "runs, " + ("same bits as minipallas" if upstream_same else "other bits")
        bits += "; upstream's too" if upstream_same else "; not upstream's"
    row["bits"] = bits
    row["ok"] = all(equal) or not case.exact
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    for r in rows:
        cells = (r["kernel"], r["upstream"], r["minipallas"], r["bits"])
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", help="comma-separated names (default: every one)")
    parser.add_argument(
        "--also", help="comma-separated kernels of several cores to add (mesh_corpus.CASES)"
    )
    parser.add_argument("--aot", action="store_true", help="no chip: compile for a v5e")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a kernel may take")
    opts = parser.parse_args(argv)
    import jax

    names = None if opts.kernels is None else set(opts.kernels.split(","))
    cases = [c for c in ONE_CORE if names is None or c.name in names]
    also = set((opts.also or "").split(","))
    cases += [c for c in CASES if c.name in also and c.expect == "ok"]
    cases.sort(key=lambda c: c.name in WAITS)
    device = None if opts.aot else jax.devices("tpu")[0]
    where = "ahead of time for a v5e (libtpu), bits on the CPU" if opts.aot else device.device_kind
    print(f"{len(cases)} mesh kernels, {where}; jax {jax.__version__}", flush=True)
    rows = []
    for case in cases:
        faulthandler.dump_traceback_later(opts.timeout, exit=True, file=sys.__stderr__)
        try:
            row = check(case, device, opts.aot)
        except Exception as e:  # the run itself failed: reported, the rest goes on
            row = {"kernel": case.name, "upstream": "?", "minipallas": f"failed: {_first_line(e)}",
                   "bits": "-", "ok": False}  # fmt: skip
        finally:
            faulthandler.cancel_dump_traceback_later()
        rows.append(row)
        print(f"  {row['kernel']}: upstream {row['upstream']}; minipallas {row['minipallas']}; "
              f"bits equal {row['bits']} ({row.get('seconds', '-')} s)", flush=True)  # fmt: skip
    text = table(rows)
    ran = sum(r["minipallas"].startswith("runs") for r in rows)
    theirs = sum(not r["upstream"].startswith(("runs", "compiles")) for r in rows)
    summary = f"minipallas runs {ran} of {len(rows)}; upstream refuses {theirs}"
    print(text + "\n" + summary, flush=True)
    if opts.out:
        Path(opts.out).write_text(text + "\n" + summary + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    sys.exit(main())
