"""Vocabulary-parallel embedding and cross-entropy (examples/gpt-tp-vocab, Megatron-style): the model without
blocks verifies forward and backward at degrees 2 and 4, with the masks applied by ``index_put`` (Megatron) or
``masked_fill`` (other versions, vLLM); planted bugs are flagged at the right operator with a numerically
visible difference; the vocab lemmas ("this proves that" and "this must not")."""
from __future__ import annotations

import importlib.util

import pytest

import graphguard
import graphguard.torch as ggt
from graphguard.testing import proves
from lemma_packs.aten.vocab_lookups import _LOCAL, _LOCAL_MF, _LOOKUP, _LOOKUP_MF, _PREDICTED, _PREDICTED_MF

from conftest import EXAMPLES

_spec = importlib.util.spec_from_file_location("gpt_tp_vocab", EXAMPLES / "gpt-tp-vocab" / "model.py")
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)


def _verify(monkeypatch, world=2, backward=False, bug="", form="index_put"):
    """Embedding -> final LayerNorm -> LM head -> cross-entropy (no blocks: the vocab parts, fast). The
    vocabulary has 4 words: replay draws token ids in [0, 4), which then fall into every rank's shard."""
    monkeypatch.setattr(M, "LAYERS", 0)
    monkeypatch.setattr(M.base, "LAYERS", 0)
    monkeypatch.setattr(M, "VOCAB", 4)
    monkeypatch.setattr(M, "BUG", bug)
    monkeypatch.setattr(M, "MASK_FORM", form)
    s = ggt.capture(lambda r: M.spec(), lambda r: M.inputs(None, world), world_size=1, backward=backward)
    d = ggt.capture(lambda r: M.impl(r, world), lambda r: M.inputs(r, world), world_size=world, backward=backward)
    ops = {n.op for n in d.graph().nodes}
    assert ("aten.masked_fill.Scalar" in ops) == (form == "masked_fill"), ops
    assert ("aten.where.self" in ops) == (form == "where"), ops
    rel = dict(M.relation(world, backward), expect=M.expect(world, backward))
    return graphguard.verify(s.graph(), d.graph(), rel, replay=True)


def _cat(name, world):
    return f"{name} = concat({', '.join(f'{name}@{r}' for r in range(world))}, dim=0)"


