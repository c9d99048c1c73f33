"""A corpus of realistic TPU Pallas kernels, buggy and correct, for issue 39: does a check on
a machine without a TPU report every class of bug the chip shows, and no correct kernel?

``ENTRIES``: ``common.Entry`` records, one module per class of bug (``blocks``: out-of-bounds
block windows and slices; ``undefined``: reads before writes, unwritten outputs; ``padding``:
a partial block's padding in a reduction; ``dma``: async copies and semaphores; ``parallel``:
races across a parallel axis; ``compile``: what Mosaic refuses; ``overflow``: int32
wraparound in index arithmetic) and ``correct``, the controls.

How to run an entry: ``entry.fn(*entry.args, interpret=...)`` is a JAX function of arrays
calling ``pl.pallas_call`` with that ``interpret``: ``False`` (the default) on the chip,
``True`` for upstream's plain interpret mode, a ``pltpu.InterpretParams`` for its TPU
interpret mode; e.g. ``jax.jit(functools.partial(e.fn, interpret=True))(*e.args)``.
``entry.want(*entry.args)`` is what the kernel's author meant (numpy); ``entry.bug`` the kind a
check should report (``common.BUGS``, None for a correct kernel); ``entry.chip`` what a TPU v5e
did with it, measured (``common.CHIPS``: "latent" is a bug whose values came out right there;
``bench/results/tpu_bugs.txt``).

``bench/chip/bug_interpret.py`` times upstream's TPU interpret mode (and minipallas's checks) on
them; ``bench/chip/tpu_bugs.py`` measures ``chip`` on a TPU.
"""

from .blocks import ENTRIES as _BLOCKS
from .common import BUGS, CHIPS, Entry
from .compile import ENTRIES as _COMPILE
from .correct import ENTRIES as _CORRECT
from .dma import ENTRIES as _DMA
from .overflow import ENTRIES as _OVERFLOW
from .padding import ENTRIES as _PADDING
from .parallel import ENTRIES as _PARALLEL
from .undefined import ENTRIES as _UNDEFINED

ENTRIES: list[Entry] = [
    *_BLOCKS,
    *_UNDEFINED,
    *_PADDING,
    *_DMA,
    *_PARALLEL,
    *_COMPILE,
    *_OVERFLOW,
    *_CORRECT,
]
BY_NAME = {e.name: e for e in ENTRIES}

__all__ = ["BUGS", "BY_NAME", "CHIPS", "ENTRIES", "Entry"]
