"""PyTorch entry points: ``graphguard.torch.capture(build, example_inputs, world_size=W, backward=False)``
and ``graphguard.torch.input_relation(spec, impl, user)`` (the relation DTensor placements state, completed
with the tangents and overridden by the user's).

See :mod:`graphguard.frontends.fx.capture` and :mod:`graphguard.frontends.fx.relations`.
"""
from .frontends.fx.capture import Captured, capture
from .frontends.fx.relations import input_relation
from .frontends.fx.torchtitan import on_cpu as torchtitan_on_cpu

__all__ = ["capture", "Captured", "input_relation", "torchtitan_on_cpu"]
