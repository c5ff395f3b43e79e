"""Bug: expert-parallel dropless dispatch that selects tokens by the *local* expert index.

The ``ag`` layout of ``examples/moe-ep`` with ``MOE_DISPATCH=sparse``: tokens are all-gathered, every rank
routes all of them and runs its EXPERTS / world experts on the tokens routed to each
(``torch.where(idx == e)``, a ``nonzero`` whose row count the data decides). Rank r's j-th expert is global
expert ``r * local + j``; this variant compares the router's choices with ``j``, so every rank serves the
tokens of experts 0 .. local-1 with its own weights, and the tokens routed to the other experts are never
served. Expected: flagged at the token selection of the first expert no rank selects for
(``aten.eq.Scalar`` with ``other=local``: no G_d tensor compares the choices with it).
"""
import importlib.util
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location("moe_ep", Path(__file__).resolve().parents[2] / "moe-ep" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

inputs = base.inputs


class LocalIdMoE(base.MoE):
    def _sparse(self, x, weights, idx):
        out = torch.zeros_like(x)
        for j, expert in enumerate(self.experts):
            tok, slot = torch.where(idx == j)  # BUG: j is the local index; the router chose global ids
            out = out.index_add(0, tok, expert(x[tok]) * weights[tok, slot, None])
        return out


def spec():
    return base.MoE(1, dispatch="sparse")


def impl(rank, world):
    return LocalIdMoE(world, "ag", dispatch="sparse", rank=rank)


def relation(world, backward):
    return base.relation(world, backward, "ag")


expect = base.expect
