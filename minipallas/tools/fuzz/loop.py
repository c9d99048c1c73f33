"""The fuzzing loop the four front ends share (``programs``, ``upstream``, ``kernels``, ``tpu``).

Each front end draws its own things (programs or kernels), judges them its own way and prints
its own summary; what they all do alike lives here: the command line every campaign takes past
its own options (``--target-pass``, ``--load``, ``--pass-pipeline``: ``main``), the passes its
generation is directed at (``targeted_passes``), and, for the two that draw programs with
hypothesis, one batch's settings, the refusal of a kernel pass, and a saved finding's pipeline.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from minipallas.ir.errors import MiniPallasError
from minipallas.passes.pipeline import parse_pipeline, split_pipeline
from minipallas.passes.registry import PASSES, PassError
from minipallas.tools.user_passes import add_arguments, directs, main_with_passes, pass_targets

Body = Callable[[argparse.Namespace, str, list[str]], int]


def main(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    body: Body,
    name: str | None = None,
    functions: bool = False,
) -> int:
    """Parses ``argv`` with the front end's ``parser`` plus the options every campaign takes,
    loads the user's passes and runs ``body(args, pipeline, targets)``: ``targets`` are the
    passes generation is directed at. A pass file, pipeline or ``--target-pass`` that fails
    (``functions``: a kernel pass, for a fuzzer that draws programs) is printed as
    ``NAME: error`` and exits 2, as a bad argument does."""
    add_target_argument(parser)
    add_arguments(parser)
    args = parser.parse_args(argv)
    prog = name or parser.prog

    def with_passes(pipeline: str) -> int:
        try:
            if functions and not getattr(args, "replay", None):
                function_pipeline(pipeline)
            targets = targeted_passes(pipeline, args.target_pass)
        except MiniPallasError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 2
        return body(args, pipeline, targets)

    return main_with_passes(prog, args, with_passes)


def batch_settings(
    batch: int, seed: int, directed: bool = False, **options: Any
) -> Callable[[Any], Any]:
    """The hypothesis settings of one fuzzing batch (of ``programs`` and ``upstream``):
    up to ``batch`` examples from ``seed``, generate (``directed``: then mutate the examples
    with the highest ``hypothesis.target``) then shrink, no deadline, no example database,
    quiet; ``options`` are further ``settings``."""
    from hypothesis import HealthCheck, Phase, Verbosity, settings
    from hypothesis import seed as hypothesis_seed

    chosen = settings(
        max_examples=batch,
        deadline=None,
        database=None,
        phases=[Phase.generate, *([Phase.target] * directed), Phase.shrink],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        print_blob=False,
        **options,
    )
    return lambda test: hypothesis_seed(seed)(chosen(test))


def function_pipeline(pipeline: str) -> None:
    """Refuses a pipeline holding a kernel pass (``subject="kernel"``): the program fuzzers
    draw functions, on which it cannot run (each program was its failure, 'it raised
    PassError', or, in ``fuzz.upstream``'s cases, it never ran)."""
    for step in split_pipeline(pipeline):
        name = step.partition("{")[0].strip()
        if PASSES[name].subject == "kernel":
            raise PassError(
                f"pass '{name}' transforms a kernel (its grid and block specs), and this fuzzer "
                "draws programs, not kernels",
                fix="fuzz it with python -m minipallas.tools.fuzz.kernels (or tools.fuzz.tpu)",
            )


def read_saved(path: Path) -> str:
    """The text of a saved failure (``--replay``'s); a file that cannot be read is a
    ``PassError`` (a usage error)."""
    try:
        return path.read_text()
    except OSError as e:
        raise PassError(
            f"cannot read {path}: {e.strerror}", fix="give --replay a file --save wrote"
        ) from None


def saved_pipeline(pipeline: str, path: Path) -> str:
    """The pipeline a saved failure's header names, checked: one naming a pass no ``--load``
    file of this command registered is a ``PassError`` saying what to load (it read as the
    pass's own failure: 'it raised PassError: unknown pass')."""
    try:
        if pipeline:
            parse_pipeline(pipeline)
    except PassError as e:
        raise PassError(
            f"{path} was saved with the pipeline '{pipeline}': {e.message}",
            fix="give --replay the --load files that register its passes, as the run that saved it",
        ) from None
    return pipeline


def add_target_argument(parser: argparse.ArgumentParser) -> None:
    """``--target-pass NAME``: the pass generation is directed at (``targeted_passes``)."""
    parser.add_argument(
        "--target-pass",
        metavar="NAME",
        help="draw programs (kernels) this pass of the pipeline rewrites (default: each pass in "
        "it that is yours, not minipallas's, or that applies your @pattern rewrites; 'none': "
        "plain generation)",
    )


def targeted_passes(pipeline: str, chosen: str | None) -> list[str]:
    """The passes generation is directed at: ``chosen`` (a pass of ``pipeline``; ``none``: no
    pass), by default every pass of the pipeline that is the user's or applies the user's
    ``@pattern`` rewrites (``user_passes.directs``)."""
    names = [step.partition("{")[0].strip() for step in split_pipeline(pipeline)]
    if chosen == "none":
        return []
    if chosen is not None:
        if chosen not in names:
            raise PassError(
                f"--target-pass {chosen}: not a pass of the pipeline '{pipeline}'",
                fix=f"name one of {names or 'its passes (give --pass-pipeline)'}",
            )
        return [chosen]
    return list(dict.fromkeys(n for n in names if directs(n)))


def directed_note(passes: list[str], ops: tuple[str, ...], numbers: tuple[float, ...]) -> str:
    """The line a fuzzer starts with when its generation is directed at ``passes``."""
    return f"pass-directed: {', '.join(passes)}; favouring ops {list(ops)}, numbers {list(numbers)}"


def directed_choices(passes: list[str]) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The op names and numbers the ``passes`` name (``user_passes.pass_targets``), merged."""
    ops: set[str] = set()
    numbers: set[float] = set()
    for name in passes:
        more_ops, more_numbers = pass_targets(name)
        ops |= set(more_ops)
        numbers |= set(more_numbers)
    return tuple(sorted(ops)), tuple(sorted(numbers))
