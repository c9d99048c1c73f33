"""What a mutant of ``mutate.py`` is: one bug planted in minipallas's sources, its category
(issue 11's, and a few that matter for a state-discharging compiler) and, where no program or no
imported jaxpr can reach it, why (``mutants.py`` has the catalogue)."""

from __future__ import annotations

from dataclasses import dataclass

CATEGORIES = (
    "off-by-one window",
    "wrong reduction axis",
    "dropped write-back",
    "swapped operands",
    "wrong rounding dtype",
    "constant ~1e-6 relative",
    "wrong comparison",
    "dropped clamp",
    "add vs set",
    "transpose permutation",
    "select branch order",
    "wrong constant",
)


@dataclass(frozen=True)
class Mutant:
    name: str
    category: str
    file: str  # path in the repository, e.g. "passes/discharge/state.py"
    find: str  # must occur exactly once in the file
    replace: str
    description: str
    equivalent: str = ""  # why no program can tell it apart ("" if some program can)
    unreachable: str = ""  # why no imported jaxpr reaches it ("" if one can); still counted


BATCHED = (
    "the batched grid runs only minipallas's own pallas_call (the CPU path); an imported "
    "upstream pallas_call always becomes the loop program "
    "(interop/importer/rules/kernel_call.py); the front-end checks' kernels reach it"
)
GATHER_DYN = (
    "an imported gather/scatter has no dynamic slice start: the importer turns a slice "
    "with a dynamic start next to an array into position arrays "
    "(interop/importer/indexers.py); the front-end check dynamic_window_next_to_array reaches it"
)

# A float literal scaled by (1 + 1e-6): f32 moves by ~8 ulps, bf16/f16 round back to itself.
NUDGED = "np.float32(1 + 1e-6)"
