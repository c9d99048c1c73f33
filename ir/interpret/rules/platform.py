"""The rule for ``platform_index``: the interpreter stands for upstream's interpret mode on the
CPU, where XLA lowers the program for ``cpu`` and picks the branch naming it, else the
default one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minipallas.ir.core import Op
from minipallas.ir.interpret.engine import Interpreter, rule
from minipallas.ir.opset.platform import cpu_branch


@rule("platform_index")
def platform_index(interp: Interpreter, op: Op, args: Sequence[Any]) -> tuple:
    return (np.int32(cpu_branch(op)),)
