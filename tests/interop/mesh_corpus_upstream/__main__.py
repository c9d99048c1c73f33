"""``python -m mesh_corpus_upstream`` (from tests/interop): the port's check (``verify``)."""

import sys

from mesh_corpus_upstream.verify import main

sys.exit(main(sys.argv[1:]))
