"""A JAX function given a minipallas value is a ``TraceError`` even where the user's source
cannot be read (``python -c``, a REPL): no raw JAX ``TypeError`` (issue 48 §4)."""

import subprocess
import sys

CODE = """
import jax.numpy as jnp
import minipallas as mp

def k(x_ref):
    return jnp.exp(x_ref[...])

try:
    mp.trace(k, mp.RefType((8,), "float32"))
except mp.TraceError as e:
    print("TraceError:", e)
"""


def test_a_jax_function_on_a_minipallas_value_in_python_c():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("TraceError: <string>:6: "), out.stdout
    said = "a JAX function, which takes JAX arrays, was given a minipallas traced value"
    assert said in out.stdout
    assert "minipallas.numpy" in out.stdout  # the fix
