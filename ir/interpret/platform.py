"""The rule for ``platform_index``: the interpreter stands for upstream's interpret mode on the
CPU, where XLA lowers the program for ``cpu`` and picks the branch naming it, else the
default one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule
from minipallas.ir.opset.platform import xla_branch


@rule("platform_index")
def platform_index(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    branch = xla_branch(op.attrs["platforms"], "cpu")
    if branch is None:
        raise interp.error(
            op,
            f"no branch for the CPU among {op.attrs['platforms']}",
            fix="give lax.platform_dependent a cpu= or default= branch",
        )
    return (np.int32(branch),)