# (world 4: slow, suite time -- the project's imitation; Megatron's own vocab-parallel layers run by default in
# examples/megatron-gpt)
@pytest.mark.parametrize("world", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_vocab_parallel_embedding_and_cross_entropy_refine(monkeypatch, world):
    r = _verify(monkeypatch, world, backward=True)
    assert r.verdict == "refines", r.render()
    lines = r.r_o_lines()
    assert [f"out0 = out0@{k}" for k in range(world)] == [x for x in lines if x.startswith("out0 ")]
    assert _cat("grad.embed.weight", world) in lines
    assert _cat("grad.head.weight", world) in lines
    assert "grad.ln_f.weight = grad.ln_f.weight@0" in lines
    assert not r.expect["missing"] and r.replay["ok"]


@pytest.mark.parametrize("world,form", [(2, "masked_fill"), pytest.param(4, "masked_fill", marks=pytest.mark.slow),
                                        (2, "where")])
def test_masked_fill_form_refines(monkeypatch, world, form):
    """``(ids - start).masked_fill(mask, 0)``, ``out.masked_fill(mask.unsqueeze(-1), 0.0)`` and
    ``predicted.masked_fill(target_mask, 0.0)``; the backward zeroes the gradient with masked_fill too. The
    ``torch.where(mask, 0, x)`` form is the same through lemma 487."""
    r = _verify(monkeypatch, world, backward=True, form=form)
    assert r.verdict == "refines", r.render()
    lines = r.r_o_lines()
    assert [f"out0 = out0@{k}" for k in range(world)] == [x for x in lines if x.startswith("out0 ")]
    assert _cat("grad.embed.weight", world) in lines and _cat("grad.head.weight", world) in lines
    assert not r.expect["missing"] and r.replay["ok"]
    # the gather and the one-hot update as the ranks' core.masked_pick / core.masked_one_hot_update, the embedding's
    # backward as their core.masked_embedding_backward (any spelling): split over [0, V) (472, core:303)
    assert {"aten:470", "aten:472", "core:303", "aten:476", "aten:478"} <= set(r.stats["lemma_hits"])  # (480 is native: not counted)


@pytest.mark.parametrize("bug,backward,op,form", [
    ("mask", False, "aten.embedding", "masked_fill"),
    ("target-mask", False, "aten.gather", "masked_fill"),
    ("offset", True, "aten.embedding", "masked_fill"),
    ("mask", False, "aten.embedding", "where"),
    ("target-mask", False, "aten.gather", "where"),
])
def test_masked_fill_form_bugs_are_flagged(monkeypatch, bug, backward, op, form):
    r = _verify(monkeypatch, backward=backward, bug=bug, form=form)
    assert r.verdict == "does-not-refine" and r.exit_code == 1, r.render()
    assert r.failure.op == op and r.failure.replay["max_abs_diff"] > 1e-3


@pytest.mark.parametrize("bug,backward,op", [
    ("offset", False, "aten.embedding"),  # rank r looks up rank r+1's vocabulary range in its own rows
    ("mask", False, "aten.embedding"),  # out-of-shard ids read row 0 of every other rank's table
    ("target-mask", False, "aten.gather"),  # other ranks add their column 0 to the target's logit
    ("backward-mask", True, "aten.scatter_add"),  # every rank subtracts the one-hot, owner or not
])
def test_vocab_bugs_are_flagged(monkeypatch, bug, backward, op):
    r = _verify(monkeypatch, backward=backward, bug=bug)
    assert r.verdict == "does-not-refine" and r.exit_code == 1, r.render()
    assert r.failure.op == op
    assert r.failure.replay["max_abs_diff"] > 1e-3  # the bug is numerically visible
    assert r.replay["ok"]  # every relation found before the failure holds


# -- the lemmas -------------------------------------------------------------------------------------

def _lookup(w, s, e):
    return _LOOKUP.format(w=w, i="ids", s=s, e=e).replace("?p", "-1").replace("?f", "false").replace("?q", "false")


def _predicted(x, s, e):
    return _PREDICTED.format(x=x, m=3, i="reshape(t, shape=[3])", s=s, e=e)


SHAPES = {**{f"w{r}": [4, 5] for r in range(4)}, "ids": [2, 3], "rows": [3, 5], "other": [3, 5], "t": [3, 1]}
EMBEDDING = "aten.embedding(concat(w0, w1, w2, w3, dim=0), ids)"
SHARDS = [(0, 4), (4, 8), (8, 12), (12, 16)]


def test_a_lookup_is_the_sum_of_the_masked_lookups_of_its_vocab_shards():
    parts = ", ".join(_lookup(f"w{r}", s, e) for r, (s, e) in enumerate(SHARDS))
    assert proves(EMBEDDING, f"sum({parts})", SHAPES)
    gather = "aten.gather(concat(rows, other, dim=1), t, dim=1)"
    assert proves(gather, f"reshape(sum({_predicted('rows', 0, 5)}, {_predicted('other', 5, 10)}), shape=[3, 1])",
                  SHAPES)


@pytest.mark.parametrize("shards", [
    [(4, 8), (0, 4), (8, 12), (12, 16)],  # ranks 0 and 1 swapped their vocabulary ranges
    [(0, 4), (4, 8), (8, 12), (13, 17)],  # rank 3 off by one
    [(0, 4), (4, 8), (8, 16), (12, 16)],  # rank 2's range overlaps rank 3's
])
def test_wrong_vocab_ranges_must_not_prove(shards):
    parts = ", ".join(_lookup(f"w{r}", s, e) for r, (s, e) in enumerate(shards))
    assert not proves(EMBEDDING, f"sum({parts})", SHAPES)
    parts = ", ".join(_lookup_mf(f"w{r}", s, e) for r, (s, e) in enumerate(shards))
    assert not proves(EMBEDDING, f"sum({parts})", SHAPES)


def _lookup_mf(w, s, e, ids="ids"):
    """The masked_fill form: ids shifted with masked_fill, rows zeroed with masked_fill(mask.unsqueeze(-1))."""
    mf = _LOOKUP_MF.format(w=w, i=ids, s=s, e=e).replace("?p", "-1").replace("?f", "false").replace("?q", "false")
    mf = mf.replace("?u", "[2, 3, 1]")
    local_ip, local_mf = _LOCAL.format(i=ids, s=s, e=e), _LOCAL_MF.format(i=ids, s=s, e=e)
    return mf.replace(local_ip, local_mf)  # as captured: the ids masked with masked_fill too


def test_masked_fill_form_lookups_and_logits():
    # the rank-0 unsqueezed mask is part of rank 0's lookup, which binds the lemma's unsqueeze shape
    parts = ", ".join(_lookup_mf(f"w{r}", s, e) for r, (s, e) in enumerate(SHARDS))
    assert proves(EMBEDDING, f"sum({parts})", SHAPES)
    predicted = [_PREDICTED_MF.format(x=x, m=3, i="reshape(t, shape=[3])", s=s, e=e)
                 for x, s, e in (("rows", 0, 5), ("other", 5, 10))]
    gather = "aten.gather(concat(rows, other, dim=1), t, dim=1)"
    assert proves(gather, f"reshape(sum({predicted[0]}, {predicted[1]}), shape=[3, 1])", SHAPES)
    unmasked = [_PREDICTED_MF.format(x=x, m=3, i="reshape(t, shape=[3])", s=s, e=e)
                for x, s, e in (("rows", 0, 5), ("other", 0, 5))]  # both ranks claim columns [0, 5)
    assert not proves(gather, f"reshape(sum({unmasked[0]}, {unmasked[1]}), shape=[3, 1])", SHAPES)


def test_unmasked_lookups_must_not_prove():
    unmasked = [f"aten.embedding(w{r}, {_LOCAL.format(i='ids', s=s, e=e)})" for r, (s, e) in enumerate(SHARDS)]
    assert not proves(EMBEDDING, f"sum({', '.join(unmasked)})", SHAPES)
    gather = "aten.gather(concat(rows, other, dim=1), t, dim=1)"
    assert not proves(gather, f"reshape(sum({_predicted('rows', 0, 5)}, {_predicted('other', 0, 5)}), shape=[3, 1])",
                      SHAPES)


def test_index_variables_and_their_bounds_must_be_bound(plugins):
    from graphguard.engine.lemma import LemmaError, build_rules
    from graphguard.ir.lemma import L
    for index in ({"j": "size(?w, 0)"}, {"i": "size(?x, 0)"}):
        with pytest.raises(LemmaError, match="index variable"):
            build_rules(L(9003, "bad-index", "aten.embedding(?w, ?i) => aten.embedding(?w, ?i)", index=index),
                        plugins.registry)
