"""Issue 39's two TPU-path fidelity gaps, on the chip: upstream's kernel and minipallas's Mosaic
module for it, run under ``jax.jit`` in one process and compared bit for bit.

- ``zero_input_*``: a kernel with no array inputs (an iota and a constant over a 2-step grid).
  minipallas once ran such a call on the CPU while ``jax.jit`` traced it, through a primitive
  with no TPU rule (a raw ``NotImplementedError`` where the default device is a TPU); now it
  stages out, and runs as its Mosaic module. Two rows: upstream's ``pallas_call`` with its
  kernel replaced (``on_tpu``, below), and minipallas's own ``pallas_call`` under ``jax.jit``
  (the platform table's ``tpu`` row);
- ``flash_attention_*``: upstream's flash attention, causal with segment ids, bf16
  (1, 4, 512, 128), block_q 128, block_k_major 256, block_k 128: its forward kernel was refused
  by libtpu through minipallas ("cannot statically prove that index in dimension 2 is a
  multiple of 8": a clamp on a ``fori_loop`` counter the range analysis could not bound);
  ``_bwd`` is the gradient, its three kernels (the forward with residuals, dkv, dq).

Upstream's side is its function as it is (``interpret=False``); minipallas's side is
``platforms.mesh_tpu.on_tpu`` of it: its jaxpr with each ``pallas_call`` as
minipallas's module in upstream's custom call (``jit`` and ``custom_vjp`` calls looked into), as
the difftest's ``tpu`` way runs it. Prints a table; exits 1 when a side fails or the bits
differ.

    python -m bench.chip.tpu_fidelity            # on a TPU machine (see docs/guides/tpu.md)
    python -m bench.chip.tpu_fidelity --aot      # no chip: both sides compiled for a v5e by libtpu
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.chip.tpu_mesh import Refused, compile_ahead, run_on_chip, same_bits

HEADER = ("case", "upstream", "minipallas", "bits equal")
ROWS, BLOCK = 16, (8, 128)
FLASH_SHAPE = (1, 4, 512, 128)


@dataclass(frozen=True)
class Case:
    """``build()`` gives upstream's function, minipallas's and the inputs (numpy)."""

    name: str
    build: Callable[[], tuple[Callable[..., Any], Callable[..., Any], tuple[np.ndarray, ...]]]


def _fill(o_ref: Any) -> None:
    """Upstream's zero-input kernel body: row + 0.5 · column, offset by the grid step."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    rows = jax.lax.broadcasted_iota(jnp.int32, BLOCK, 0) + pl.program_id(0) * BLOCK[0]
    cols = jax.lax.broadcasted_iota(jnp.int32, BLOCK, 1)
    o_ref[...] = rows.astype(jnp.float32) + cols.astype(jnp.float32) * 0.5 + 3.0


