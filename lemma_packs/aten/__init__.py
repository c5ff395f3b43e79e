"""The ATen lemma pack: PyTorch ATen operators (shapes, NumPy references) and their lemmas (a plugin)."""
from graphguard.hookspecs import hookimpl

from .attention import LEMMAS as ATTENTION
from .bridges import LEMMAS as BRIDGES
from .data_ops import OPS as DATA_OPS
from .elementwise import LEMMAS as ELEMENTWISE
from .grouped import OPS as GROUPED_OPS
from .hf_ops import HF_OPS
from .indexing import LEMMAS as INDEXING
from .losses import LEMMAS as LOSSES
from .megatron_moe import FUNCTIONS as MEGATRON_MOE_FUNCTIONS, OPS as MEGATRON_MOE_OPS
from .more_ops import OPS as MORE_OPS
from .normalisation import LEMMAS as NORMALISATION
from .ops import OPS
from .partial_sums import LEMMAS as PARTIAL_SUMS
from .products import LEMMAS as PRODUCTS
from .reductions import LEMMAS as REDUCTIONS
from .scaling import LEMMAS as SCALING
from .titan import FUNCTIONS as TITAN_FUNCTIONS, OPS as TITAN_OPS
from .views_movement import LEMMAS as VIEWS_MOVEMENT
from .view_functions import FUNCTIONS as VIEW_FUNCTIONS
from .vocab_lookups import LEMMAS as VOCAB_LOOKUPS
from .zoo_ops import ZOO_OPS


@hookimpl
def graphguard_ops():
    return OPS + HF_OPS + ZOO_OPS + MORE_OPS + MEGATRON_MOE_OPS + TITAN_OPS + DATA_OPS + GROUPED_OPS


# the lemmas, one file per subject (each declares its NUMBERS)
LEMMAS = (SCALING + ELEMENTWISE + LOSSES + PARTIAL_SUMS + REDUCTIONS + NORMALISATION
          + BRIDGES + VIEWS_MOVEMENT + PRODUCTS + INDEXING + VOCAB_LOOKUPS + ATTENTION)


@hookimpl
def graphguard_lemmas():
    return LEMMAS


@hookimpl
def graphguard_lemma_functions():
    return {**VIEW_FUNCTIONS, **MEGATRON_MOE_FUNCTIONS, **TITAN_FUNCTIONS}
