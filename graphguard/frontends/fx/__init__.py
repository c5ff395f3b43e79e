"""The ``fx`` frontend: PyTorch programs captured with TorchDynamo / torch.export (a plugin)."""
from graphguard.frontends import Frontend
from graphguard.hookspecs import hookimpl

from .load import load
from .model_file import capture_model_file


@hookimpl
def graphguard_frontends():
    return [Frontend("fx", "PyTorch torch.export archives (*.pt2) and graphguard captures", load, (".pt2",),
                     capture=capture_model_file)]