def upstream_zero_input() -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    return pl.pallas_call(
        _fill,
        out_shape=jax.ShapeDtypeStruct((ROWS, BLOCK[1]), jnp.float32),
        grid=(ROWS // BLOCK[0],),
        out_specs=pl.BlockSpec(BLOCK, lambda i: (i, 0)),
    )


def minipallas_zero_input() -> Any:
    """The same kernel written for minipallas."""
    import minipallas as mp
    import minipallas.numpy as mnp

    def fill(o_ref: Any) -> None:
        rows = mnp.broadcasted_iota(mnp.int32, BLOCK, 0) + mp.program_id(0) * BLOCK[0]
        cols = mnp.broadcasted_iota(mnp.int32, BLOCK, 1)
        o_ref[...] = rows.astype(mnp.float32) + cols.astype(mnp.float32) * 0.5 + 3.0

    return mp.pallas_call(
        fill,
        mp.ArrayType((ROWS, BLOCK[1]), mnp.float32),
        grid=(ROWS // BLOCK[0],),
        out_specs=mp.BlockSpec(BLOCK, lambda i: (i, 0)),
    )


def flash_attention(q: Any, k: Any, v: Any, q_segments: Any, kv_segments: Any) -> Any:
    """Upstream's flash attention, causal, with segment ids (the issue's block sizes)."""
    from jax.experimental.pallas.ops.tpu import flash_attention as fa

    sizes = fa.BlockSizes(
        block_q=128, block_k_major=256, block_k=128, block_b=1,
        block_q_major_dkv=128, block_k_major_dkv=128, block_k_dkv=128, block_q_dkv=128,
        block_k_major_dq=128, block_k_dq=128, block_q_dq=128,
    )  # fmt: skip
    segments = fa.SegmentIds(q_segments, kv_segments)
    return fa.flash_attention(
        q, k, v, causal=True, segment_ids=segments, block_sizes=sizes, sm_scale=0.125
    )


def flash_gradient(*args: Any) -> Any:
    """d(sum of the attention)/d(q, k, v): the forward with residuals, dkv and dq kernels."""
    import jax
    import jax.numpy as jnp

    loss = lambda *a: flash_attention(*a).astype(jnp.float32).sum()  # noqa: E731
    return jax.grad(loss, argnums=(0, 1, 2))(*args)


def flash_inputs() -> tuple[np.ndarray, ...]:
    import ml_dtypes

    rng = np.random.default_rng(39)
    q, k, v = (rng.standard_normal(FLASH_SHAPE).astype(ml_dtypes.bfloat16) for _ in range(3))
    segments = (np.arange(FLASH_SHAPE[2]) >= 200).astype(np.int32)[None]  # two segments
    return q, k, v, segments, segments.copy()


def _zero_input_tpu_way() -> tuple:
    from minipallas.platforms.mesh_tpu import on_tpu

    up = upstream_zero_input()
    return up, on_tpu(up), ()


def _zero_input_minipallas() -> tuple:
    kernel = minipallas_zero_input()
    return upstream_zero_input(), lambda: kernel(), ()


def _flash(f: Callable[..., Any]) -> Callable[[], tuple]:
    def build() -> tuple:
        from minipallas.platforms.mesh_tpu import on_tpu

        return f, on_tpu(f), flash_inputs()

    return build


CASES = (
    Case("zero_input_pallas_call", _zero_input_tpu_way),
    Case("zero_input_minipallas_call", _zero_input_minipallas),
    Case("flash_attention_causal_segments_fwd", _flash(flash_attention)),
    Case("flash_attention_causal_segments_bwd", _flash(flash_gradient)),
)


def check(case: Case, device: Any, aot: bool) -> dict[str, Any]:
    """One case both ways; a row of the table."""
    upstream, ours, args = case.build()
    start = time.perf_counter()
    if aot:
        theirs = compile_ahead(upstream, args) or "compiles (ahead of time)"
        mine = compile_ahead(ours, args) or "compiles (ahead of time)"
    else:
        theirs, mine = run_on_chip(upstream, args, device), run_on_chip(ours, args, device)
    row = {"case": case.name, "seconds": round(time.perf_counter() - start, 2)}
    for side, got in (("upstream", theirs), ("minipallas", mine)):
        if isinstance(got, Refused):  # a str too
            row[side] = f"refused: {got}"
        else:
            row[side] = got if isinstance(got, str) else "runs"
    refused = isinstance(theirs, Refused) or isinstance(mine, Refused)
    if aot or refused:
        row.update(bits="-", ok=not refused)
        return row
    equal = [same_bits(a, b) for a, b in zip(mine, theirs, strict=True)]
    row.update(bits=f"{sum(equal)} of {len(equal)} outputs", ok=all(equal))
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + " --- |" * len(HEADER)]
    for r in rows:
        cells = (r["case"], r["upstream"], r["minipallas"], r["bits"])
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated names (default: every one)")
    parser.add_argument("--aot", action="store_true", help="no chip: compile for a v5e")
    opts = parser.parse_args(argv)
    import jax

    names = None if opts.cases is None else set(opts.cases.split(","))
    cases = [c for c in CASES if names is None or c.name in names]
    device = None if opts.aot else jax.devices("tpu")[0]
    where = "ahead of time for a v5e (libtpu)" if opts.aot else device.device_kind
    print(f"{len(cases)} cases, {where}; jax {jax.__version__}", flush=True)
    rows = []
    for case in cases:
        try:
            row = check(case, device, opts.aot)
        except Exception as e:  # the run itself failed: reported, the rest goes on
            first = (str(e).splitlines() or [""])[0][:200]
            row = {"case": case.name, "upstream": "?", "bits": "-", "ok": False,
                   "minipallas": f"failed: {type(e).__name__}: {first}"}  # fmt: skip
        rows.append(row)
        print(f"  {row['case']}: {row.get('seconds', '-')} s", flush=True)
    print(table(rows), flush=True)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    sys.exit(main())
