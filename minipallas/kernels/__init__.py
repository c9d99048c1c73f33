"""Pallas kernels: a body over refs, a grid, and block specs that cut arrays into blocks.

Importing the package registers the discharge rule of ``mesh_call`` (a kernel over a mesh of
cores), which becomes one of the programs built here (``collective.mesh``)."""

from minipallas.kernels.collective import mesh as _mesh_rule  # noqa: F401  (registers it)
