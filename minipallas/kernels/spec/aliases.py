"""``input_output_aliases``: an output that starts as the contents of an input.

Upstream Pallas lets a call name ``{input_index: output_index}`` pairs. On a device the two
share one buffer (XLA's ``output_operand_aliases`` on the custom call, for Mosaic and Triton
alike), so a kernel that writes only part of the output leaves the rest equal to the input,
and an accumulating kernel adds into it. Upstream's interpret mode gives the same results by
starting the output's buffer as a copy of the input (``_initialize_output_vals``); the input's
own buffer stays separate, so the kernel reads the input as it came in. Both CPU programs
(``grid`` and ``vectorized_grid``) do the same through ``output_sources``.

``check_aliases`` validates the mapping as upstream's ``pallas_call`` does, with its wording.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from minipallas.ir.errors import TraceError
from minipallas.ir.kernel_spec import Kernel
from minipallas.ir.location import user_location
from minipallas.ir.types import ArrayType


def normalize_aliases(aliases: Any) -> tuple[tuple[int, int], ...]:
    """The mapping as sorted ``(input, output)`` pairs of ints; a bad form is an error."""
    if aliases is None:
        return ()
    if not isinstance(aliases, Mapping):
        raise _error(
            f"input_output_aliases must be a dict of input index to output index, got {aliases!r}",
            fix="pass input_output_aliases={input_index: output_index}",
        )
    pairs = []
    for i, o in aliases.items():
        if not all(isinstance(n, int | np.integer) and not isinstance(n, bool) for n in (i, o)):
            raise _error(
                f"input_output_aliases contains the mapping '{i!r}:{o!r}'; indices must be ints",
                fix="map an input's position to an output's position",
            )
        pairs.append((int(i), int(o)))
    return tuple(sorted(pairs))


def check_aliases(
    pairs: tuple[tuple[int, int], ...],
    inputs: Sequence[ArrayType],
    outputs: Sequence[ArrayType],
) -> None:
    """Raises upstream's errors: an index out of range, or an input and output whose shapes or
    dtypes differ (they are one buffer). Two inputs naming one output are an error here too:
    the output cannot start as both."""
    seen: dict[int, int] = {}
    for i, o in pairs:
        mapping = f"input_output_aliases contains the mapping '{i}:{o}'"
        if not 0 <= i < len(inputs):
            raise _error(
                f"{mapping} with input index {i} outside the range [0, {len(inputs)})",
                fix="use the position of one of the call's inputs",
            )
        if not 0 <= o < len(outputs):
            raise _error(
                f"{mapping} with output index {o} outside the range [0, {len(outputs)})",
                fix="use the position of one of out_shape's outputs",
            )
        if inputs[i] != outputs[o]:
            raise _error(
                f"{mapping} referring to input[{i}] with abstract value {inputs[i]} "
                f"and to output[{o}] with a different abstract value {outputs[o]}",
                fix="alias an input to an output of the same shape and dtype",
            )
        if o in seen:
            raise _error(
                f"{mapping}, but input {seen[o]} is aliased to output {o} too",
                fix="alias each output to at most one input",
            )
        seen[o] = i


def output_sources(kernel: Kernel) -> dict[int, int]:
    """Output index -> the input index whose contents the output starts as."""
    return {o: i for i, o in kernel.input_output_aliases}


def _error(message: str, fix: str) -> TraceError:
    return TraceError(message, loc=user_location(), fix=fix)


def with_aliases(kernel: Kernel, pairs: tuple[tuple[int, int], ...]) -> Kernel:
    """``kernel`` with the checked aliases (``check_aliases``) recorded for every backend."""
    check_aliases(pairs, [s.array for s in kernel.in_specs], kernel.out_types)
    return replace(kernel, input_output_aliases=pairs) if pairs else kernel
