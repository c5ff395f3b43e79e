"""One masked lookup over vocabulary shards, ``core.masked_lookup(w, ids, start=s, end=e)``
(lemma_packs/core/lookups.py): each framework's spelling is declared as data mapping to it (Megatron's
``index_put``, its ``masked_fill`` and ``torch.where`` forms, vLLM's ``get_masked_input_and_mask``, torchtitan's
multiplication by the mask), the lemmas are written once on it (core:300, aten:470, aten:1622), the fusion pass
collapses a spelling into it, and a spelling that is not the lookup -- a wrong offset, a mask with ``>`` where
``>=`` was needed, a fill that is not zero -- proves nothing. The same for the target's logit and its one-hot update
(core.masked_pick, core.masked_one_hot_update), the lookup's backward (core.masked_embedding_backward) and nll_loss's
one-hot written into zeros (core.masked_neg_one_hot: into a non-zero table it is not)."""
from __future__ import annotations

import dataclasses
import importlib.util

import pytest

import graphguard.torch as ggt
from graphguard.testing import proves
from lemma_packs.core.lookups import MASK_MULTIPLIED, MASKED_FILL, MEGATRON, SPELLINGS, VLLM, WHERE

from conftest import EXAMPLES

SHAPES = {**{f"w{r}": [4, 5] for r in range(4)}, "ids": [2, 3]}
DTYPES = {"ids": "int64"}
U = "[2, 3, 1]"


def spell(form: str, w: str, s: int, e: int, ids: str = "ids") -> str:
    """A rank's lookup of rows [s, e) held as ``w``, in one framework's spelling (free variables fixed)."""
    t = form.replace("?x0", w).replace("?x1", ids).replace("?p_start", str(s)).replace("?p_end", str(e))
    return (t.replace("?p", "-1").replace("?f", "false").replace("?q", "false").replace("?u", U)
            .replace("?t", "float32").replace("?c", str(e - s - 1)).replace("?n", str(e + 3)).replace("?o", "1"))


def canon(w: str, s: int, e: int, ids: str = "ids") -> str:
    return f"core.masked_lookup({w}, {ids}, start={s}, end={e})"


FORMS = {"megatron": MEGATRON, "masked_fill": MASKED_FILL, "where": WHERE, "titan": MASK_MULTIPLIED}


@pytest.mark.parametrize("form", list(FORMS))
def test_each_spelling_is_the_masked_lookup(form):
    assert proves(spell(FORMS[form], "w1", 4, 8), canon("w1", 4, 8), SHAPES, dtypes=DTYPES)


def test_vllm_spelling_is_the_masked_lookup():
    shapes = {"w1": [4, 5], "ids": [6]}
    t = spell(VLLM, "w1", 4, 8).replace(U, "[6, 1]")
    assert proves(t, canon("w1", 4, 8), shapes, dtypes=DTYPES)
    assert not proves(t, canon("w1", 3, 7), shapes, dtypes=DTYPES)


SHARDS = [(0, 4), (4, 8), (8, 12), (12, 16)]
EMBEDDING = "aten.embedding(concat(w0, w1, w2, w3, dim=0), ids)"


@pytest.mark.parametrize("form", list(FORMS))
def test_a_lookup_is_the_sum_of_the_ranks_masked_lookups_in_any_spelling(form):
    parts = ", ".join(spell(FORMS[form], f"w{r}", s, e) for r, (s, e) in enumerate(SHARDS))
    assert proves(EMBEDDING, f"sum({parts})", SHAPES, dtypes=DTYPES)


def test_ranks_may_spell_their_lookups_differently():
    """One lemma serves every spelling: rank 0 as Megatron, 1 masked_fill, 2 torch.where, 3 torchtitan."""
    parts = ", ".join(spell(f, f"w{r}", s, e) for r, (f, (s, e)) in enumerate(zip(FORMS.values(), SHARDS)))
    assert proves(EMBEDDING, f"sum({parts})", SHAPES, dtypes=DTYPES)
    assert proves(EMBEDDING, f"sum({', '.join(canon(f'w{r}', s, e) for r, (s, e) in enumerate(SHARDS))})",
                  SHAPES, dtypes=DTYPES)


# -- must not prove ------------------------------------------------------------------------------------------

def _wrong_offset(form):  # the ids shifted by s + 1, the mask still [s, e)
    return form.replace("aten.sub.Tensor(?x1, aten.scalar_tensor(s=?p_start,",
                        "aten.sub.Tensor(?x1, aten.scalar_tensor(s=?p_start + 1,")


def _wrong_bound(form):  # ids > e masked where ids >= e must be: id e reads past the shard
    return form.replace("aten.ge.Scalar(?x1, other=?p_end)", "aten.gt.Scalar(?x1, other=?p_end)")


