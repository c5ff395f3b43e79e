"""Lemma soundness as a gate: the wrong programs of issue 11 never get a certificate, legal inputs with negative
dims or empty concatenation parts never end in an internal error, and attributes keep their exact values."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from conftest import run_cli
from graphguard.engine.fuzz import MIN_INSTANCES, _compare, fuzz_rule
from graphguard.engine.lemma import LemmaError, build_rules
from graphguard.ir.lemma import L
from graphguard.testing import proves
from graphguard.ir.builder import GraphBuilder

SM = "half_to_float=false"


# -- dims: normalised before any condition sees them ------------------------------------------------------

def test_softmax_over_column_shards_with_dim_minus_one_must_not_prove():
    shapes = {"A0": [4, 3], "A1": [4, 5]}
    assert not proves(f"aten._softmax(concat(A0, A1, dim=1), dim=-1, {SM})",
                      f"concat(aten._softmax(A0, dim=-1, {SM}), aten._softmax(A1, dim=-1, {SM}), dim=1)", shapes)
    assert not proves(f"aten._log_softmax(concat(A0, A1, dim=1), dim=-1, {SM})",
                      f"concat(aten._log_softmax(A0, dim=-1, {SM}), aten._log_softmax(A1, dim=-1, {SM}), dim=1)", shapes)


def test_softmax_over_row_shards_with_dim_minus_one_proves():
    shapes = {"R0": [2, 6], "R1": [3, 6]}
    assert proves(f"aten._softmax(concat(R0, R1, dim=0), dim=-1, {SM})",
                  f"concat(aten._softmax(R0, dim=1, {SM}), aten._softmax(R1, dim=-1, {SM}), dim=-2)", shapes)


@pytest.mark.parametrize("lhs,rhs,shapes,ok", [
    # 390 with a negative reduction dim (an internal error before)
    ("aten.sum.dim_IntList(concat(A0, A1, dim=0), dim=[-1], keepdim=false, dtype=None)",
     "concat(aten.sum.dim_IntList(A0, dim=[1], keepdim=false, dtype=None), aten.sum.dim_IntList(A1, dim=[1], keepdim=false, dtype=None), dim=0)",
     {"A0": [2, 3], "A1": [4, 3]}, True),
    ("aten.sum.dim_IntList(concat(A0, A1, dim=1), dim=[-1], keepdim=false, dtype=None)",
     "concat(aten.sum.dim_IntList(A0, dim=[1], keepdim=false, dtype=None), aten.sum.dim_IntList(A1, dim=[1], keepdim=false, dtype=None), dim=0)",
     {"A0": [2, 3], "A1": [2, 3]}, False),
    # 501/502: top-k along the last dim of row shards, dim given as -1 (the default)
    ("aten.topk#0(concat(A0, A1, dim=0), k=2)", "concat(aten.topk#0(A0, k=2), aten.topk#0(A1, k=2), dim=0)",
     {"A0": [2, 5], "A1": [3, 5]}, True),
    ("aten.topk#1(concat(A0, A1, dim=1), k=2)", "concat(aten.topk#1(A0, k=2), aten.topk#1(A1, k=2), dim=1)",
     {"A0": [2, 5], "A1": [2, 5]}, False),
])
def test_negative_dims_decide_on_normalised_dims(lhs, rhs, shapes, ok):
    assert proves(lhs, rhs, shapes) is ok


@pytest.mark.parametrize("op", ["add.Tensor", "mul.Tensor", "div.Tensor", "sub.Tensor"])
def test_empty_concat_parts_neither_crash_nor_prove_wrong_sides(op):
    # [1, 3] + [0, 3] against [1, 3] + [1, 3]: the parts do not line up although the first ones do (310-319)
    shapes = {"A": [1, 3], "B": [0, 3], "C": [1, 3], "E": [1, 3]}
    lhs = f"aten.{op}(concat(A, B, dim=0), concat(C, E, dim=0))"
    assert not proves(lhs, f"concat(aten.{op}(A, C), aten.{op}(B, E), dim=0)", shapes)


def test_mse_of_an_empty_part_is_not_a_weighted_mean():
    shapes = {"A": [2, 3], "B": [0, 3], "C": [2, 3], "E": [0, 3]}
    assert not proves("aten.mse_loss(concat(A, B, dim=0), concat(C, E, dim=0), reduction=1)",
                      "sum(aten.mul.Scalar(aten.mse_loss(A, C, reduction=1), other=1),"
                      " aten.mul.Scalar(aten.mse_loss(B, E, reduction=1), other=0))", shapes)


def test_a_lemma_with_a_literal_negative_dim_matches_normalised_terms(plugins):
    lem = L(9101, "exp-of-log-softmax", f"aten.exp(aten._log_softmax(?x, dim=-1, {SM})) => aten._softmax(?x, dim=-1, {SM})",
            "floating(dtype(?x))")
    (r,) = build_rules(lem, plugins.registry)
    assert not r.native and r.cond.op == "and"  # dim=-1 became a variable bound to rank(?x) - 1
    rep = fuzz_rule(r, plugins.registry)
    assert rep.ok, rep.why()
    from graphguard.plugins import Plugins
    pl = Plugins(plugins.registry, plugins.lemmas + [r], plugins.frontends)
    assert proves(f"aten.exp(aten._log_softmax(X, dim=1, {SM}))", f"aten._softmax(X, dim=-1, {SM})", {"X": [2, 3]},
                  plugins=pl)
    assert not proves(f"aten.exp(aten._log_softmax(X, dim=0, {SM}))", f"aten._softmax(X, dim=1, {SM})", {"X": [2, 3]},
                      plugins=pl)
    with pytest.raises(LemmaError, match="negative dim .* needs a \\?variable operand"):
        build_rules(L(9102, "bad", f"aten._softmax(concat(?a, ?b, dim=0), dim=-1, {SM}) => ?a"), plugins.registry)


# -- scalars: their dtype counts ---------------------------------------------------------------------------

@pytest.mark.parametrize("lhs", ["aten.mul.Tensor(X, aten.scalar_tensor(s=0.25, dtype=int32))",
                                 "aten.mul.Tensor(aten.scalar_tensor(s=0.25, dtype=int32), X)",
                                 "aten.div.Tensor(X, aten.scalar_tensor(s=4, dtype=bool))"])
def test_an_integer_scalar_tensor_is_not_its_value(lhs):
    assert not proves(lhs, "aten.mul.Scalar(X, other=0.25)", {"X": [4, 3]})


def test_a_float_scalar_tensor_is_its_value():
    assert proves("aten.mul.Tensor(X, aten.scalar_tensor(s=0.25, dtype=float32))", "aten.mul.Scalar(X, other=0.25)",
                  {"X": [4, 3]})
    assert proves("aten.div.Tensor(X, aten.scalar_tensor(s=4, dtype=float32))", "aten.mul.Scalar(X, other=0.25)",
                  {"X": [4, 3]})
    # ... not for an integer tensor, whose product with an integral constant stays integral
    assert not proves("aten.mul.Tensor(X, aten.scalar_tensor(s=2, dtype=float32))", "aten.mul.Scalar(X, other=2)",
                      {"X": [4, 3]}, dtypes={"X": "int64"})


def test_plus_zero_keeps_the_dtype_it_would_promote():
    assert proves("aten.add.Tensor(X, aten.scalar_tensor(s=0, dtype=int64))", "X", {"X": [3]})
    assert not proves("aten.add.Tensor(X, aten.scalar_tensor(s=0, dtype=float32))", "X", {"X": [3]},
                      dtypes={"X": "int32"})


# -- exact attributes ------------------------------------------------------------------------------------------

def test_tiny_factors_of_opposite_sign_differ():
    shapes = {"A": [4, 3]}
    assert not proves("div(A, full(shape=[4, 3], value=3.0e-10))", "div(A, full(shape=[4, 3], value=-3.0e-10))", shapes)
    assert not proves("scale(A, factor=3.0e-10)", "scale(A, factor=-3.0e-10)", shapes)
    assert proves("scale(scale(A, factor=3.0e-10), factor=2)", "scale(A, factor=6.0e-10)", shapes)


def test_float_attributes_keep_their_binary_value(plugins):
    from graphguard.engine.egraph import _decode
    from graphguard.ir.expr import attr_text
    from graphguard.ir.ops import coerce_attr
    op = plugins.registry.get("core.full")
    spec = op.attr_spec("value")
    for x in (3e-10, -3e-10, 1e-5, float(np.float32(1e-5)), 0.1, 1e30):
        v = coerce_attr(op, spec, x, "t")
        assert v == Fraction(x) and float(v) == x
        assert _decode("number", attr_text(v)) == v  # the e-graph spelling round-trips
        assert coerce_attr(op, spec, repr(x), "t") == v  # so does the text of a float (HLO, relation files)
    assert coerce_attr(op, spec, 3e-10, "t") != coerce_attr(op, spec, -3e-10, "t")
    assert coerce_attr(op, spec, float(np.float32(1e-5)), "t") != coerce_attr(op, spec, 1e-5, "t")
    assert coerce_attr(op, spec, "1/3", "t") == Fraction(1, 3)
    assert coerce_attr(op, spec, "-inf", "t") == float("-inf")


def _pair(tmp_path, spec_softmax_dim: int, shard_dim: int):
    """A softmax over a [4, 6] tensor (dim as given) and its two-rank implementation over shards of A."""
    s = GraphBuilder("spec")
    s.input("A", [4, 6])
    s.op("aten._softmax", ["A"], "Y", dim=spec_softmax_dim, half_to_float=False)
    s.output("Y")
    d = GraphBuilder("impl", world_size=2)
    part = [2, 6] if shard_dim == 0 else [4, 3]
    for r in range(2):
        d.input(f"A@{r}", part)
        d.op("aten._softmax", [f"A@{r}"], f"Y@{r}", name=f"sm{r}", dim=-1, half_to_float=False)
    d.output("Y@0", "Y@1")
    (tmp_path / "spec.gg.json").write_text(json.dumps(s.to_dict()))
    (tmp_path / "impl.gg.json").write_text(json.dumps(d.to_dict()))
    (tmp_path / "rel.yaml").write_text(f"inputs:\n  A: concat(A@0, A@1, dim={shard_dim - 2})\n")
    return [tmp_path / "spec.gg.json", tmp_path / "impl.gg.json", tmp_path / "rel.yaml"]


def test_cli_row_softmax_over_column_shards_does_not_refine(tmp_path):
    spec, impl, rel = _pair(tmp_path, -1, 1)
    p = run_cli("verify", "--spec", spec, "--impl", impl, "--relation", rel)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr


def test_cli_row_softmax_over_row_shards_refines(tmp_path):
    spec, impl, rel = _pair(tmp_path, -1, 0)
    p = run_cli("verify", "--spec", spec, "--impl", impl, "--relation", rel, "--replay")
    assert p.returncode == 0, (p.stdout, p.stderr)


def test_cli_empty_concat_part_verifies_without_internal_error(tmp_path):
    s = GraphBuilder("spec")
    s.input("A", [2, 3])
    s.input("C", [2, 3])
    s.op("aten.add.Tensor", ["A", "C"], "Y")
    s.output("Y")
    d = GraphBuilder("impl", world_size=2)
    for r, n in ((0, 2), (1, 0)):
        d.input(f"A@{r}", [n, 3])
        d.input(f"C@{r}", [n, 3])
        d.op("aten.add.Tensor", [f"A@{r}", f"C@{r}"], f"Y@{r}", name=f"add{r}")
    d.output("Y@0", "Y@1")
    (tmp_path / "s.gg.json").write_text(json.dumps(s.to_dict()))
    (tmp_path / "i.gg.json").write_text(json.dumps(d.to_dict()))
    (tmp_path / "r.yaml").write_text("inputs:\n  A: concat(A@0, A@1, dim=0)\n  C: concat(C@0, C@1, dim=0)\n")
    p = run_cli("verify", "--spec", tmp_path / "s.gg.json", "--impl", tmp_path / "i.gg.json", "--relation",
                tmp_path / "r.yaml", "--replay")
    assert p.returncode in (0, 1, 2) and "Traceback" not in p.stderr, (p.stdout, p.stderr)
    assert p.returncode == 0, (p.stdout, p.stderr)


# -- the fuzzer itself ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rule,cond", [
    # the old conditions of 370 and 390: dims compared before normalisation would let these through
    (f"aten._softmax(concat(?a, ?b, dim=?d), dim=?k, {SM}) => concat(aten._softmax(?a, dim=?k, {SM}), aten._softmax(?b, dim=?k, {SM}), dim=?d)",
     "?k == ?d"),
    # the old 316: only the first parts compared (an empty second part slips through)
    ("aten.mul.Tensor(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?k)) => concat(aten.mul.Tensor(?a, ?c), aten.mul.Tensor(?b, ?e), dim=?d)",
     "rank(?a) >= rank(?c) and ?k == bdim(?c, rank(?a), ?d) and size(?a, ?d) == size(?c, ?k)"),
    # the old 401: the scalar's dtype ignored
    ("aten.mul.Tensor(?x, aten.scalar_tensor(s=?c, dtype=?t)) => aten.mul.Scalar(?x, other=?c)", ""),
    # a factor's sign lost (exact values: 3e-10 and -3e-10 are different factors)
    ("scale(?x, factor=?f) => scale(?x, factor=0 - ?f)", "?f != 0"),
    # an integer sum is not a float one
    ("aten.sum(sum(?a, ?b), dtype=?t) => sum(aten.sum(?a, dtype=?t), aten.sum(?b, dtype=?t))", "shape(?a) == shape(?b)"),
])
def test_fuzzer_finds_the_unsound_lemmas_of_issue_11(plugins, rule, cond):
    (r, *_) = build_rules(L(9003, "unsound", rule, cond), plugins.registry)
    rep = fuzz_rule(r, plugins.registry)
    assert not rep.ok and rep.failure, rep.why()


def test_a_lemma_needs_twenty_distinct_instances(plugins):
    # only ever instantiable on one shape: not enough distinct instances, however many draws
    (r,) = build_rules(L(9004, "narrow", "relu(concat(?a, ?b, dim=?d)) => concat(relu(?a), relu(?b), dim=?d)",
                         "size(?a, 0) == 7 and size(?b, 0) == 7 and rank(?a) == 1"), plugins.registry)
    rep = fuzz_rule(r, plugins.registry, attempts=400)
    assert not rep.ok and rep.failure is None and rep.instances < MIN_INSTANCES
    assert "distinct instance" in rep.why()


def test_comparison_is_exact_for_integers_and_nan_inf_aware():
    assert _compare(np.array([1, 2]), np.array([1, 3])) is not None
    assert _compare(np.array([np.nan, 1.0]), np.array([np.nan, 1.0])) is None
    assert _compare(np.array([np.nan, 1.0]), np.array([1.0, 1.0])) is not None
    assert _compare(np.array([np.inf]), np.array([-np.inf])) is not None
    assert _compare(np.array([3e-10]), np.array([-3e-10])) is not None
    assert _compare(np.array([1.0, np.inf]), np.array([1.0 + 1e-12, np.inf])) is None


def test_an_absent_dtype_compares_equal_to_none():
    # 522/523 take integer accumulation out with "?t == None or floating(?t)": None must compare as a value
    shapes = {"A": [2, 3], "B": [2, 3]}
    assert proves("aten.sum.dim_IntList(sum(A, B), dim=[0], keepdim=false, dtype=None)",
                  "sum(aten.sum.dim_IntList(A, dim=[0], keepdim=false, dtype=None),"
                  " aten.sum.dim_IntList(B, dim=[0], keepdim=false, dtype=None))", shapes)
    assert not proves("aten.sum.dim_IntList(sum(A, B), dim=[0], keepdim=false, dtype=int32)",
                      "sum(aten.sum.dim_IntList(A, dim=[0], keepdim=false, dtype=int32),"
                      " aten.sum.dim_IntList(B, dim=[0], keepdim=false, dtype=int32))", shapes)
