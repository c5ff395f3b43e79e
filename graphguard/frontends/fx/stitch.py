"""Join W per-rank graphs into one distributed graph G_d at their collectives.

The stitching is shared by every frontend: see :mod:`graphguard.frontends.stitch`."""
from __future__ import annotations

from ..stitch import KIND_OP, fold_collective_dims, stitch

__all__ = ["KIND_OP", "fold_collective_dims", "stitch"]
