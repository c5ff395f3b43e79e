"""ATen operators as the core dialect's (``aten.mm`` is ``matmul``, ``addmm`` is ``mm`` plus a broadcast bias,
``aten.add.Tensor`` of one shape is ``sum``, ``bmm`` is ``batched_matmul``), so that ATen programs meet the core
algebra and every other dialect bridged to it.

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import L

# the numbers its lemmas have, then 2200-2249 for new ones
NUMBERS = (range(301, 305), range(365, 366), range(2200, 2250))


LEMMAS = [
    L(301, "mm-is-matmul", "aten.mm(?a, ?b) <=> matmul(?a, ?b)"),
    L(302, "addmm-is-mm-plus-bias", "aten.addmm(?c, ?a, ?b) => aten.add.Tensor(aten.mm(?a, ?b), ?c)"),
    L(303, "add-is-sum", "aten.add.Tensor(?a, ?b) => sum(?a, ?b)", "shape(?a) == shape(?b)"),
    L(304, "baddbmm-is-bmm-plus", "aten.baddbmm(?c, ?a, ?b) => aten.add.Tensor(aten.bmm(?a, ?b), ?c)"),
    L(365, "bmm-is-batched-matmul", "aten.bmm(?a, ?b) => batched_matmul(?a, ?b)"),
]
