"""``aten._grouped_mm`` (the grouped expert product of MoE layers): its reference against torch's CPU kernel on
any offsets, its lemmas proving what holds within a group and refusing what does not (the token rows are
not split: a row's group is its position), and a mixture of experts on grouped products verified end to end,
forward and backward."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from graphguard.engine.fuzz import fuzz_rule
from graphguard.engine.lemma import build_rules
from graphguard.ir.lemma import L
from graphguard.testing import proves
from lemma_packs.aten.ops.mixture_of_experts import OPS

GMM = next(o for o in OPS if o.name == "aten._grouped_mm")
G = "absent=[3]"


@pytest.mark.parametrize("seed", range(6))
def test_reference_is_the_kernel_on_any_offsets(seed):
    """Both forms, offsets drawn anywhere in 0..S (unsorted too: each group runs from the previous offset to
    its own, a later one writing over an earlier one); rows no group writes are NaN in the reference (the
    kernel leaves memory as it was) and compared nowhere."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(20):
        e = int(torch.randint(1, 5, (), generator=g))
        offs = torch.randint(0, 9, (e,), generator=g, dtype=torch.int32)
        x, w = torch.randn(8, 8, generator=g), torch.randn(e, 8, 4, generator=g)
        got = GMM.ref([x.numpy(), w.numpy(), offs.numpy()], {"absent": [3]})
        want = torch._grouped_mm(x, w, offs=offs).numpy()
        written = ~np.isnan(got)
        np.testing.assert_allclose(got[written], want[written], rtol=1e-5, atol=1e-5)
        assert written.any(axis=1).sum() == len(set().union(*[range(s, t) for s, t in zip(
            [0] + offs.tolist()[:-1], offs.tolist())]))
        a, b = torch.randn(4, 8, generator=g), torch.randn(8, 8, generator=g)
        got = GMM.ref([a.numpy(), b.numpy(), offs.numpy()], {"absent": [3]})
        np.testing.assert_allclose(got, torch._grouped_mm(a, b, offs=offs).numpy(), rtol=1e-5, atol=1e-5)


# what the grouped products' lemmas prove, and must not: lemma_packs/aten/proofs.py (tests/test_pack_proofs.py)



def test_a_token_row_split_fails_the_fuzzer(plugins):
    """The lemma that must not exist: stated, the fuzzer refutes it (rows' groups are their positions)."""
    (r,) = build_rules(L(9002, "grouped-mm-rows",
                         f"aten._grouped_mm(concat(?a, ?b, dim=0), ?w, ?o, {G})"
                         f" => concat(aten._grouped_mm(?a, ?w, ?o, {G}), aten._grouped_mm(?b, ?w, ?o, {G}), dim=0)",
                         "rank(?a) == 2 and rank(?w) == 3", index={"o": "size(?a, 0) + 1"},
                         examples=[{"a": [3, 4], "b": [3, 4], "w": [2, 4, 2], "o": [2]}]), plugins.registry)
    assert not fuzz_rule(r, plugins.registry).ok


def test_a_moved_concatenation_boundary_refutes_a_missing_condition(plugins):
    """Lemma 1901 without ``size(?x, 1) == size(?a, 1)``: the parts of the two concatenations line up by their
    totals only. The fuzzer moves a seed's boundary (x a column longer, y one shorter) and the right side is
    ill-formed there; with the condition the lemma passes."""
    def rule(cond):
        return build_rules(L(9004, "grouped-mm-block-k-unchecked",
                             f"aten._grouped_mm(concat(?x, ?y, dim=1), concat(?a, ?b, dim=1), ?o, {G})"
                             f" => sum(aten._grouped_mm(?x, ?a, ?o, {G}), aten._grouped_mm(?y, ?b, ?o, {G}))",
                             cond, index={"o": "size(?x, 0) + 1"},
                             examples=[{"x": [6, 2], "y": [6, 3], "a": [3, 2, 4], "b": [3, 3, 4], "o": [3]}]),
                           plugins.registry)
    (bad,) = rule("rank(?x) == 2 and rank(?a) == 3")
    rep = fuzz_rule(bad, plugins.registry)
    assert not rep.ok and "right side ill-formed" in rep.failure
    (good,) = rule("rank(?x) == 2 and rank(?a) == 3 and size(?x, 1) == size(?a, 1)")
    assert fuzz_rule(good, plugins.registry).ok


MASK = {"P": [4, 6], "Q": [4, 6], "M": [4, 1]}


def test_masked_fill_with_zero_takes_partial_sums_through():
    """``masked_fill`` is linear in its input where the value is 0 (``linear_when``): a row-parallel product's
    partial sums go through it (HF's sentinel rows after the experts' down projection); with another value the
    ranks would each fill it, and the sum would hold it twice."""
    assert proves("aten.masked_fill.Scalar(sum(P, Q), M, value=0)",
                  "sum(aten.masked_fill.Scalar(P, M, value=0), aten.masked_fill.Scalar(Q, M, value=0))",
                  MASK, dtypes={"M": "bool"})
    assert not proves("aten.masked_fill.Scalar(sum(P, Q), M, value=1)",
                      "sum(aten.masked_fill.Scalar(P, M, value=1), aten.masked_fill.Scalar(Q, M, value=1))",
                      MASK, dtypes={"M": "bool"})


def test_linear_groups_follow_the_attribute_values(plugins):
    op = plugins.registry.get("aten.masked_fill.Scalar")
    assert op.linear_groups() == ((0,),)
    assert op.linear_groups({"value": 0}) == ((0,),)
    assert op.linear_groups({"value": 0.5}) == ()
