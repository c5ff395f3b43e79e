"""The core lemma pack: symbolic proofs and fuzzing every lemma (what it proves and must not prove:
lemma_packs/core/proofs.py)."""
from __future__ import annotations

import pytest

from graphguard.engine.fuzz import fuzz_rule
from graphguard.engine.lemma import LemmaError, build_rules
from graphguard.ir.lemma import L
from graphguard.testing import proves
from lemma_packs.core.proofs import SHAPES as M

# what the lemmas prove, and must not: lemma_packs/core/proofs.py (tests/test_pack_proofs.py)


def test_symbolic_proves_and_must_not():
    shapes = {"P": ["K/2", 3], "Q": ["K/2", 3]}
    sym = {"K": {"min": 2, "multiple_of": 2}}
    assert proves("slice(concat(P, Q, dim=0), dim=0, start=0, end=K/4)", "slice(P, dim=0, start=0, end=K/4)",
                  shapes, {"K": {"min": 4, "multiple_of": 4}})
    assert proves("slice(concat(P, Q, dim=0), dim=0, start=K/2, end=K)", "Q", shapes, sym)
    assert not proves("slice(concat(P, Q, dim=0), dim=0, start=0, end=K/2 + 1)", "P", shapes, sym)
    # K/4 <= K/2 holds for K >= 0 only: with no usable sign information the condition is not proved
    assert not proves("slice(concat(P, Q, dim=0), dim=0, start=K/2 - 1, end=K/2)", "Q", shapes, sym)


# every built-in pack's lemmas through the fuzzer (20 distinct instances each); the big pack in two halves so
# that parallel workers share the work
BUILTIN = [("core", 0), ("aten", 0), ("aten", 1), ("apex", 0), ("vllm", 0), ("hlo-ops", 0), ("aten-hlo", 0),
           ("neuronx", 0), ("aten-neuronx", 0), ("onnx-ops", 0), ("onnx-aten", 0), ("graphguard.ir", 0)]  # (the clean ops' lemmas derived from their properties)


@pytest.mark.parametrize("pack,half", BUILTIN)
def test_every_builtin_lemma_passes_the_fuzzer(plugins, pack, half):
    parts = 2 if pack == "aten" else 1
    rules = [r for r in plugins.lemmas if r.lemma.pack == pack][half::parts]
    assert rules
    bad = [(r.id, rep.why()) for r in rules if not (rep := fuzz_rule(r, plugins.registry)).ok]
    assert not bad


def test_the_fuzz_tests_cover_every_builtin_pack(plugins):
    assert {r.lemma.pack for r in plugins.lemmas} == {p for p, _ in BUILTIN}
    assert len({r.lemma.ref for r in plugins.lemmas}) >= 35


@pytest.mark.parametrize("rule,cond", [
    # the classic mistake: forgetting that the right operand also has to be split the same way
    ("sub(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d)) => concat(sub(?a, ?e), sub(?b, ?c), dim=?d)",
     "size(?a, ?d) == size(?c, ?d)"),
    # wrong slice offset arithmetic
    ("slice(concat(?p, ?q, dim=?d), dim=?d, start=?s, end=?e) => slice(?q, dim=?d, start=?s, end=?e)",
     "?s >= size(?p, ?d)"),
    # a missing condition
    ("slice(?x, dim=?d, start=0, end=?e) => ?x", ""),
])
def test_fuzzer_catches_unsound_lemmas(plugins, rule, cond):
    (r, *_) = build_rules(L(9001, "bogus", rule, cond), plugins.registry)
    rep = fuzz_rule(r, plugins.registry, trials=25)
    assert not rep.ok and rep.failure, rep


@pytest.mark.parametrize("rule,cond,msg", [
    ("relu(?x) => exp(?y)", "", "unbound variable"),
    ("relu(?x) => relu(?x)", "?z > 0", "unbound variable"),
    ("nosuchop(?x) => ?x", "", "unknown operator"),
    ("relu(?x) -> ?x", "", "lhs => rhs"),
    ("concat(?a, ?b, ?c, dim=0) => ?a", "", "binary inside patterns"),
    ("slice(?x, dim=0, start=0) => ?x", "", "needs attribute end"),
])
def test_bad_lemmas_are_rejected_when_built(plugins, rule, cond, msg):
    with pytest.raises(LemmaError, match=msg) as e:
        build_rules(L(9002, "bad", rule, cond), plugins.registry)
    assert "9002" in str(e.value) and "test_lemmas.py" in str(e.value)  # names the lemma and where


def test_lemmas_remember_where_they_were_written(plugins):
    r = next(r for r in plugins.lemmas if r.lemma.ref == 201)
    assert r.lemma.where.endswith(".py:" + r.lemma.where.rsplit(":", 1)[1])
    assert "lemma_packs/core/lemmas.py" in r.lemma.where.replace("\\", "/")
    assert r.lemma.pack == "core"


def test_proves_rejects_ill_shaped_input():
    from graphguard.errors import InputError
    with pytest.raises(InputError, match="operand shapes differ"):
        proves("sub(P, Q)", "P", M)


def test_concat_regroup_runs_late_and_keeps_the_parts_in_order():
    """core:127 regroups ``((a, b), c)`` as ``(a, (b, c))`` into the tiles a view that splits the concatenated dim
    reads -- in the late search only (everywhere, it would regroup every concatenation); parts swapped must not."""
    s = {"A": [1, 3], "B": [1, 3], "C": [1, 3], "D": [1, 3]}
    lhs = "reshape(concat(A, B, C, D, dim=0), shape=[2, 6])"
    tiles = "concat(reshape(concat(A, B, dim=0), shape=[1, 6]), reshape(concat({}, dim=0), shape=[1, 6]), dim=0)"
    assert not proves(lhs, tiles.format("C, D"), s)  # (not in the first search)
    assert proves(lhs, tiles.format("C, D"), s, late=True)
    assert not proves(lhs, tiles.format("D, C"), s, late=True)
