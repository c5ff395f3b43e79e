"""JAX entry point: ``graphguard.jax.capture(fn, args, mesh=..., in_shardings=..., impl=None, backward=False,
out_dir=None)`` -- the pre-partition HLO of ``fn`` (or ``fn`` on one device, for a shard_map ``impl``), the
post-partition per-rank HLO, and the input relation derived from the shardings; ``Captured.verify()`` checks it.

JAX needs several host devices for a mesh: importing this module before ``jax`` adds
``--xla_force_host_platform_device_count=8`` to ``XLA_FLAGS`` (unless a count is already there) and selects the
CPU platform when none is chosen. Imported after ``jax``, it leaves JAX as it is: set the flag yourself, before
``import jax``, for meshes of more than one host device.

See :mod:`graphguard.frontends.hlo.jax_capture`.
"""
from __future__ import annotations

import os
import sys

if "jax" not in sys.modules:
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

from .frontends.hlo.jax_capture import Captured, capture, capture_model_file  # noqa: E402

__all__ = ["capture", "Captured", "capture_model_file"]
