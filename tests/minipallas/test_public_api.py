"""The public names of ``minipallas`` are visible before first use (``dir``, tab completion,
``help``), though each is imported lazily."""

import subprocess
import sys

import minipallas as mp


def test_dir_lists_every_public_name_and_submodule_in_a_fresh_process():
    code = "import minipallas as mp, sys; print(' '.join(dir(mp))); print('jax' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    names, jax_loaded = out.splitlines()
    assert set(mp.__all__) <= set(names.split())
    assert {"effects", "discharge", "pallas_call", "tpu"} <= set(names.split())
    assert jax_loaded == "False"  # listing imports nothing


def test_every_listed_name_resolves():
    for name in mp.__all__:
        assert getattr(mp, name) is not None
