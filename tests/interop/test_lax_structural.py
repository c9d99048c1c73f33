"""jnp programs over refs using the structural primitives (flip, pad, cumulative ops, sort,
argsort, top_k, argmax, prod, roll, stack/split/unstack): upstream (discharge_state + XLA),
the import interpreted, discharged and compiled all agree bit for bit (``difftest.run``)."""

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from minipallas.tools.difftest import Case, ref, run


def _input() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.round(rng.standard_normal((4, 40)) * 4).astype(np.float32) / 4
    x[0, 3], x[1, 5], x[2, :4], x[3, 7] = np.nan, -0.0, 0.0, np.inf
    return x


PROGRAMS = {
    "flip": lambda a: jnp.flip(a, 1),
    "pad": lambda a: jnp.pad(a, ((1, 2), (0, 1)))[1:5, :40],
    "lax_pad_negative": lambda a: lax.pad(a, np.float32(0.5), ((0, 0, 0), (-1, 1, 0))),
    "cumsum": lambda a: jnp.cumsum(a, axis=1),
    "cumsum_reverse": lambda a: lax.cumsum(a, axis=1, reverse=True),
    "cumprod": lambda a: jnp.cumprod(a, axis=0),
    "cummax": lambda a: lax.cummax(a, axis=1),
    "cummin_reverse": lambda a: lax.cummin(a, axis=0, reverse=True),
    "sort": lambda a: jnp.sort(a, axis=1),
    "argsort": lambda a: jnp.argsort(a, axis=1).astype(jnp.float32),
    "top_k_axis0": lambda a: jnp.concatenate([lax.top_k(a, 2, axis=0)[0]] * 2, 0),
    "argmax": lambda a: jnp.broadcast_to(jnp.argmax(a, axis=1)[:, None], a.shape) * 1.0,
    "argmin": lambda a: jnp.broadcast_to(jnp.argmin(a, axis=0)[None], a.shape) * 1.0,
    "prod": lambda a: jnp.broadcast_to(jnp.prod(a[:, :6], axis=1)[:, None], a.shape),
    "all_any": lambda a: jnp.where(jnp.all(a > -9, axis=(0, 1)) & jnp.any(a > 1), a, -a),
    "roll": lambda a: jnp.roll(a, 3, axis=1),
    "stack_split": lambda a: jnp.concatenate(jnp.split(jnp.stack([a, 2 * a], 0)[1], 2, 1), 1),
    "unstack": lambda a: jnp.stack(jnp.unstack(a, axis=0)[::-1]),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_import_agrees_with_upstream(name):
    f = PROGRAMS[name]

    def kernel(o_ref, a_ref):
        o_ref[...] = f(a_ref[...])

    x = _input()
    report = run(Case(name, kernel, (ref(np.zeros_like(x)), ref(x))))
    assert report.ok, report.text()
    assert set(report.outcomes) >= {"upstream", "interpret", "discharge", "compile"}
