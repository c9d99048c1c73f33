"""Importing upstream jaxprs as minipallas IR: ``from_jaxpr``.

The import rules, one file per family of jax primitives, are in ``rules/`` (its
``__init__`` lists them), apart from the machinery they share:

- ``engine``: the importer, an interpreter over a jaxpr whose rules build IR, and ``RULES``;
- ``avals``: what upstream's values are as IR types; ``params``: how a rule declares every
  parameter of its primitive (each honoured or refused);
- ``indexers``: upstream's ``NDIndexer`` as minipallas indexers; ``dma_select``: a copy's
  ``select_ref`` of refs (one ``cond`` per select); ``devices_threading``: a kernel's barrier
  semaphore passed into the regions that ask for it.
"""

from minipallas.interop.importer import rules  # noqa: F401  (registers every rule)
from minipallas.interop.importer.avals import JaxprImportError
from minipallas.interop.importer.engine import from_jaxpr, rule

__all__ = ["JaxprImportError", "from_jaxpr", "rule"]
