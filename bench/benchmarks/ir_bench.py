"""IR speed: trace, build, print, parse, verify and interpret time for programs of 1k, 10k
and 100k ops, and time per op. Per-op time at the largest size should stay within 2x of the
smallest (linear cost).

Two workloads:
- generated programs (``minipallas.tools.generate``): every op kind, nested regions; timed for
  sample (drawing the abstract program: the test harness's cost, shown for reference), build
  (``ir.Builder`` with every op's type rule, closure conversion), print, parse, verify and
  interpret;
- a Python kernel traced by ``minipallas.trace`` that emits about N ops (ref reads and writes,
  arithmetic, a ``fori_loop`` and a ``run_scoped`` now and then): timed for tracing.

    python -m bench.benchmarks.ir_bench [--sizes 1000,10000,100000] [--seed 0]
"""

from __future__ import annotations

import numpy as np

import minipallas as mp
from bench.common import op_count, parse_args, per_op_us, repeats, sampled, table, timed
from minipallas.ir.interpret import interpret
from minipallas.ir.parser import parse
from minipallas.ir.verifier import verify
from minipallas.tools.generate import build, random_inputs

STAGES = ("sample", "build", "print", "parse", "verify", "interpret")


def kernel_emitting(n_ops: int):
    """A kernel over ``x_ref: f32[8,128]`` and ``o_ref: f32[8,128]`` tracing to about n_ops."""
    steps = max(1, round(n_ops / 4.3))  # each step traces about 4.3 ops

    def kernel(x_ref, o_ref):
        acc = x_ref[0, :]
        for k in range(steps):
            row = x_ref[k % 8, :]
            acc = acc * row + row
            o_ref[k % 8, :] = acc
            if k % 32 == 31:
                acc = _loop(x_ref, o_ref, acc)
            if k % 32 == 15:
                _scoped(o_ref, acc, row, k % 8)
        return acc

    return kernel


def _loop(x_ref, o_ref, acc):
    def body(i, carry):
        o_ref[i, :] = carry
        return carry + x_ref[i, :]

    return mp.fori_loop(0, 2, body, acc)


def _scoped(o_ref, acc, row, k):
    def scoped(s):
        s[...] = acc
        o_ref[k, :] = s[...] - row

    mp.run_scoped(scoped, mp.tpu.VMEM((128,), "float32"))


def bench_generated(sizes, seed):
    rows = []
    for n in sizes:
        times = {}
        times["sample"], program = timed(lambda n=n: sampled(n, seed), repeats(n))
        times["build"], fn = timed(lambda program=program: build(program), repeats(n))
        ops = op_count(fn)
        times["print"], text = timed(lambda fn=fn: str(fn), repeats(n))
        times["parse"], _ = timed(lambda text=text: parse(text), repeats(n))
        times["verify"], _ = timed(lambda fn=fn: verify(fn), repeats(n))
        args = random_inputs(fn, seed)

        def run(fn=fn, args=args):
            with np.errstate(all="ignore"):
                return interpret(fn, *[a.copy() for a in args])

        times["interpret"], _ = timed(run, repeats(n))
        rows.append((ops, times))
    return rows


def bench_trace(sizes):
    rows = []
    types = (mp.RefType((8, 128), "float32"), mp.RefType((8, 128), "float32"))
    for n in sizes:
        kernel = kernel_emitting(n)
        seconds, fn = timed(lambda kernel=kernel: mp.trace(kernel, *types), repeats(n))
        rows.append((op_count(fn), seconds))
    return rows


def main(argv=None):
    args = parse_args(__doc__.splitlines()[0], argv)
    rows = bench_generated(args.sizes, args.seed)
    print(f"generated programs (seed {args.seed}): microseconds per op, total seconds")
    body = [[ops, *(per_op_us(t[s], ops) for s in STAGES), sum(t.values())] for ops, t in rows]
    first, last = rows[0], rows[-1]
    ratio = [per_op_us(last[1][s], last[0]) / per_op_us(first[1][s], first[0]) for s in STAGES]
    body.append([f"ratio {last[0]}/{first[0]}", *ratio, ""])
    print(table(["ops", *(f"{s} us/op" for s in STAGES), "total s"], body))

    trace_rows = bench_trace(args.sizes)
    print("\ntraced Python kernel (minipallas.trace)")
    body = [[ops, seconds, per_op_us(seconds, ops)] for ops, seconds in trace_rows]
    (ops0, s0), (ops1, s1) = trace_rows[0], trace_rows[-1]
    body.append([f"ratio {ops1}/{ops0}", "", per_op_us(s1, ops1) / per_op_us(s0, ops0)])
    print(table(["ops", "trace s", "trace us/op"], body))
    return rows, trace_rows


if __name__ == "__main__":
    main()
