"""The core lemma pack: "this proves that", "this must NOT prove that", and fuzzing every lemma."""
from __future__ import annotations

import pytest

from graphguard.engine.fuzz import fuzz_rule
from graphguard.engine.lemma import LemmaError, build_rules
from graphguard.ir.lemma import L
from graphguard.testing import proves

M = {"A0": [4, 3], "A1": [4, 5], "B0": [3, 2], "B1": [5, 2], "W": [6, 2], "P": [2, 3], "Q": [3, 3],
     "X": [4, 3], "Y": [4, 3], "X5": [5, 3], "R0": [2, 6], "R1": [2, 6]}

PROVES = [
    ("matmul(concat(A0, A1, dim=1), concat(B0, B1, dim=0))", "sum(matmul(A0, B0), matmul(A1, B1))"),
    ("matmul(concat(R0, R1, dim=0), W)", "concat(matmul(R0, W), matmul(R1, W), dim=0)"),
    ("slice(concat(P, Q, dim=0), dim=0, start=0, end=2)", "P"),
    ("slice(concat(P, Q, dim=0), dim=0, start=2, end=5)", "Q"),
    ("slice(concat(P, Q, dim=0), dim=0, start=3, end=5)", "slice(Q, dim=0, start=1, end=3)"),
    ("concat(slice(X, dim=0, start=0, end=2), slice(X, dim=0, start=2, end=4), dim=0)", "X"),
    ("permute(permute(X, dims=[1, 0]), dims=[1, 0])", "X"),
    ("slice(permute(X, dims=[1, 0]), dim=1, start=0, end=2)", "permute(slice(X, dim=0, start=0, end=2), dims=[1, 0])"),
    ("reshape(reshape(X, shape=[12]), shape=[4, 3])", "X"),
    ("sub(concat(R0, R1, dim=0), concat(R1, R0, dim=0))", "concat(sub(R0, R1), sub(R1, R0), dim=0)"),
    ("add(X, Y)", "sum(X, Y)"),
    ("identity(X)", "X"),
    ("concat(P, concat(Q, P, dim=0), dim=0)", "concat(concat(P, Q, dim=0), P, dim=0)"),
    # a constant factor moves out of data movement and matmuls, and combines (140-148)
    ("concat(scale(R0, factor=1/2), scale(R1, factor=1/2), dim=0)", "scale(concat(R0, R1, dim=0), factor=1/2)"),
    ("sum(scale(X, factor=1/4), scale(Y, factor=1/4))", "scale(sum(X, Y), factor=1/4)"),
    ("scale(scale(X, factor=2), factor=1/2)", "X"),
    ("matmul(scale(R0, factor=1/2), W)", "scale(matmul(R0, W), factor=1/2)"),
    ("permute(scale(X, factor=3), dims=[1, 0])", "scale(permute(X, dims=[1, 0]), factor=3)"),
]

MUST_NOT_PROVE = [
    # swapped shards: same shapes, different values
    ("matmul(concat(R0, R1, dim=0), W)", "concat(matmul(R1, W), matmul(R0, W), dim=0)"),
    # a partial range is not the whole tensor
    ("concat(slice(X5, dim=0, start=0, end=2), slice(X5, dim=0, start=2, end=4), dim=0)", "slice(X5, dim=0, start=1, end=5)"),
    # off by one
    ("slice(concat(P, Q, dim=0), dim=0, start=1, end=3)", "P"),
    # mismatched pairing of elementwise operands
    ("sub(concat(R0, R1, dim=0), concat(R1, R0, dim=0))", "concat(sub(R1, R0), sub(R0, R1), dim=0)"),
    # a sum is not one of its operands; sum is not concat
    ("sum(X, Y)", "X"),
    ("permute(X, dims=[1, 0])", "reshape(X, shape=[3, 4])"),
    ("matmul(concat(A0, A1, dim=1), concat(B0, B1, dim=0))", "matmul(A0, B0)"),
    # factors: different ones never combine, none disappears, and a nonlinear op keeps its own
    ("sum(scale(X, factor=1/2), scale(Y, factor=1/4))", "scale(sum(X, Y), factor=1/2)"),
    ("concat(scale(R0, factor=1/2), R1, dim=0)", "scale(concat(R0, R1, dim=0), factor=1/2)"),
    ("scale(X, factor=1/2)", "X"),
    ("scale(scale(X, factor=2), factor=2)", "X"),
    ("exp(scale(X, factor=2))", "scale(exp(X), factor=2)"),
]


@pytest.mark.parametrize("lhs,rhs", PROVES)
def test_proves(lhs, rhs):
    assert proves(lhs, rhs, M)


@pytest.mark.parametrize("lhs,rhs", MUST_NOT_PROVE)
def test_must_not_prove(lhs, rhs):
    assert not proves(lhs, rhs, M)


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
