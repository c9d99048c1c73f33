"""Property: discharge keeps meaning, bit for bit, on random stateful programs.

For each random program (``minipallas.tools.generate.programs``) and random inputs:
``interpret(fn, *refs)`` (refs mutated in place) equals ``interpret(discharge(fn), *arrays)``
(original results, then final values of the discharged refs), for full and random partial
discharge, with and without cleanup, and every produced program passes the verifier.

The ``discharge-ci`` profile keeps the count modest; ``make fuzz``
(``minipallas.tools.fuzz.programs``) runs the same property as a long campaign.
"""

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from minipallas.tools.generate import programs, random_inputs
from minipallas.tools.generate.check import check_all_modes, check_discharge

settings.register_profile(
    "discharge-ci",
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CI = settings.get_profile("discharge-ci")


def _partial(draw, fn):
    return [draw(st.booleans()) for _ in fn.params]


@CI
@given(st.data())
def test_full_and_partial_discharge_match_the_interpreter(data):
    fn = data.draw(programs(max_stmts=20))
    note(str(fn))
    partial = _partial(data.draw, fn)
    note(f"should_discharge={partial}")
    outs = check_all_modes(fn, random_inputs(fn, seed=data.draw(st.integers(0, 2**16))), partial)
    for out in outs:
        note(str(out))


@settings(CI, max_examples=100)
@given(st.data())
def test_deeply_nested_scopes_and_regions(data):
    """Bodies inside bodies: run_scoped, loops and conds nested three deep, closing over refs."""
    fn = data.draw(programs(max_stmts=12, max_depth=3, calls=False, max_rank=2))
    note(str(fn))
    check_discharge(fn, random_inputs(fn, seed=1), True, clean=True)


@settings(CI, max_examples=100)
@given(st.data())
def test_views_and_indexers_on_every_dtype(data):
    """Straight-line state ops only: every indexer kind and view, on all dtypes."""
    fn = data.draw(programs(max_stmts=20, scoped=False, loops=False, conds=False, calls=False))
    note(str(fn))
    partial = _partial(data.draw, fn)
    check_discharge(fn, random_inputs(fn, seed=2), partial, clean=data.draw(st.booleans()))
