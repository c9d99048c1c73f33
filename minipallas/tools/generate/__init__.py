"""Random well-typed stateful programs, for property tests, fuzzing and benchmarks.

A program is drawn in two steps: ``Sampler`` draws an abstract ``Program`` (statements over
variables, regions open like Python closures; see ``program``), and ``to_ir.build`` turns it
into a minipallas ``Function``. Keeping the abstract program separate lets another back end
(an upstream JAX function, for differential testing) emit the very same program.

- ``random_program(rng, n_ops)``: a large program from a ``random.Random``, linear time;
- ``programs(...)``: a hypothesis strategy of small programs that shrink well (needs the
  ``test`` extra; hypothesis is imported only when it is called);
- ``random_inputs(fn, seed)``: numpy arguments for a function's parameters.
"""

from __future__ import annotations

import random
from typing import Any

from minipallas.ir.core import Function
from minipallas.tools.generate.choices import RandomChoices
from minipallas.tools.generate.inputs import random_inputs
from minipallas.tools.generate.program import Program
from minipallas.tools.generate.sampler import Config, Sampler
from minipallas.tools.generate.to_ir import build


def random_program(rng: random.Random, n_ops: int, config: Config | None = None) -> Function:
    """A random program of about ``n_ops`` ops (a little over), built in time linear in it."""

    return build(Sampler(RandomChoices(rng), config).program(n_ops=n_ops))


def programs(config: Config | None = None, **overrides: Any) -> Any:  # noqa: ANN401
    """Hypothesis strategy of small random programs (``Function`` s); see ``strategies``."""
    from minipallas.tools.generate.strategies import programs as strategy

    return strategy(config, **overrides)


__all__ = ["Config", "Program", "build", "programs", "random_inputs", "random_program"]
