"""The gpt-tp-sp block (Megatron TP + sequence parallelism) with Apex's fused layer norm, a custom operator.

Megatron-LM normalises with ``apex.normalization.FusedLayerNorm``; here that is ``apex_ops`` (examples/.lib):
the operators ``apex::fused_layer_norm_affine`` and its backward ``apex::fused_layer_norm_affine_bwd``, which
graphguard knows through the ``apex`` lemma pack. Everything else is ``gpt-tp-sp/model.py``. As there, the
layer-norm parameters see only the local sequence shard, so their gradients are all-reduced;
``ALL_REDUCE_LN_GRADS=0`` drops that all-reduce (Megatron-LM #1446).
"""
import importlib.util
import os
import sys
from pathlib import Path

_here = Path(__file__).resolve().parent
sys.path.insert(0, str(_here.parent / ".lib"))
import apex_ops  # noqa: E402

_spec = importlib.util.spec_from_file_location("gpt_tp_sp", _here.parent / "gpt-tp-sp" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

inputs, relation, expect = base.inputs, base.relation, base.expect


class Block(base.Block):
    def _ln(self, ln, x):
        w, b = ln.weight, ln.bias
        if self.world > 1 and self.sync_ln:
            w, b = base._SyncGrad.apply(w), base._SyncGrad.apply(b)
        return apex_ops.fused_layer_norm(x, w, b, ln.normalized_shape, ln.eps)


def spec():
    return Block(1)


def impl(rank, world):
    return Block(world, sync_ln=os.environ.get("ALL_REDUCE_LN_GRADS", "1") != "0")
