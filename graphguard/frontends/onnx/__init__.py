"""The ``onnx`` frontend: ONNX models (``ModelProto``), one per rank or one for every rank (a plugin)."""
from graphguard.frontends import Frontend
from graphguard.hookspecs import hookimpl

from .load import load


def _capture(model, out_dir, world_size, backward=False, plugins=None):
    from .capture import capture_model_file
    return capture_model_file(model, out_dir, world_size, backward, plugins)


@hookimpl
def graphguard_frontends():
    return [Frontend("onnx", "ONNX models (.onnx ModelProto; com.microsoft AllReduce/AllGather/AllToAll and "
                             "ai.graphguard ReduceScatter/Broadcast/CollectivePermute as collectives); "
                             "captures PyTorch model files with torch.onnx.export", load, (".onnx",), _capture)]
