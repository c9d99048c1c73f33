"""What one call leaves behind cannot change another's result: the caches that outlive a call
are keyed by the object itself (a compiled function, weakly) or by value (indexer facts), never
by ``id()``, and constant folding runs each op on a fresh interpreter."""

import gc
import random
import weakref

import numpy as np
from cleanup_harness import cleaned
from test_cleanup_fold import edge_inputs, folding_program

import minipallas
from minipallas.ir import ArrayType, Builder, Dyn, Int, Slice, params
from minipallas.lowering.runtime import compiled
from minipallas.passes import indexer_facts


def _scale(k):
    (x,) = params([ArrayType((4,), "int32")])
    b = Builder()
    c = b.create("constant", [], {"value": minipallas.ir.Literal.of(np.full(4, k), "int32")})
    return b.function(f"times_{k}", [x], [b.create("mul", [x, c.result]).result])


def test_a_compiled_function_is_cached_while_it_lives_and_no_longer():
    fn = _scale(3)
    first = minipallas.compile(fn)
    assert minipallas.compile(fn) is first
    ref = weakref.ref(fn)
    del fn, first
    gc.collect()
    assert ref() is None and not any(k() is None for k in compiled._CACHE.keyrefs())


def test_functions_made_and_dropped_one_after_another_each_run_their_own_program():
    """Each function dies before the next is made, so ids are reused: an id-keyed cache would
    hand back an earlier function's executable."""
    x = np.arange(4, dtype=np.int32)
    for k in range(12):
        (out,) = minipallas.compile(_scale(k))(x)
        assert out.tolist() == (x * k).tolist()


def test_indexer_facts_are_keyed_by_value():
    a = (Int(Dyn(0)), Slice(0, 8, 2))
    b = (Int(Dyn(0)), Slice(0, 8, 2))
    assert a is not b and indexer_facts.facts(a) is indexer_facts.facts(b)
    assert indexer_facts.facts(a).num_dyn == 1
    assert indexer_facts.facts((Int(1), Slice(0, 8, 2))).num_dyn == 0


def test_cleaning_programs_in_any_order_gives_the_same_programs():
    """The folding programs cleaned in one order, then in the reverse order: the same text."""
    seeds = list(range(3030, 3040))
    forward = {s: str(cleaned(f, args=edge_inputs(f, s))) for s, f in _programs(seeds)}
    backward = {s: str(cleaned(f, args=edge_inputs(f, s))) for s, f in _programs(seeds[::-1])}
    assert forward == backward


def _programs(seeds):
    return [(s, folding_program(random.Random(s))) for s in seeds]
