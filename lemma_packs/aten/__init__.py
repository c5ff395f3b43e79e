"""The ATen lemma pack: PyTorch ATen operators (shapes, NumPy references) and their lemmas (a plugin).

The operators are in ``ops/``, one module per subject; the lemmas in the files beside it, one per subject (each
declares its NUMBERS); the lemma functions their conditions call in ``view_functions.py``."""
from graphguard.hookspecs import hookimpl

from .attention import LEMMAS as ATTENTION
from .bridges import LEMMAS as BRIDGES
from .elementwise import LEMMAS as ELEMENTWISE
from .indexing import LEMMAS as INDEXING
from .losses import LEMMAS as LOSSES
from .normalisation import LEMMAS as NORMALISATION
from .ops import OPS
from .partial_sums import LEMMAS as PARTIAL_SUMS
from .products import LEMMAS as PRODUCTS
from .reductions import LEMMAS as REDUCTIONS
from .scaling import LEMMAS as SCALING
from .views_movement import LEMMAS as VIEWS_MOVEMENT
from .view_functions import FUNCTIONS as VIEW_FUNCTIONS
from .vocab_lookups import LEMMAS as VOCAB_LOOKUPS


@hookimpl
def graphguard_ops():
    return OPS


# the lemmas, one file per subject (each declares its NUMBERS)
LEMMAS = (SCALING + ELEMENTWISE + LOSSES + PARTIAL_SUMS + REDUCTIONS + NORMALISATION
          + BRIDGES + VIEWS_MOVEMENT + PRODUCTS + INDEXING + VOCAB_LOOKUPS + ATTENTION)


@hookimpl
def graphguard_lemmas():
    return LEMMAS


@hookimpl
def graphguard_lemma_functions():
    return VIEW_FUNCTIONS