def _wrong_fill(form):  # the masked rows filled with 1, not zeroed
    return (form.replace("aten.full(size=[], fill_value=0, dtype=float32))", "aten.full(size=[], fill_value=1, dtype=float32))")
            .replace("shape=?u), value=0)", "shape=?u), value=1)")
            .replace("aten.scalar_tensor(s=0, dtype=?t)", "aten.scalar_tensor(s=1, dtype=?t)"))


@pytest.mark.parametrize("form", ["megatron", "masked_fill", "where"])
@pytest.mark.parametrize("wrong", [_wrong_offset, _wrong_bound, _wrong_fill])
def test_wrong_spellings_must_not_prove(form, wrong):
    bad = wrong(FORMS[form])
    assert bad != FORMS[form]
    t = spell(bad, "w1", 4, 8).replace("s=4 + 1", "s=5")
    assert not proves(t, canon("w1", 4, 8), SHAPES, dtypes=DTYPES)
    parts = [spell(FORMS[form], f"w{r}", s, e) for r, (s, e) in enumerate(SHARDS)]
    parts[1] = t
    assert not proves(EMBEDDING, f"sum({', '.join(parts)})", SHAPES, dtypes=DTYPES)


@pytest.mark.parametrize("shards", [
    [(4, 8), (0, 4), (8, 12), (12, 16)],  # ranks 0 and 1 swapped their ranges
    [(0, 4), (4, 8), (8, 12), (13, 17)],  # rank 3 off by one
    [(0, 4), (4, 8), (8, 12), (11, 15)],  # rank 3's range overlaps rank 2's
])
def test_wrong_ranges_must_not_prove(shards):
    assert not proves(EMBEDDING, f"sum({', '.join(canon(f'w{r}', s, e) for r, (s, e) in enumerate(shards))})",
                      SHAPES, dtypes=DTYPES)


def test_a_shard_with_the_wrong_offset_must_not_prove():
    assert not proves(canon("concat(w0, w1, dim=0)", 4, 12), f"sum({canon('w0', 4, 8)}, {canon('w1', 9, 12)})",
                      SHAPES, dtypes=DTYPES)
    assert proves(canon("concat(w0, w1, dim=0)", 4, 12), f"sum({canon('w0', 4, 8)}, {canon('w1', 8, 12)})",
                  SHAPES, dtypes=DTYPES)


# -- the declarations are fuzzed; a wrong one fails ----------------------------------------------------------

def test_the_spellings_and_the_lemma_pass_the_fuzzer(plugins):
    from graphguard.engine.fuzz import fuzz_rule
    rules = [r for r in plugins.lemmas if "core.masked_lookup" in r.lemma.rule]
    assert len([r for r in rules if r.lemma.ref == 1218]) == len(SPELLINGS)
    assert {r.lemma.label for r in rules} >= {"core:300", "aten:470", "aten:1622"}
    for r in rules:
        assert fuzz_rule(r, plugins.registry).ok, r.lemma.label


@pytest.mark.parametrize("wrong", [_wrong_offset, _wrong_bound, _wrong_fill])
def test_a_wrong_spelling_fails_the_fuzzer(plugins, wrong):
    from graphguard.engine.fuzz import fuzz_rule
    from graphguard.engine.lemma import build_rules
    lem = next(r.lemma for r in plugins.lemmas if r.lemma.name == "fused-expression[core.masked_lookup#0]")
    rule = lem.rule.replace(MEGATRON, wrong(MEGATRON)).replace("s=?p_start + 1,", "s=?k,")
    assert rule != lem.rule
    if "?k" in rule:  # the offset one: s + 1 as a variable (left-hand attributes are variables or constants)
        lem = dataclasses.replace(lem, cond=lem.cond + " and ?k == ?p_start + 1",
                                  examples=tuple({**x, "k": x["p_start"] + 1} for x in lem.examples))
    (r,) = build_rules(dataclasses.replace(lem, rule=rule, variant="wrong"), plugins.registry)
    assert not fuzz_rule(r, plugins.registry).ok


# -- the fusion pass ---------------------------------------------------------------------------------------

_spec = importlib.util.spec_from_file_location("gpt_tp_vocab_ml", EXAMPLES / "gpt-tp-vocab" / "model.py")
M = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(M)


