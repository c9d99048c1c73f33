"""Discharge speed: effects + discharge + cleanup time on generated programs of 1k, 10k and
100k ops, time per op, and op counts before and after. Per-op time at the largest size should
stay within 2x of the smallest (linear cost).

    python -m bench.benchmarks.discharge_bench [--sizes 1000,10000,100000] [--seed 0]
"""

from __future__ import annotations

from bench.common import generated, op_count, parse_args, per_op_us, repeats, table, timed
from minipallas.ir.effects import effects
from minipallas.passes.cleanup import cleanup
from minipallas.passes.discharge import discharge

STAGES = ("effects", "discharge", "cleanup")


def bench(sizes, seed):
    rows = []
    for n in sizes:
        fn = generated(n, seed)
        t = {}
        t["effects"], _ = timed(lambda fn=fn: effects(fn), repeats(n))
        t["discharge"], pure = timed(lambda fn=fn: discharge(fn), repeats(n))
        t["cleanup"], clean = timed(lambda pure=pure: cleanup(pure), repeats(n))
        rows.append((op_count(fn), op_count(pure), op_count(clean), t))
    return rows


def main(argv=None):
    args = parse_args(__doc__.splitlines()[0], argv)
    rows = bench(args.sizes, args.seed)
    print(f"discharge of generated programs (seed {args.seed}); per-op times use the input ops")
    body = []
    for ops, pure, clean, t in rows:
        per_op = [per_op_us(t[s], ops) for s in STAGES]
        body.append([ops, pure, clean, *per_op, per_op_us(sum(t.values()), ops), sum(t.values())])
    first, last = rows[0], rows[-1]
    ratio = [per_op_us(last[3][s], last[0]) / per_op_us(first[3][s], first[0]) for s in STAGES]
    total_ratio = per_op_us(sum(last[3].values()), last[0]) / per_op_us(
        sum(first[3].values()), first[0]
    )
    body.append([f"ratio {last[0]}/{first[0]}", "", "", *ratio, total_ratio, ""])
    header = ["ops", "discharged ops", "cleaned ops"]
    header += [f"{s} us/op" for s in STAGES] + ["all us/op", "total s"]
    print(table(header, body))
    return rows


if __name__ == "__main__":
    main()
