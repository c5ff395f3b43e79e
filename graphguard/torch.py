"""PyTorch entry points: ``graphguard.torch.capture(build, example_inputs, world_size=W, backward=False)``.

See :mod:`graphguard.frontends.fx.capture`.
"""
from .frontends.fx.capture import Captured, capture

__all__ = ["capture", "Captured"]
