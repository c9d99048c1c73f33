"""Random numpy arguments for a function's parameters (refs get the array they start with)."""

from __future__ import annotations

import numpy as np

from minipallas.ir import dtypes
from minipallas.ir.core import Function
from minipallas.ir.types import ArrayType, RefType
from minipallas.tools.generate.sampler import random_values


def random_inputs(fn: Function, seed: int = 0) -> list[np.ndarray]:
    """One fresh array per parameter, reproducible from ``seed``.

    Integer scalars are small (-2 to 8) because generated programs use them as dynamic indices
    and loop bounds; other values are random with a sprinkle of NaN, infinities and -0.0.
    """
    rng = np.random.default_rng(seed)
    args = []
    for t in fn.param_types:
        value_type = t.value_type if isinstance(t, RefType) else t
        assert isinstance(value_type, ArrayType)
        if value_type.shape == () and dtypes.is_int(value_type.dtype):
            value = np.array(rng.integers(-2, 9), dtype=dtypes.to_numpy(value_type.dtype))
        else:
            value = np.asarray(random_values(rng, value_type))
        args.append(value)
    return args
