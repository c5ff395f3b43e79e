"""The ``hlo`` frontend: XLA HLO modules (JAX, TensorFlow, torch-xla, AWS NeuronX) as text or protobuf (a plugin)."""
from graphguard.frontends import Frontend
from graphguard.hookspecs import hookimpl

from .load import load


def _capture(model, out_dir, world_size, backward=False, plugins=None):
    import graphguard.jax  # noqa: F401  (host devices for the mesh, before jax starts)
    from .jax_capture import capture_model_file
    return capture_model_file(model, out_dir, world_size, backward, plugins)


@hookimpl
def graphguard_frontends():
    return [Frontend("hlo", "XLA HLO modules: text (.hlo, .txt) and HloModuleProto / HloProto / HloSnapshot "
                            "binaries (.pb); captures JAX model files", load, (".hlo", ".txt", ".pb"), _capture)]
