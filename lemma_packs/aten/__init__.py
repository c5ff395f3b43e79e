"""The ATen lemma pack: PyTorch ATen operators (shapes, NumPy references) and their lemmas (a plugin)."""
from graphguard.hookspecs import hookimpl

from .data_ops import OPS as DATA_OPS
from .grouped import OPS as GROUPED_OPS
from .hf_ops import HF_OPS
from .lemmas import LEMMAS
from .more_ops import OPS as MORE_OPS
from .megatron import FUNCTIONS as MEGATRON_FUNCTIONS
from .megatron_moe import FUNCTIONS as MEGATRON_MOE_FUNCTIONS, OPS as MEGATRON_MOE_OPS
from .ops import OPS
from .titan import FUNCTIONS as TITAN_FUNCTIONS, OPS as TITAN_OPS
from .zoo_ops import ZOO_OPS


@hookimpl
def graphguard_ops():
    return OPS + HF_OPS + ZOO_OPS + MORE_OPS + MEGATRON_MOE_OPS + TITAN_OPS + DATA_OPS + GROUPED_OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS


@hookimpl
def graphguard_lemma_functions():
    return {**MEGATRON_FUNCTIONS, **MEGATRON_MOE_FUNCTIONS, **TITAN_FUNCTIONS}
