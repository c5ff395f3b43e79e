"""Running torchtitan's model code on a CPU-only machine, for capture on a fake process group.

``with graphguard.torch.torchtitan_on_cpu(): ...`` (or :func:`on_cpu` from this module) around building and
parallelizing a torchtitan model. What it changes, and why the program's maths stays the same:

* torchtitan picks its device once, at import, as ``torch._utils._get_available_device_type() or "cuda"``
  (``torchtitan/tools/utils.py``), and several modules copy ``device_type`` / ``device_module`` by name. On
  a machine without an accelerator that is ``"cuda"``, and ``ParallelDims.build_mesh`` then makes a
  ``DeviceMesh`` on CUDA, where ``distribute_tensor`` moves every parameter (``Torch not compiled with CUDA
  enabled``). The helper sets them to ``"cpu"`` / ``torch.cpu`` for the duration of the block: only the
  device the mesh and its tensors live on changes; the mesh's shape, its ranks, every placement and every
  operator torchtitan runs are the same.

* graph_trainer's SimpleFSDP (``torchtitan/experiments/graph_trainer/simple_fsdp.py``) caches the wrapper
  class it gives each module type in ``_wrap_class_cache``, and that class's parameter properties close over
  the *first* model's ``ReplicateComputation`` -- its device mesh. One process is one rank in a real run; a
  capture builds every rank in one process, so rank 1's modules would all-gather over rank 0's mesh. The
  helper empties the cache on entry: each rank's model gets wrapper classes over its own mesh, as in a
  process of its own. Which parameters are sharded, how, and the collectives are unchanged.

Nothing else is patched. The values are restored on exit, so the helper can be nested or used per rank.
"""
from __future__ import annotations

import contextlib
import importlib

# the torchtitan modules that hold their own copy of the device chosen at import
_HOLDERS = ("torchtitan.tools.utils", "torchtitan.distributed.parallel_dims", "torchtitan.distributed.utils",
            "torchtitan.models.common.token_dispatcher", "torchtitan.components.metrics")


@contextlib.contextmanager
def on_cpu():
    """Make torchtitan build its device meshes and tensors on the CPU within the block."""
    import torch
    saved = []
    for name in _HOLDERS:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for attr, value in (("device_type", "cpu"), ("device_module", torch.cpu)):
            if hasattr(mod, attr):
                saved.append((mod, attr, getattr(mod, attr)))
                setattr(mod, attr, value)
    try:
        fsdp = importlib.import_module("torchtitan.experiments.graph_trainer.simple_fsdp")
    except ImportError:
        fsdp = None
    if fsdp is not None:
        fsdp._wrap_class_cache.clear()
    try:
        yield
    finally:
        for mod, attr, value in reversed(saved):
            setattr(mod, attr, value)