@pytest.mark.parametrize("form", ["index_put", "masked_fill", "where"])
def test_the_ranks_spelt_out_lookups_fuse_into_the_canonical_op(monkeypatch, plugins, form):
    """Captured forward and backward: each rank's lookup becomes one core.masked_lookup of its shard, and its
    backward one core.masked_embedding_backward (the mask and masked ids the backward reads kept until then)."""
    from graphguard.ir import scalar as S
    from graphguard.passes import fuse_expressions
    for name, value in (("LAYERS", 0), ("VOCAB", 4), ("MASK_FORM", form), ("BUG", "")):
        monkeypatch.setattr(M, name, value)
    monkeypatch.setattr(M.base, "LAYERS", 0)
    g = ggt.capture(lambda r: M.impl(r, 2), lambda r: M.inputs(r, 2), world_size=2, backward=True).graph()
    assert fuse_expressions(g, plugins.registry, S.Constraints()) >= 2
    fused = [n for n in g.nodes if n.op == "core.masked_lookup"]
    assert sorted((dict(n.attrs)["start"], dict(n.attrs)["end"]) for n in fused) == [(0, 2), (2, 4)]
    assert all(n.inputs[0].startswith("embed.weight@") for n in fused)
    assert not any(n.op == "aten.embedding" for n in g.nodes)
    fused = [n for n in g.nodes if n.op == "core.masked_embedding_backward"]
    assert sorted((dict(n.attrs)["start"], dict(n.attrs)["end"]) for n in fused) == [(0, 2), (2, 4)]
    assert all(n.inputs[1].startswith("ids@") for n in fused)
    assert not any(n.op == "aten.embedding_dense_backward" for n in g.nodes)


def test_a_wrong_offset_is_not_fused(monkeypatch, plugins):
    from graphguard.ir import scalar as S
    from graphguard.passes import fuse_expressions
    for name, value in (("LAYERS", 0), ("VOCAB", 4), ("MASK_FORM", "masked_fill"), ("BUG", "mask")):
        monkeypatch.setattr(M, name, value)
    monkeypatch.setattr(M.base, "LAYERS", 0)
    g = ggt.capture(lambda r: M.impl(r, 2), lambda r: M.inputs(r, 2), world_size=2, backward=False).graph()
    fuse_expressions(g, plugins.registry, S.Constraints())
    assert not any(n.op == "core.masked_lookup" for n in g.nodes)  # the rows are not zeroed: no masked lookup


# -- the target's logit and its one-hot update: core.masked_pick, core.masked_one_hot_update --------------------

from lemma_packs.core.lookups import PICK_SPELLINGS, UPDATE_SPELLINGS  # noqa: E402

PICK_SHAPES = {**{f"x{r}": [6, 4] for r in range(4)}, "t": [6]}
PICK_DTYPES = {"t": "int64"}
LOGITS = "concat(x0, x1, x2, x3, dim=1)"


def pick_spell(form: str, x: str, s: int, e: int, t: str = "t") -> str:
    return (form.replace("?x0", x).replace("?x1", t).replace("?p_start", str(s)).replace("?p_end", str(e))
            .replace("?m", "6").replace("?u", "[6]").replace("?w", "[6]").replace("?t", "float32"))


def pick(x, s, e, op="core.masked_pick"):
    return f"{op}({x}, t, start={s}, end={e})"


@pytest.mark.parametrize("k", range(len(PICK_SPELLINGS)))
def test_each_pick_spelling_is_the_masked_pick(k):
    form = PICK_SPELLINGS[k][0]
    assert proves(pick_spell(form, "x1", 4, 8), pick("x1", 4, 8), PICK_SHAPES, dtypes=PICK_DTYPES)
    assert not proves(pick_spell(form, "x1", 4, 8), pick("x1", 3, 7), PICK_SHAPES, dtypes=PICK_DTYPES)
    bad = _wrong_bound(form)  # ``>`` where ``>=`` was needed: target e picked from past the shard
    assert bad != form and not proves(pick_spell(bad, "x1", 4, 8), pick("x1", 4, 8), PICK_SHAPES, dtypes=PICK_DTYPES)


@pytest.mark.parametrize("k", range(len(UPDATE_SPELLINGS)))
def test_each_one_hot_update_spelling_is_the_masked_update(k):
    form, upd = UPDATE_SPELLINGS[k][0], "core.masked_one_hot_update"
    assert proves(pick_spell(form, "x1", 4, 8), pick("x1", 4, 8, upd), PICK_SHAPES, dtypes=PICK_DTYPES)
    assert not proves(pick_spell(form, "x1", 4, 8), pick("x1", 5, 9, upd), PICK_SHAPES, dtypes=PICK_DTYPES)
    bad = _wrong_bound(form)
    assert bad != form
    assert not proves(pick_spell(bad, "x1", 4, 8), pick("x1", 4, 8, upd), PICK_SHAPES, dtypes=PICK_DTYPES)


