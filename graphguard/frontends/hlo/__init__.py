"""The ``hlo`` frontend: XLA HLO modules (JAX, TensorFlow, torch-xla, AWS NeuronX) as text or protobuf (a plugin)."""
from graphguard.frontends import Frontend
from graphguard.hookspecs import hookimpl

from .load import load


@hookimpl
def graphguard_frontends():
    return [Frontend("hlo", "XLA HLO modules: text (.hlo, .txt) and HloModuleProto / HloProto / HloSnapshot "
                            "binaries (.pb)", load, (".hlo", ".txt", ".pb"))]
