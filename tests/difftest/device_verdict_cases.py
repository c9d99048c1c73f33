"""Cases that span devices for the difftest (issue 47 item 4), run by ``test_device_verdicts.py``
in processes of their own: jax must see 4 CPU devices, which it is told before it starts
(``XLA_FLAGS=--xla_force_host_platform_device_count=4``, or ``minipallas-difftest --devices 4``).
``run`` runs each case's upstream in a worker that loads this file again, so the cases are at
module level (but ``hidden``'s, made in a function: the worker cannot find it).

``python tests/difftest/device_verdict_cases.py SECONDS CASE...``: one JSON line per case
(``CASE@tpu``: run with ``device="tpu"``).
"""

import json
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.all_gather import all_gather

from minipallas.tools.difftest import Case, run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: device_cases
from device_cases import on_mesh  # noqa: E402

warnings.simplefilter("ignore", DeprecationWarning)
N = 4
MESH = jax.sharding.Mesh(np.array(jax.devices()[:N]), ("x",))
REGULAR = pltpu.SemaphoreType.REGULAR
RIGHT = pl.DeviceIdType.MESH


def _copy_right(x_ref, o_ref, send_sem, recv_sem):
    right = lax.rem(lax.axis_index("x") + 1, N)
    return pltpu.make_async_remote_copy(x_ref, o_ref, send_sem, recv_sem, device_id=(right,),
                                        device_id_type=RIGHT)  # fmt: skip


def right_permute(x_ref, o_ref, send_sem, recv_sem):
    """Upstream's guide: each device sends its shard to its right neighbour."""
    copy = _copy_right(x_ref, o_ref, send_sem, recv_sem)
    copy.start()
    copy.wait()


def permute_read_early(x_ref, o_ref, send_sem, recv_sem):
    """A planted race: the destination is read and written before the receive wait."""
    copy = _copy_right(x_ref, o_ref, send_sem, recv_sem)
    copy.start()
    copy.wait_send()
    o_ref[...] = o_ref[...] * 2.0
    copy.wait_recv()


def token_ring(x_ref, o_ref, sem):
    """Every device waits for its left neighbour's token before passing its own: a deadlock."""
    right = lax.rem(lax.axis_index("x") + 1, N)
    pl.semaphore_wait(sem, 1)
    pl.semaphore_signal(sem, 1, device_id=(right,), device_id_type=RIGHT)
    o_ref[...] = x_ref[...]


X = np.random.default_rng(0).standard_normal((N * 8, 128)).astype(np.float32)
CASES = [
    Case("right_permute", on_mesh(right_permute, mesh=MESH), (X,)),
    Case(
        "upstream_all_gather",
        lambda x: all_gather(x, mesh=MESH, axis_name="x"),
        (X,),
        expect="race",
    ),  # fmt: skip
    Case(
        "permute_read_early",
        on_mesh(permute_read_early, mesh=MESH, space=None),
        (X,),
        expect="race",
    ),  # fmt: skip
    Case(
        "token_ring",
        on_mesh(token_ring, scratch=[REGULAR], mesh=MESH, space=None),
        (X,),
        expect="deadlock",
    ),
    Case(
        "right_permute_check_vma",
        on_mesh(right_permute, mesh=MESH, check_vma=True),
        (X,),
        expect="interpret-vma-mismatch",
    ),  # fmt: skip
]


def hidden() -> Case:
    return Case("hidden", CASES[0].fn, (X,), expect="case-not-found")


# as if typed at a prompt: no file to load it from
NOWHERE = Case("nowhere", CASES[0].fn, (X,), expect="case-not-found", origin="<stdin>")


def main(seconds: float, names: list[str]) -> None:
    cases = {c.name: c for c in [*CASES, hidden(), NOWHERE]}
    for name in names:  # NAME@tpu: run(..., device="tpu")
        case = cases[name.removesuffix("@tpu")]
        device = "tpu" if name.endswith("@tpu") else "cpu"
        report = run(case, upstream_seconds=seconds, device=device)
        runs, ours = report.upstream_runs, report.outcomes["interpret"]
        same = [
            bool(np.array_equal(r.outputs[0], ours.outputs[0], equal_nan=True))
            if r.ok and ours.ok else None
            for r in runs.runs
        ]  # fmt: skip
        print(json.dumps({
            "case": name, "kind": report.finding.kind, "notes": report.check_notes,
            "tpu": str(report.tpu), "name": report.finding.name,
            "detail": report.finding.detail, "expected": report.expected,
            "hung": runs.hung, "races": runs.races, "varies": runs.varies(),
            "runs": [[r.way, r.ok] for r in runs.runs], "ways": sorted(report.outcomes),
            "upstream_equal": same, "upstream_ok": report.outcomes["upstream"].ok,
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2:])