@pytest.mark.parametrize("k", range(len(PICK_SPELLINGS)))
def test_masked_picks_of_column_shards_add_up_in_any_spelling(k):
    """core:301 (a masked pick of a concat splits), with the logits over all of [0, 16): any targets."""
    parts = ", ".join(pick_spell(PICK_SPELLINGS[k][0], f"x{r}", s, e) for r, (s, e) in enumerate(SHARDS))
    assert proves(pick(LOGITS, 0, 16), f"sum({parts})", PICK_SHAPES, dtypes=PICK_DTYPES)
    upd = "core.masked_one_hot_update"
    parts = ", ".join(pick(f"x{r}", s, e, upd) for r, (s, e) in enumerate(SHARDS))
    assert proves(pick(LOGITS, 0, 16, upd), f"concat({parts}, dim=1)", PICK_SHAPES, dtypes=PICK_DTYPES)


@pytest.mark.parametrize("shards", [
    [(4, 8), (0, 4), (8, 12), (12, 16)],  # ranks 0 and 1 swapped their columns
    [(0, 4), (4, 8), (8, 12), (13, 17)],  # rank 3 off by one
    [(0, 4), (4, 8), (8, 12), (11, 15)],  # rank 3's range overlaps rank 2's
])
def test_wrong_column_ranges_must_not_prove(shards):
    parts = ", ".join(pick(f"x{r}", s, e) for r, (s, e) in enumerate(shards))
    assert not proves(pick(LOGITS, 0, 16), f"sum({parts})", PICK_SHAPES, dtypes=PICK_DTYPES)
    upd = "core.masked_one_hot_update"
    parts = ", ".join(pick(f"x{r}", s, e, upd) for r, (s, e) in enumerate(shards))
    assert not proves(pick(LOGITS, 0, 16, upd), f"concat({parts}, dim=1)", PICK_SHAPES, dtypes=PICK_DTYPES)


def test_pick_and_update_declarations_pass_the_fuzzer_and_a_wrong_one_fails(plugins):
    from graphguard.engine.fuzz import fuzz_rule
    from graphguard.engine.lemma import build_rules
    ops = ("core.masked_pick", "core.masked_one_hot_update")
    rules = [r for r in plugins.lemmas if any(op in r.lemma.rule for op in ops) or r.lemma.label == "aten:476"]
    assert len([r for r in rules if r.lemma.ref == 1218]) == len(PICK_SPELLINGS) + len(UPDATE_SPELLINGS)
    assert {r.lemma.label for r in rules} >= {"core:301", "core:302", "aten:476", "aten:478", "aten:1316", "aten:1319"}
    for r in rules:
        assert fuzz_rule(r, plugins.registry).ok, r.lemma.label
    for op in ops:
        lem = next(r.lemma for r in plugins.lemmas if r.lemma.name == f"fused-expression[{op}#0]")
        wrong = lem.rule.replace("aten.ge.Scalar(?x1, other=?p_end)", "aten.gt.Scalar(?x1, other=?p_end)")
        assert wrong != lem.rule
        (r,) = build_rules(dataclasses.replace(lem, rule=wrong, variant="wrong"), plugins.registry)
        assert not fuzz_rule(r, plugins.registry).ok, op


# -- Megatron GPT's vocab-parallel cross-entropy with no ranges: --------------------------------------------------
# at TP=1 it still masks labels outside [0, V), so it is defined for every label and equals the ranks' sum of
# masked picks for every label: the fusion collapses the TP=1 mask into core.masked_pick(x, t, 0, V) as it does
# each rank's, and core:301 splits it. (examples/megatron-gpt's relation states the range all the same.)

