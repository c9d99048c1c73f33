"""Small float programs over refs whose outputs XLA computes with other bits than the
reference interpreter (sums, a matvec, a layer norm, a softmax): the envelope's tests
(``tests/tools/envelope/test_envelope.py``) and its measurement across CPUs
(``bench/numerics/envelope_rates.py``) both run them.
"""

import jax
import jax.numpy as jnp
import numpy as np

from minipallas.tools.difftest import ref

F32 = np.float32


def sum12(r):
    return jnp.sum(r[...])


def matvec(a, v):
    return a[...] @ v[...]


def layer_norm(r):
    x = r[...]
    m = x.mean()
    v = ((x - m) ** 2).mean()
    return (x - m) * jax.lax.rsqrt(v + 1e-5)


def softmax(r):
    x = r[...]
    e = jnp.exp(x - x.max())
    return e / e.sum()


def affine(r):
    return r[...] * 3.0 - 0.5


def inputs(name, rng):
    """Random inputs for each program, as refs."""
    shapes = {
        "sum12": [(12,)],
        "matvec": [(3, 5), (5,)],
        "layer_norm": [(int(rng.integers(64, 257)),)],
        "softmax": [(int(rng.integers(64, 257)),)],
        "affine": [(40,)],
    }[name]
    return tuple(ref((rng.standard_normal(s) * 3).astype(F32)) for s in shapes)


PROGRAMS = {f.__name__: f for f in (sum12, matvec, layer_norm, softmax)}
