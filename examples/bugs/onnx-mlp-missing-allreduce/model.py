"""Bug: the TP MLP of examples/onnx-mlp-tp without its all-reduce -- each rank adds the replicated fc2 bias
to its partial sum of fc2 and applies GeLU to it. graphguard stops at the Add after fc2's MatMul."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "onnx_mlp_tp_model", Path(__file__).resolve().parents[2] / "onnx-mlp-tp" / "model.py")
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)
_base.SKIP_ALLREDUCE = True

spec, impl, inputs, relation, expect = _base.spec, _base.impl, _base.inputs, _base.relation, _base.expect
