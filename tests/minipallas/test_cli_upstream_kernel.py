"""``minipallas-opt`` on a kernel file written with upstream Pallas (``jax.experimental.pallas``):
its ``pallas_call`` is imported (``kernel_from_jaxpr``) and goes through the flags as a
minipallas kernel's does (issue 48 §3)."""

import textwrap

from minipallas.cli import main

UPSTREAM = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl

    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    spec = pl.BlockSpec((8, 128), lambda i: (0, i))
    KERNEL = pl.pallas_call(
        double, out_shape=jax.ShapeDtypeStruct((8, 512), jnp.float32), grid=(4,),
        in_specs=[spec], out_specs=spec, interpret=True,
    )
    ARGS = [np.zeros((8, 512), np.float32)]
    """
)


def test_an_upstream_kernel_file_is_imported(tmp_path, capsys):
    path = tmp_path / "upstream_kernel.py"
    path.write_text(UPSTREAM)
    assert main([str(path)]) == 0, capsys.readouterr().err
    assert "func @double(" in capsys.readouterr().out
    assert main([str(path), "--pass-pipeline=fuse-grid-steps{min_steps=2}"]) == 0
    out = capsys.readouterr().out
    assert "kernel double: grid (1,)" in out and "call @double_substep(" in out


def test_lowering_an_upstream_kernel_file_is_refused_with_the_fix(tmp_path, capsys):
    path = tmp_path / "upstream_kernel.py"
    path.write_text(UPSTREAM)
    assert main([str(path), "--emit=tpu"]) == 1
    err = capsys.readouterr().err
    assert "upstream Pallas" in err and "mp.pallas_call" in err