@pytest.fixture(scope="module")
def megatron_gpt(tmp_path_factory):
    pytest.importorskip("megatron.core")
    import json
    import subprocess
    import sys

    import yaml
    out = tmp_path_factory.mktemp("megatron-gpt")
    p = subprocess.run([sys.executable, "-m", "graphguard", "capture", str(EXAMPLES / "megatron-gpt" / "model.py"),
                        "--world-size", "2", "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    rel = yaml.safe_load((out / "relation.yaml").read_text())
    assert "labels" in rel.get("ranges", {})  # the example states it; the tests below drop it
    return (json.loads((out / "spec.gg.json").read_text()), json.loads((out / "impl.gg.json").read_text()), rel)


def _gpt_verify(spec, impl, rel):
    import graphguard
    from graphguard.ir.scalar import Constraints
    from graphguard.ir.serde import graph_from_dict
    from graphguard.plugins import load_plugins
    reg = load_plugins().registry
    return graphguard.verify(graph_from_dict(spec, "<spec>", reg, Constraints()),
                             graph_from_dict(impl, "<impl>", reg, Constraints()), rel)


def _ce_node(impl, op, rank, value):
    """The cross-entropy's node of rank ``rank`` computing ``op`` with the constant ``value``."""
    (n,) = [n for n in impl["nodes"] if n["op"] == op and n["name"].endswith(f"@{rank}")
            and n.get("loc", "").startswith("cross_entropy.py") and value in n["attrs"].values()]
    return n


@pytest.mark.parametrize("ranges", [False, True])
def test_megatron_gpt_cross_entropy_refines_without_ranges(megatron_gpt, ranges):
    spec, impl, rel = megatron_gpt
    rel = rel if ranges else {k: v for k, v in rel.items() if k != "ranges"}
    r = _gpt_verify(spec, impl, rel)
    assert r.verdict == "refines", r.render()
    assert {"out0 = out0@0", "out0 = out0@1"} <= set(r.r_o_lines())
    assert "core:301" in r.stats["lemma_hits"]  # the TP=1 masked pick split over the ranks' columns


@pytest.mark.parametrize("bug", ["rank-1-range-off-by-one", "gt-for-ge"])
def test_megatron_gpt_cross_entropy_bugs_must_not_prove(megatron_gpt, bug):
    import copy
    spec, impl, rel = megatron_gpt
    impl = copy.deepcopy(impl)
    if bug == "rank-1-range-off-by-one":  # rank 1 owns [17, 32), shifted by 17: label 16 is nobody's
        _ce_node(impl, "aten.lt.Scalar", 1, "16")["attrs"]["other"] = "17"
        _ce_node(impl, "aten.scalar_tensor", 1, "16")["attrs"]["s"] = "17"
    else:  # rank 0 masks labels > 16 where >= 16 was needed: label 16 counted twice
        _ce_node(impl, "aten.ge.Scalar", 0, "16")["op"] = "aten.gt.Scalar"
    for rel_ in (rel, {k: v for k, v in rel.items() if k != "ranges"}):
        r = _gpt_verify(spec, impl, rel_)
        assert r.verdict != "refines", bug


# -- the embedding's backward: core.masked_embedding_backward ----------------------------------------------------
# (lemma_packs/core/lookups.py: each spelling the backward of a core.masked_lookup spelling; core:303 splits it
# where a rank's ends; aten:472 makes the whole table's embedding_dense_backward the masked one over [0, V))

from lemma_packs.core.lookups import (BACKWARD, BACKWARD_MASK_MULTIPLIED, BACKWARD_MASKED_FILL,  # noqa: E402
                                      BACKWARD_SPELLINGS, BACKWARD_WHERE, LOCAL, LOCAL_MF, NEG_ONE_HOT)

BW_SHAPES = {"G": [2, 3, 5], "ids": [2, 3]}
BW_FORMS = {"megatron": BACKWARD, "masked_fill": BACKWARD_MASKED_FILL, "where": BACKWARD_WHERE,
            "titan": BACKWARD_MASK_MULTIPLIED}
DENSE_BW = "aten.embedding_dense_backward(G, ids, num_weights=16, padding_idx=-1, scale_grad_by_freq=false)"


def bw_spell(form: str, s: int, e: int, g: str = "G") -> str:
    """A rank's backward of its lookup of rows [s, e) for gradient ``g``, in one framework's spelling."""
    t = form.replace("?x0", g).replace("?x1", "ids").replace("?p_start", str(s)).replace("?p_end", str(e))
    return t.replace("?n", str(e - s)).replace("?u", U).replace("?t", "float32").replace("?c", str(e - s - 1))


def bw(s, e, g="G"):
    return f"core.masked_embedding_backward({g}, ids, start={s}, end={e})"


def test_every_backward_spelling_is_declared():
    assert [f for f, *_ in BACKWARD_SPELLINGS] == list(BW_FORMS.values())


@pytest.mark.parametrize("form", list(BW_FORMS))
def test_each_backward_spelling_is_the_masked_backward(form):
    assert proves(bw_spell(BW_FORMS[form], 4, 8), bw(4, 8), BW_SHAPES, dtypes=DTYPES)
    assert not proves(bw_spell(BW_FORMS[form], 4, 8), bw(3, 7), BW_SHAPES, dtypes=DTYPES)
    # ``>`` where ``>=`` was needed: the gradient of id 8 lands on row 8 - 4, past the shard
    bad = _wrong_bound(BW_FORMS[form]).replace("aten.lt.Scalar(?x1, other=?p_end)", "aten.le.Scalar(?x1, other=?p_end)")
    assert bad != BW_FORMS[form]
    assert not proves(bw_spell(bad, 4, 8), bw(4, 8), BW_SHAPES, dtypes=DTYPES)


@pytest.mark.parametrize("form", ["megatron", "masked_fill", "where"])
def test_a_backward_at_ids_shifted_off_by_one_must_not_prove(form):
    bad = bw_spell(_wrong_offset(BW_FORMS[form]), 4, 8).replace("s=4 + 1", "s=5")
    assert "s=5" in bad
    assert not proves(bad, bw(4, 8), BW_SHAPES, dtypes=DTYPES)


@pytest.mark.parametrize("local", [LOCAL, LOCAL_MF])
def test_a_backward_that_does_not_zero_the_masked_rows_must_not_prove(local):
    """The ids of other ranks' rows point at row 0: their gradient must be zeroed first."""
    ids = local.replace("?x1", "ids").replace("?p_start", "4").replace("?p_end", "8")
    unzeroed = f"aten.embedding_dense_backward(G, {ids}, num_weights=4, padding_idx=-1, scale_grad_by_freq=false)"
    assert not proves(unzeroed, bw(4, 8), BW_SHAPES, dtypes=DTYPES)
    parts = [bw_spell(BACKWARD, s, e) for s, e in SHARDS]
    parts[1] = unzeroed
    assert not proves(DENSE_BW, f"concat({', '.join(parts)}, dim=0)", BW_SHAPES, dtypes=DTYPES)


@pytest.mark.parametrize("form", list(BW_FORMS))
def test_the_whole_tables_backward_is_the_concat_of_the_ranks_in_any_spelling(form):
    parts = ", ".join(bw_spell(BW_FORMS[form], s, e) for s, e in SHARDS)
    assert proves(DENSE_BW, f"concat({parts}, dim=0)", BW_SHAPES, dtypes=DTYPES)


def test_ranks_may_spell_their_backwards_differently():
    parts = ", ".join(bw_spell(f, s, e) for f, (s, e) in zip(BW_FORMS.values(), SHARDS))
    assert proves(DENSE_BW, f"concat({parts}, dim=0)", BW_SHAPES, dtypes=DTYPES)
    two = f"concat({bw_spell(BACKWARD, 0, 8)}, {bw_spell(BACKWARD_MASK_MULTIPLIED, 8, 16)}, dim=0)"
    assert proves(DENSE_BW, two, BW_SHAPES, dtypes=DTYPES)


@pytest.mark.parametrize("shards", [
    [(4, 8), (0, 4), (8, 12), (12, 16)],  # ranks 0 and 1 swapped their ranges
    [(0, 4), (4, 8), (8, 12), (13, 17)],  # rank 3's shard offset off by one
    [(0, 4), (5, 9), (8, 12), (12, 16)],  # rank 1's too (an id of 4 lands nowhere, one of 8 twice)
    [(0, 4), (4, 8), (8, 12), (11, 15)],  # rank 3's range overlaps rank 2's
])
def test_wrong_backward_ranges_must_not_prove(shards):
    assert not proves(DENSE_BW, f"concat({', '.join(bw(s, e) for s, e in shards)}, dim=0)", BW_SHAPES, dtypes=DTYPES)
    parts = ", ".join(bw_spell(BACKWARD_MASKED_FILL, s, e) for s, e in shards)
    assert not proves(DENSE_BW, f"concat({parts}, dim=0)", BW_SHAPES, dtypes=DTYPES)


def test_another_ranks_gradient_must_not_prove():
    shapes = {**BW_SHAPES, "H": [2, 3, 5]}
    parts = [bw(s, e) for s, e in SHARDS]
    parts[2] = bw(8, 12, g="H")
    assert not proves(DENSE_BW, f"concat({', '.join(parts)}, dim=0)", shapes, dtypes=DTYPES)


def test_a_split_backward_proves_and_its_twin_does_not():
    """core:303 on its own: a masked backward of [4, 12) is that of [4, 8) then [8, 12), not [4, 7) then [7, 12)."""
    assert proves(bw(4, 12), f"concat({bw(4, 8)}, {bw(8, 12)}, dim=0)", BW_SHAPES, dtypes=DTYPES)
    assert not proves(bw(4, 12), f"concat({bw(8, 12)}, {bw(4, 8)}, dim=0)", BW_SHAPES, dtypes=DTYPES)
    assert not proves(bw(4, 12), f"concat({bw(4, 8)}, {bw(9, 13)}, dim=0)", BW_SHAPES, dtypes=DTYPES)


# -- nll_loss's one-hot written into zeros (torchtitan's loss parallel): core.masked_neg_one_hot ------------------

OH_SHAPES, OH_DTYPES = {"T": [6], "X": [6, 4]}, {"T": "int64"}
SCATTER = ("aten.scatter.value(aten.full(size=[6, 16], fill_value=0, dtype=float32), reshape(T, shape=[6, 1]), dim=1,"
           " value=-1)")


def oh_spell(s: int, e: int, form: str = NEG_ONE_HOT) -> str:
    return (form.replace("?x0", "T").replace("?p_start", str(s)).replace("?p_end", str(e)).replace("?m", "6")
            .replace("?z", f"[6, {e - s}]").replace("?p_dtype", "float32"))


def oh(s, e):
    return f"core.masked_neg_one_hot(T, start={s}, end={e}, dtype=float32)"


def test_the_one_hot_spelling_is_the_masked_one_hot():
    assert proves(oh_spell(4, 8), oh(4, 8), OH_SHAPES, dtypes=OH_DTYPES)
    assert not proves(oh_spell(4, 8), oh(3, 7), OH_SHAPES, dtypes=OH_DTYPES)
    on_x1 = NEG_ONE_HOT.replace("?x0", "?x1")  # (the targets named as the helpers above name the ids)
    for wrong in (_wrong_bound, _wrong_offset):  # > where >= was needed; the targets shifted by s + 1
        bad = oh_spell(4, 8, wrong(on_x1).replace("?x1", "?x0")).replace("s=4 + 1", "s=5")
        assert bad != oh_spell(4, 8)
        assert not proves(bad, oh(4, 8), OH_SHAPES, dtypes=OH_DTYPES)


@pytest.mark.parametrize("table", [
    "aten.full(size=[6, 4], fill_value=1, dtype=float32)",  # a table of ones
    "X",  # any table (the index_put writes, it does not subtract)
])
def test_a_one_hot_into_a_non_zero_table_must_not_prove(table):
    spelt = oh_spell(4, 8)
    nonzero = spelt.replace("aten.full(size=[6, 4], fill_value=0, dtype=float32)", table, 1)
    assert nonzero != spelt
    assert not proves(nonzero, oh(4, 8), OH_SHAPES, dtypes=OH_DTYPES)
    parts = [oh_spell(s, e) for s, e in SHARDS]
    parts[1] = nonzero
    assert not proves(SCATTER, f"concat({', '.join(parts)}, dim=1)", OH_SHAPES, dtypes=OH_DTYPES, ranges={"T": (0, 16)})
    # nor a scatter into ones as the ranks' one-hots
    ones = SCATTER.replace("fill_value=0", "fill_value=1")
    assert not proves(ones, f"concat({', '.join(oh_spell(s, e) for s, e in SHARDS)}, dim=1)", OH_SHAPES,
                      dtypes=OH_DTYPES, ranges={"T": (0, 16)})


def test_nll_loss_one_hot_is_the_concat_of_the_ranks():
    parts = ", ".join(oh_spell(s, e) for s, e in SHARDS)
    assert proves(SCATTER, f"concat({parts}, dim=1)", OH_SHAPES, dtypes=OH_DTYPES, ranges={"T": (0, 16)})
    assert proves(SCATTER, f"concat({oh(0, 4)}, {oh(4, 12)}, {oh(12, 16)}, dim=1)", OH_SHAPES, dtypes=OH_DTYPES)


@pytest.mark.parametrize("shards", [
    [(4, 8), (0, 4), (8, 12), (12, 16)],  # ranks 0 and 1 swapped their columns
    [(0, 4), (4, 8), (8, 12), (13, 17)],  # rank 3's offset off by one
    [(0, 4), (4, 8), (8, 12), (11, 15)],  # overlapping
])
def test_wrong_one_hot_ranges_must_not_prove(shards):
    assert not proves(SCATTER, f"concat({', '.join(oh_spell(s, e) for s, e in shards)}, dim=1)", OH_SHAPES,
                      dtypes=OH_DTYPES, ranges={"T": (0, 16)})


def test_backward_and_one_hot_declarations_pass_the_fuzzer_and_wrong_ones_fail(plugins):
    from graphguard.engine.fuzz import fuzz_rule
    from graphguard.engine.lemma import build_rules
    ops = ("core.masked_embedding_backward", "core.masked_neg_one_hot")
    rules = [r for r in plugins.lemmas if any(op in r.lemma.rule for op in ops)]
    assert len([r for r in rules if r.lemma.ref == 1218]) == len(BACKWARD_SPELLINGS) + 1
    assert {r.lemma.label for r in rules} >= {"core:303", "core:304", "aten:472", "aten:1734"}
    for r in rules:
        assert fuzz_rule(r, plugins.registry).ok, r.lemma.label
    # (> for >= on the end is no fuzzer twin: id e then lands on row/column e - s, past the table, where
    # embedding_dense_backward and index_put are undefined; <= for < on the start, or the masked rows' gradient
    # set to 1 rather than zeroed, is)
    for name, wrong in (("core.masked_embedding_backward#0", lambda t: t.replace(
                            "aten.zeros(size=[], dtype=float32)", "aten.full(size=[], fill_value=1, dtype=float32)")),
                        ("core.masked_embedding_backward#3",  # torchtitan's mask with > for >=
                         lambda t: t.replace("aten.ge.Scalar(?x1, other=?p_start)", "aten.gt.Scalar(?x1, other=?p_start)")),
                        ("core.masked_neg_one_hot", lambda t: t.replace("aten.lt.Scalar(?x0, other=?p_start)",
                                                                         "aten.le.Scalar(?x0, other=?p_start)")),
                        ("core.masked_neg_one_hot", lambda t: t.replace("fill_value=0, dtype=?p_dtype",
                                                                         "fill_value=1, dtype=?p_dtype", 1))):
        lem = next(r.lemma for r in plugins.lemmas if r.lemma.name == f"fused-expression[{name}]")
        rule = wrong(lem.rule)
        assert rule != lem.rule, name
        (r,) = build_rules(dataclasses.replace(lem, rule=rule, variant="wrong"), plugins.registry)
        assert not fuzz_rule(r, plugins.registry).ok, name


def _titan_impl():
    import json
    return json.loads((EXAMPLES / "torchtitan-llama" / "captured" / "tp2-loss" / "impl.gg.json").read_text())


def _fused(impl, plugins):
    from graphguard.ir import scalar as S
    from graphguard.ir.serde import graph_from_dict
    from graphguard.passes import fuse_expressions
    g = graph_from_dict(impl, "<impl>", plugins.registry, S.Constraints())
    fuse_expressions(g, plugins.registry, S.Constraints())
    return {op: sorted((dict(n.attrs).get("start"), dict(n.attrs).get("end")) for n in g.nodes if n.op == op)
            for op in ("core.masked_embedding_backward", "core.masked_neg_one_hot", "aten.embedding_dense_backward")}


def test_torchtitans_captured_backward_and_one_hot_fuse(plugins):
    """torchtitan TP 2 with loss parallel (kept capture): each rank's embedding backward (times its cast mask, at
    the clamped ids) and its one-hot of the labels (mask - 1 written into zeros) become the canonical ops."""
    ops = _fused(_titan_impl(), plugins)
    assert ops["core.masked_embedding_backward"] == [(0, 32), (32, 64)]
    assert ops["core.masked_neg_one_hot"] == [(0, 32), (32, 64)]
    assert not ops["aten.embedding_dense_backward"]


def test_a_one_hot_into_a_non_zero_table_is_not_fused(plugins):
    impl = _titan_impl()
    (zeros,) = [n for n in impl["nodes"] if n["name"] == "bw.zeros_like@1"]
    assert zeros["op"] == "aten.full" and zeros["attrs"]["fill_value"] == "0"
    zeros["attrs"]["fill_value"] = "1"
    assert _fused(impl, plugins)["core.masked_neg_one_hot"] == [(0, 32)]  # rank 1's is not


# -- a rank's mask reached however it is spelt (engine/frontier.py index_derived) ----------------------------------
# torchtitan's loss parallel at TP 4: each rank gathers its masked targets' column and zeroes the masked rows, an
# unfused spelling; the split lemmas (aten:476, core:301) name the outer ranks' masks, the frontier must reach the
# inner ranks' (ids < 4 | ids >= 8) from the labels they are computed from. Twins: every range off by one, the
# masked rows not zeroed, two ranks taking one range

TP, V, T = 4, 16, 6


class _Pick(__import__("torch").nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x, t):
        return self.f(x, t)


def _rank_pick(rank, shift=0, zero=True, starts=None):
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    s = (rank * (V // TP) if starts is None else starts[rank]) + shift
    e = s + V // TP

    def f(x, t):
        mask = (t < s) | (t >= e)
        local = t - s
        local[mask] = 0
        g = x.gather(1, local.unsqueeze(1))
        if zero:
            g[mask.unsqueeze(1)] = 0.0
        return funcol.all_reduce(g.squeeze(1), "sum", dist.group.WORLD)
    return f


def _verify_pick(**kw):
    import torch
    import graphguard
    torch.manual_seed(0)
    x, t = torch.randn(T, V), torch.randint(0, V, (T,))
    s = ggt.capture(lambda r: _Pick(lambda x, t: x.gather(1, t.unsqueeze(1)).squeeze(1)), lambda r: (x, t),
                    world_size=1)
    d = ggt.capture(lambda r: _Pick(_rank_pick(r, **kw)), lambda r: (x.chunk(TP, 1)[r].contiguous(), t),
                    world_size=TP, distributed=True)
    rel = {"inputs": {"x": "concat(x@0, x@1, x@2, x@3, dim=1)", "t": [f"t@{r}" for r in range(TP)]}}
    return graphguard.verify(s.graph(), d.graph(), rel)


@pytest.mark.parametrize("kw, refines", [
    ({}, True),
    ({"shift": 1}, False),  # every rank's range one column late
    ({"zero": False}, False),  # the masked rows keep column 0's logit
    ({"starts": [0, 4, 4, 12]}, False),  # rank 2 takes rank 1's range: [8, 12) uncounted, [4, 8) twice
], ids=["torchtitan", "off-by-one", "not-zeroed", "range-taken-twice"])
def test_unfused_masked_picks_at_four_ranks(kw, refines):
    r = _verify_pick(**kw)
    assert r.verdict == ("refines" if refines else "does-not-refine"), r.render()
