"""The vllm lemma pack: vLLM's custom operators (a plugin).

``ops.py`` says what ``_C.rms_norm``, ``_C.fused_add_rms_norm``, ``_C.silu_and_mul``, ``_C.rotary_embedding``
and ``vllm.unified_attention_with_output`` compute (shapes, NumPy references) in the functional form the fx
frontend gives vLLM's in-place kernels (captured under ``auto_functionalized``: inputs are the tensor
arguments except a written-only ``result``/``output``, outputs the new values of the mutated arguments);
``lemmas.py`` how they distribute over sharded tensors -- including vLLM's merged gate_up layout and
attention heads split across ranks (grouped-query attention). ``vllm.all_reduce(tensor, group_name)`` and
``vllm.all_gather(tensor, dim, world_size, group_name)`` are declared collectives (a sum, a concatenation along
dim over the named group) through ``graphguard_collective_ops``. ``ir.py`` and
``ir_lemmas.py``: what vLLM 0.3x's captured graphs add (vLLM IR norms, the KV-cache write's token).
"""
from graphguard.hookspecs import hookimpl

from .ir import OPS as IR_OPS
from .ir_lemmas import LEMMAS as IR_LEMMAS
from .lemmas import LEMMAS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS + IR_OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS + IR_LEMMAS


@hookimpl
def graphguard_collective_ops():
    # vllm::all_reduce(Tensor tensor, str group_name); vllm::all_gather(Tensor tensor, int dim, int world_size,
    # str group_name): the ranks' tensors concatenated along dim
    return {"vllm.all_reduce.default": {"kind": "all_reduce", "attrs": {"op": "sum"}, "group": 1},
            "vllm.all_gather.default": {"kind": "all_gather", "arg_attrs": {"dim": 1}, "group": 3}}
