"""Lemma families derived from operator properties (engine/families.py): for each family a proving case through
the verify API (a sequential graph G_s and a two-rank G_d) and cases that must not prove; every derived rule is a
normal rule that `lemmas list` shows and `lemmas check` fuzzes; a third party's op gets the families by
declaring properties (and a false declaration is caught by the fuzzer)."""
from __future__ import annotations

import re

import pytest

import graphguard
from graphguard.testing import proves
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.relation import parse_relation_text

from conftest import run_cli
from test_plugins import _gg, third_party  # noqa: F401 (a fixture)


def _verify(plugins, spec, impl, shapes, shards, rel, world=2, dtype="float32", allow_partial=False):
    """G_s: ``spec`` = [(op, inputs, output, attrs)] over ``shapes``; G_d: ``impl(r)`` the same for rank r over
    ``shards`` (tensor -> shape on a rank, named ``T@r``); the last output of each is the graph's output."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=world)
    for name, shp in shapes.items():
        s.input(name, shp, dtype)
    for op, ins, out, attrs in spec:
        s.op(op, ins, out, **attrs)
    first = lambda o: o if isinstance(o, str) else o[0]  # noqa: E731 (a multi-output op: its first output)
    s.output(first(spec[-1][2]))
    outs = []
    for r in range(world):
        for name, shp in shards.items():
            d.input(f"{name}@{r}", shp, dtype)
        for op, ins, out, attrs in impl(r):
            d.op(op, ins, out, **attrs)
        outs.append(first(impl(r)[-1][2]))
    d.output(*outs)
    relation = parse_relation_text("inputs:\n" + "".join(f"  {k}: {v}\n" for k, v in rel.items()), "relation.yaml",
                                   plugins.registry)
    cx = relation.constraints()
    return graphguard.verify(s.build(plugins.registry, cx), d.build(plugins.registry, cx), relation,
                             allow_partial=allow_partial)


def _at(r, *names):
    return [f"{n}@{r}" for n in names]


ROWS = {"X": "concat(X@0, X@1, dim=0)"}
REPL = lambda *ns: {n: f"[{n}@0, {n}@1]" for n in ns}  # noqa: E731


def _unary(op, full, shard, rel, world=2, **attrs):
    """Y = op(X) in G_s; Y@r = op(X@r) on each rank."""
    return ([(op, ["X"], "Y", attrs)], lambda r: [(op, _at(r, "X"), f"Y@{r}", attrs)], {"X": full}, {"X": shard}, rel)


# -- 1201 / 1202: elementwise ops of concats --------------------------------------------------------------

def test_elementwise_of_concats_along_broadcast_aligned_dims(plugins):
    # X [2, 4, 6] cut along dim 1 and a lower-rank Z [4, 6] cut along its dim 0: the same output dim
    spec = [("aten.add.Tensor", ["X", "Z"], "Y", {})]
    r = _verify(plugins, spec, lambda r: [("aten.add.Tensor", _at(r, "X", "Z"), f"Y@{r}", {})],
                {"X": [2, 4, 6], "Z": [4, 6]}, {"X": [2, 2, 6], "Z": [2, 6]},
                {"X": "concat(X@0, X@1, dim=1)", "Z": "concat(Z@0, Z@1, dim=0)"})
    assert r.verdict == "refines", r.failure
    # ... with the lower-rank operand first (the dims line up from the right, as NumPy broadcasts)
    spec = [("aten.mul.Tensor", ["Z", "X"], "Y", {})]
    r = _verify(plugins, spec, lambda r: [("aten.mul.Tensor", _at(r, "Z", "X"), f"Y@{r}", {})],
                {"X": [2, 4, 6], "Z": [4, 6]}, {"X": [2, 2, 6], "Z": [2, 6]},
                {"X": "concat(X@0, X@1, dim=1)", "Z": "concat(Z@0, Z@1, dim=0)"})
    assert r.verdict == "refines", r.failure


def test_elementwise_of_concats_must_not_pair_other_parts(plugins):
    # rank r holds rows r of X but rows 1 - r of Z: its difference pairs other rows
    spec = [("aten.sub.Tensor", ["X", "Z"], "Y", {})]
    r = _verify(plugins, spec, lambda r: [("aten.sub.Tensor", _at(r, "X", "Z"), f"Y@{r}", {})],
                {"X": [4, 6], "Z": [4, 6]}, {"X": [2, 6], "Z": [2, 6]},
                {"X": "concat(X@0, X@1, dim=0)", "Z": "concat(Z@1, Z@0, dim=0)"})
    assert r.verdict != "refines"
    # parts of unequal sizes do not pair up (an empty part would slip through a check of the first parts only)
    assert not proves("aten.add.Tensor(concat(P, Q, dim=0), concat(R, T, dim=0))",
                      "concat(aten.add.Tensor(P, T), aten.add.Tensor(Q, R), dim=0)",
                      {"P": [2, 3], "Q": [2, 3], "R": [2, 3], "T": [2, 3]})


def test_elementwise_of_concat_and_broadcast_operand(plugins):
    # a bias [4, 1] is constant along the column cut: every rank adds it whole
    spec = [("aten.add.Tensor", ["X", "B"], "Y", {})]
    r = _verify(plugins, spec, lambda r: [("aten.add.Tensor", _at(r, "X", "B"), f"Y@{r}", {})],
                {"X": [4, 6], "B": [4, 1]}, {"X": [4, 3], "B": [4, 1]},
                {"X": "concat(X@0, X@1, dim=1)", **REPL("B")})
    assert r.verdict == "refines", r.failure
    # vLLM's vocab mask: ge/lt on the ids, bitwise_and, masked ids (integers, bool) -- all elementwise
    spec = [("aten.ge.Scalar", ["I"], "A", {"other": 0}), ("aten.lt.Scalar", ["I"], "L", {"other": 5}),
            ("aten.bitwise_and.Tensor", ["A", "L"], "M", {}), ("aten.mul.Tensor", ["I", "M"], "Y", {})]
    impl = lambda r: [(op, [f"{i}@{r}" for i in ins], f"{o}@{r}", a) for op, ins, o, a in spec]  # noqa: E731
    r = _verify(plugins, spec, impl, {"I": [4, 3]}, {"I": [2, 3]}, {"I": "concat(I@0, I@1, dim=0)"}, dtype="int64")
    assert r.verdict == "refines", r.failure


def test_broadcast_operand_that_varies_along_the_cut_must_not_be_used_whole(plugins):
    # B [1, 6] varies along the column cut: a rank that adds the first half of B to its own columns is wrong
    spec = [("aten.add.Tensor", ["X", "B"], "Y", {})]
    impl = lambda r: [("core.slice", [f"B@{r}"], f"C@{r}", {"dim": 1, "start": 0, "end": 3}),  # noqa: E731
                      ("aten.add.Tensor", [f"X@{r}", f"C@{r}"], f"Y@{r}", {})]
    r = _verify(plugins, spec, impl, {"X": [4, 6], "B": [1, 6]}, {"X": [4, 3], "B": [1, 6]},
                {"X": "concat(X@0, X@1, dim=1)", **REPL("B")})
    assert r.verdict != "refines"
    # as one-line statements: a constant along dim 1 goes to both parts; one that varies there does not
    assert proves("aten.mul.Tensor(concat(P, Q, dim=1), B)", "concat(aten.mul.Tensor(P, B), aten.mul.Tensor(Q, B), dim=1)",
                  {"P": [4, 2], "Q": [4, 3], "B": [4, 1]})
    assert not proves("aten.mul.Tensor(concat(P, Q, dim=1), B)", "concat(aten.mul.Tensor(P, C), aten.mul.Tensor(Q, C), dim=1)",
                      {"P": [4, 2], "Q": [4, 2], "B": [1, 4], "C": [1, 2]})


def test_elementwise_of_concat_and_a_fill_as_long_as_it(plugins):
    """Family 1219: the zeros a backward writes a sharded gradient beside (``where(arange == e, grad, zeros)``) are
    cut where the concatenation is; a fill of another value, or one split where the parts are not, must not."""
    shapes = {"P": [3, 2, 8], "Q": [3, 4, 8], "C": [3, 1, 1]}
    z = lambda n, v=0: f"aten.full(size=[3, {n}, 8], fill_value={v}, dtype=float32)"  # noqa: E731
    lhs = f"aten.where.self(C, concat(P, Q, dim=1), {z(6)})"
    assert proves(lhs, f"concat(aten.where.self(C, P, {z(2)}), aten.where.self(C, Q, {z(4)}), dim=1)", shapes,
                  dtypes={"C": "bool"})
    assert not proves(lhs, f"concat(aten.where.self(C, P, {z(2)}), aten.where.self(C, Q, {z(4, 1)}), dim=1)", shapes,
                      dtypes={"C": "bool"})
    assert proves(f"aten.add.Tensor({z(6, 2)}, concat(P, Q, dim=1), alpha=1)",
                  f"concat(aten.add.Tensor({z(2, 2)}, P, alpha=1), aten.add.Tensor({z(4, 2)}, Q, alpha=1), dim=1)",
                  shapes)
    # the parts stay in their places
    assert not proves(f"aten.add.Tensor({z(4, 2)}, concat(P, T, dim=1), alpha=1)",
                      f"concat(aten.add.Tensor({z(2, 2)}, T, alpha=1), aten.add.Tensor({z(2, 2)}, P, alpha=1), dim=1)",
                      {"P": [3, 2, 8], "T": [3, 2, 8]})


def test_the_fill_of_family_1219_is_the_dialects_own(plugins):
    """Family 1219 cuts a dialect's own fill, found in the registry (the op without inputs that declares
    ``fill`` and one shape attribute), not one named in the engine: ONNX's ``ConstantFill`` as ATen's ``full``;
    HLO's ``constant`` is one too, but HLO's ops do not broadcast, so the family derives nothing for them."""
    from graphguard.engine.families import _fill_of
    reg = plugins.registry
    assert _fill_of("aten", reg) == "aten.full(size={s}, fill_value=?v, dtype=?t)"
    assert _fill_of("onnx", reg) == "onnx.ConstantFill(shape={s}, value=?v, dtype=?t)"
    assert _fill_of("hlo", reg) == "hlo.constant(shape={s}, value=?v, dtype=?t)"
    packs = {r.lemma.pack for r in plugins.lemmas if r.lemma.ref == 1219}
    assert {"aten", "onnx-ops"} <= packs and "hlo-ops" not in packs
    shapes = {"P": [3, 2, 8], "Q": [3, 4, 8]}
    z = lambda n, v=0: f"onnx.ConstantFill(shape=[3, {n}, 8], value={v}, dtype=float32)"  # noqa: E731
    assert proves(f"onnx.Add(concat(P, Q, dim=1), {z(6)})",
                  f"concat(onnx.Add(P, {z(2)}), onnx.Add(Q, {z(4)}), dim=1)", shapes)
    assert not proves(f"onnx.Add(concat(P, Q, dim=1), {z(6)})",
                      f"concat(onnx.Add(P, {z(2)}), onnx.Add(Q, {z(4, 1)}), dim=1)", shapes)


@pytest.mark.parametrize("op,dtype", [("aten.abs", "bfloat16"), ("aten.abs", "int32"), ("aten.sigmoid", "float16"),
                                      ("aten.logical_not", "bool"), ("aten.bitwise_not", "int64")])
def test_unary_elementwise_of_concat_in_any_dtype(plugins, op, dtype):
    r = _verify(plugins, *_unary(op, [4, 3], [2, 3], ROWS), dtype=dtype)
    assert r.verdict == "refines", r.failure


def test_a_non_elementwise_op_must_not_distribute(plugins):
    # a cumulative sum along the cut dim needs the first part's total in the second
    r = _verify(plugins, *_unary("aten.cumsum", [4, 3], [2, 3], ROWS, dim=0))
    assert r.verdict != "refines"
    r = _verify(plugins, *_unary("aten.cumsum", [4, 3], [2, 3], ROWS, dim=1))  # along the other dim: row-wise
    assert r.verdict == "refines", r.failure


# -- 1203 / 1204: partial sums and scalar factors through linear ops --------------------------------------

def _mm_then(plugins, after: list):
    """G_s: Y = after(X @ W); G_d: X column-cut, W row-cut, ``after`` applied to each rank's partial product,
    then an all-reduce."""
    spec = [("aten.mm", ["X", "W"], "P", {})] + [(op, [i], o, a) for op, i, o, a in after]
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [4, 6]); s.input("W", [6, 5])
    for op, ins, out, attrs in spec:
        s.op(op, ins, out, **attrs)
    s.output(spec[-1][2])
    last = []
    for r in range(2):
        d.input(f"X@{r}", [4, 3]); d.input(f"W@{r}", [3, 5])
        d.op("aten.mm", [f"X@{r}", f"W@{r}"], f"P@{r}")
        for op, i, o, a in after:
            d.op(op, [f"{i}@{r}"], f"{o}@{r}", **a)
        last.append(f"{spec[-1][2]}@{r}")
    d.op("core.all_reduce", last, [f"S@{r}" for r in range(2)], op="sum", group=[0, 1])
    d.output(*[f"S@{r}" for r in range(2)])
    relation = parse_relation_text("inputs:\n  X: concat(X@0, X@1, dim=1)\n  W: concat(W@0, W@1, dim=0)\n",
                                   "relation.yaml", plugins.registry)
    cx = relation.constraints()
    return graphguard.verify(s.build(plugins.registry, cx), d.build(plugins.registry, cx), relation)


def test_linear_ops_of_partial_sums(plugins):
    # neg, a sum over rows and a scaled copy of each rank's partial product, all-reduced afterwards
    for after in ([("aten.neg", "P", "Y", {})],
                  [("aten.sum.dim_IntList", "P", "Y", {"dim": [0], "keepdim": True})],
                  [("aten.div.Scalar", "P", "Y", {"other": 4})],
                  [("aten.flip", "P", "Y", {"dims": [1]})]):
        r = _mm_then(plugins, after)
        assert r.verdict == "refines", (after, r.failure)


@pytest.mark.parametrize("after", [[("aten.relu", "P", "Y", {})], [("aten.exp", "P", "Y", {})],
                                   [("aten.add.Scalar", "P", "Y", {"other": 1})],
                                   [("aten.amax", "P", "Y", {"dim": [0], "keepdim": True})]])
def test_non_linear_ops_of_partial_sums_must_not_prove(plugins, after):
    # relu(p0) + relu(p1) is not relu(p0 + p1); a constant added on every rank is added twice
    assert _mm_then(plugins, after).verdict != "refines"


def test_scatter_add_is_linear_in_self_and_src_jointly_and_not_in_src_alone():
    """aten.scatter_add / aten.index_add declare linear=((0, 2),) (relayout.Sums relies on it): family 1203
    splits self and src together; a src added to both halves of self is added twice."""
    shapes = {"A": [4, 3], "B": [4, 3], "C": [2, 3], "D": [2, 3], "I": [2, 3]}
    dt = {"I": "int64"}
    lhs = "aten.scatter_add(sum(A, B), I, sum(C, D), dim=0)"
    assert proves(lhs, "sum(aten.scatter_add(A, I, C, dim=0), aten.scatter_add(B, I, D, dim=0))", shapes, dtypes=dt)
    assert not proves("aten.scatter_add(sum(A, B), I, C, dim=0)",
                      "sum(aten.scatter_add(A, I, C, dim=0), aten.scatter_add(B, I, C, dim=0))", shapes, dtypes=dt)
    ishapes = {"A": [4, 3], "B": [4, 3], "C": [2, 3], "D": [2, 3], "I": [2]}
    assert proves("aten.index_add(sum(A, B), I, sum(C, D), dim=0, alpha=1)",
                  "sum(aten.index_add(A, I, C, dim=0, alpha=1), aten.index_add(B, I, D, dim=0, alpha=1))",
                  ishapes, dtypes=dt)
    assert not proves("aten.index_add(sum(A, B), I, C, dim=0, alpha=1)",
                      "sum(aten.index_add(A, I, C, dim=0, alpha=1), aten.index_add(B, I, C, dim=0, alpha=1))",
                      ishapes, dtypes=dt)


def test_scalar_factors_through_linear_ops_and_not_others():
    shapes = {"X": [4, 3], "W": [3, 2]}
    assert proves("aten.mm(scale(X, factor=3), W)", "scale(aten.mm(X, W), factor=3)", shapes)
    assert proves("aten.flip(scale(X, factor=1/2), dims=[0])", "scale(aten.flip(X, dims=[0]), factor=1/2)", shapes)
    assert proves("aten.sum.dim_IntList(scale(X, factor=1/2), dim=[1])",
                  "scale(aten.sum.dim_IntList(X, dim=[1]), factor=1/2)", shapes)
    # non-linear ops keep their factor (relu(-x) is not -relu(x); exp(2x) is not 2 exp(x))
    assert not proves("aten.relu(scale(X, factor=-1))", "scale(aten.relu(X), factor=-1)", shapes)
    assert not proves("aten.exp(scale(X, factor=2))", "scale(aten.exp(X), factor=2)", shapes)
    assert not proves("aten.amax(scale(X, factor=-1), dim=[0])", "scale(aten.amax(X, dim=[0]), factor=-1)", shapes)
    # an integer cast is not linear
    assert not proves("aten._to_copy(scale(X, factor=1/2), dtype=int32)", "scale(aten._to_copy(X, dtype=int32), factor=1/2)",
                      shapes)


# -- scalar forms (graphguard/passes): x * c, x / c for a constant c are mul.Scalar before proving ------------

def _factor_around_all_reduce(plugins, put, take, left=False, take_op="aten.div.Tensor", dtype="float32"):
    """G_s: Y = gelu(X @ W). G_d: each rank's partial product times the constant ``put`` (a ``scalar_tensor``;
    on the left with ``left``), all-reduced, then ``take_op`` by the constant ``take`` (the factor taken back),
    then gelu: ``gelu(all_reduce(put x) / take)``."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [4, 6]); s.input("W", [6, 5])
    s.op("aten.mm", ["X", "W"], "P")
    s.op("aten.gelu", ["P"], "Y")
    s.output("Y")
    for r in range(2):
        d.input(f"X@{r}", [4, 3]); d.input(f"W@{r}", [3, 5])
        d.op("aten.mm", [f"X@{r}", f"W@{r}"], f"P@{r}")
        d.op("aten.scalar_tensor", [], f"C@{r}", s=put, dtype=dtype)
        d.op("aten.mul.Tensor", [f"C@{r}", f"P@{r}"] if left else [f"P@{r}", f"C@{r}"], f"M@{r}")
    d.op("core.all_reduce", ["M@0", "M@1"], ["S@0", "S@1"], op="sum", group=[0, 1])
    for r in range(2):
        d.op("aten.scalar_tensor", [], f"K@{r}", s=take, dtype=dtype)
        d.op(take_op, [f"S@{r}", f"K@{r}"], f"D@{r}")
        d.op("aten.gelu", [f"D@{r}"], f"Y@{r}")
    d.output("Y@0", "Y@1")
    relation = parse_relation_text("inputs:\n  X: concat(X@0, X@1, dim=1)\n  W: concat(W@0, W@1, dim=0)\n",
                                   "relation.yaml", plugins.registry)
    cx = relation.constraints()
    return graphguard.verify(s.build(plugins.registry, cx), d.build(plugins.registry, cx), relation)


@pytest.mark.parametrize("put,take,left,take_op", [
    ("2", "2", False, "aten.div.Tensor"),     # all_reduce(2 x) / 2
    ("2", "2", True, "aten.div.Tensor"),      # all_reduce(2 * x) / 2, the constant first
    ("4", "1/4", False, "aten.mul.Tensor"),   # all_reduce(4 x) * 1/4
    ("1/8", "8", False, "aten.mul.Tensor"),   # all_reduce(x / 8) * 8
])
def test_a_factor_taken_back_after_the_collective(plugins, put, take, left, take_op):
    r = _factor_around_all_reduce(plugins, put, take, left, take_op)
    assert r.verdict == "refines", r.failure
    assert r.r_o_lines() == ["Y = Y@0", "Y = Y@1"]


@pytest.mark.parametrize("put,take,take_op", [
    ("2", "3", "aten.div.Tensor"),    # all_reduce(2 x) / 3
    ("2", "1", "aten.div.Tensor"),    # the factor never taken back
    ("2", "2", "aten.mul.Tensor"),    # multiplied again: 4 x
    ("-2", "2", "aten.div.Tensor"),   # the sign flipped
    ("2", "-2", "aten.div.Tensor"),
    ("1/2", "1/2", "aten.mul.Tensor"),  # x / 4
])
def test_a_factor_not_taken_back_must_not_prove(plugins, put, take, take_op):
    r = _factor_around_all_reduce(plugins, put, take, False, take_op)
    assert r.verdict == "does-not-refine", r.r_o_lines()


def test_factors_fold_and_commute_with_a_max():
    s = {"X": [4, 3], "Y": [4, 3]}
    # 554: a number folds into the scale around it; 555 / 145: a positive factor moves out of a max
    assert proves("scale(aten.mul.Scalar(X, other=2), factor=1/2)", "X", s)
    assert proves("max(aten.mul.Scalar(X, other=2), aten.mul.Scalar(Y, other=2))", "aten.mul.Scalar(max(X, Y), other=2)", s)
    assert proves("max(scale(X, factor=1/2), scale(Y, factor=1/2))", "scale(max(X, Y), factor=1/2)", s)
    assert not proves("scale(aten.mul.Scalar(X, other=2), factor=1/3)", "X", s)
    # max(-x, -y) is -min(x, y); unequal factors do not move out
    assert not proves("max(aten.mul.Scalar(X, other=-2), aten.mul.Scalar(Y, other=-2))",
                      "aten.mul.Scalar(max(X, Y), other=-2)", s)
    assert not proves("max(scale(X, factor=-1/2), scale(Y, factor=-1/2))", "scale(max(X, Y), factor=-1/2)", s)
    assert not proves("max(aten.mul.Scalar(X, other=2), aten.mul.Scalar(Y, other=3))", "aten.mul.Scalar(max(X, Y), other=2)", s)


@pytest.mark.parametrize("div,ok", [("2", True), ("3", False), ("4", False), ("-2", False)])
def test_a_share_of_a_scaled_tensor(plugins, div, ok):
    """G_s Y = X / 32; each rank holds X / div / 32 of a replicated X (a loss's gradient divided by the world
    size, then scaled): with div = 2 (the world size) Y is the sum of the two ranks' shares -- scale(X, 1/64) is
    a share of scale(X, 1/32) (egraph.Snapshot reads shares off the scales of one tensor)."""
    spec = [("aten.mul.Scalar", ["X"], "Y", {"other": "1/32"})]

    def impl(r):
        return [("aten.div.Scalar", [f"X@{r}"], f"D@{r}", {"other": div}),
                ("aten.mul.Scalar", [f"D@{r}"], f"Y@{r}", {"other": "1/32"})]
    res = _verify(plugins, spec, impl, {"X": [4, 3]}, {"X": [4, 3]}, {"X": "[X@0, X@1]"}, allow_partial=True)
    assert res.verdict == ("refines" if ok else "does-not-refine"), res.render()
    if ok:
        assert res.r_o_lines() == ["Y = sum(Y@0, Y@1)"]


@pytest.mark.parametrize("div1,ok", [(12, True), (6, False)])
def test_every_copy_of_a_replicated_input_reaches_a_deferred_operators_readers(plugins, div1, ok):
    """G_s: W = A * (expand(T) / 12), the mean's backward; the ranks divide first, expand(T / 12), so G_s's
    expand(T) has no G_d tensor and is deferred to its reader as a term over one copy of T. Its reader must still
    find every rank's copy (T@0, T@1 are aliases): rank 1 multiplies its columns of A by its own E@1."""
    spec = [("aten.expand", ["T"], "Y", {"size": [4], "implicit": False}), ("aten.div.Scalar", ["Y"], "Z", {"other": 12}),
            ("reshape", ["Z"], "U", {"shape": [4, 1]}), ("aten.mul.Tensor", ["A", "U"], "W", {})]

    def impl(r):
        return [("aten.div.Scalar", [f"T@{r}"], f"D@{r}", {"other": 12 if r == 0 else div1}),
                ("aten.expand", [f"D@{r}"], f"E@{r}", {"size": [4], "implicit": False}),
                ("reshape", [f"E@{r}"], f"U@{r}", {"shape": [4, 1]}), ("aten.mul.Tensor", [f"A@{r}", f"U@{r}"], f"W@{r}", {})]
    res = _verify(plugins, spec, impl, {"T": [], "A": [4, 6]}, {"T": [], "A": [4, 3]},
                  {"T": "[T@0, T@1]", "A": "concat(A@0, A@1, dim=1)"})
    assert res.verdict == ("refines" if ok else "does-not-refine"), res.render()
    if ok:
        assert res.r_o_lines() == ["W = concat(W@0, W@1, dim=1)"]


def test_scalar_forms_need_a_constant_that_holds_the_factor(plugins):
    """Only a constant that holds its number exactly becomes a scalar form: an integer constant of 1/2 holds 0
    (and 0 * x is no factor to take back); a float16 constant of 2049 holds 2048."""
    from graphguard.ir.values import holds
    from fractions import Fraction
    assert holds("float32", Fraction(1, 4)) and holds("int64", Fraction(3)) and holds(None, Fraction(2))
    assert not holds("int64", Fraction(1, 2)) and not holds("float16", Fraction(2049))
    assert not holds("float32", Fraction(1, 3)) and not holds("bool", Fraction(1))
    r = _factor_around_all_reduce(plugins, "2", "2", dtype="float16")
    assert r.verdict == "refines", r.failure


def test_scalar_form_declarations_are_fuzzed(plugins):
    """Every declared scalar form passes the fuzzer; a false one (x - c as x * c, c / x as x / c, x / c as
    x * c) is caught on a counterexample."""
    import dataclasses

    from graphguard.engine.fuzz import check_scalar_form
    reg = plugins.registry
    declared = [op for op in reg if op.scalar_form]
    assert {"aten.mul.Tensor", "aten.div.Tensor"} <= {o.name for o in declared}
    for op in declared:
        assert all(why is None and n >= 20 for _, n, why in check_scalar_form(op, reg)), op.name
    for name, wrong in (("aten.sub.Tensor", ((1, "aten.mul.Scalar", "other", 1),)),
                        ("aten.div.Tensor", ((0, "aten.mul.Scalar", "other", -1),)),
                        ("aten.div.Tensor", ((1, "aten.mul.Scalar", "other", 1),))):
        op = dataclasses.replace(reg.get(name), scalar_form=wrong)
        assert check_scalar_form(op, reg)[0][2], (name, wrong)


# -- 1205 / 1206: reductions of concats --------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs", [("aten.sum.dim_IntList", {"dim": [1]}), ("aten.amax", {"dim": [1]}),
                                      ("aten.amin", {"dim": [1], "keepdim": True}),
                                      ("aten.var.correction", {"dim": [1], "correction": 0}),
                                      ("aten.linalg_vector_norm", {"dim": [1]}), ("aten.mean.dim", {"dim": [1]}),
                                      ("aten.argmax", {"dim": 1})])
def test_reduction_over_another_dim_is_a_concat(plugins, op, attrs):
    r = _verify(plugins, *_unary(op, [4, 3], [2, 3], ROWS, **attrs))
    assert r.verdict == "refines", r.failure


@pytest.mark.parametrize("op,attrs", [("aten.sum.dim_IntList", {"dim": [0]}), ("aten.var.correction", {"dim": [0]}),
                                      ("aten.linalg_vector_norm", {"dim": [0]}), ("aten.mean.dim", {"dim": None}),
                                      ("aten.sum.dim_IntList", {"dim": []}), ("aten.amax", {"dim": []})])
def test_reduction_over_the_cut_dim_must_not_become_a_concat(plugins, op, attrs):
    # (dim=[] means every dim, the cut one too)
    r = _verify(plugins, *_unary(op, [4, 3], [2, 3], ROWS, keepdim=True, **attrs))
    assert r.verdict != "refines"


@pytest.mark.parametrize("op,coll,ok", [("aten.sum.dim_IntList", "sum", True), ("aten.amax", "max", True),
                                        ("aten.amax", "sum", False), ("aten.sum.dim_IntList", "max", False)])
def test_reduction_over_the_cut_dim_combines_with_its_collective(plugins, op, coll, ok):
    spec = [(op, ["X"], "Y", {"dim": [0], "keepdim": True})]

    def impl(r):
        return [(op, [f"X@{r}"], f"P@{r}", {"dim": [0], "keepdim": True})]
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [4, 3])
    s.op(*spec[0][:3], **spec[0][3])
    s.output("Y")
    for r in range(2):
        d.input(f"X@{r}", [2, 3])
        d.op(op, [f"X@{r}"], f"P@{r}", dim=[0], keepdim=True)
    d.op("core.all_reduce", ["P@0", "P@1"], ["Y@0", "Y@1"], op=coll, group=[0, 1])
    d.output("Y@0", "Y@1")
    rel = parse_relation_text("inputs:\n  X: concat(X@0, X@1, dim=0)\n", "relation.yaml", plugins.registry)
    cx = rel.constraints()
    r = graphguard.verify(s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel)
    assert (r.verdict == "refines") == ok, r.failure


# -- 1207: row-wise ops ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs", [("aten._softmax", {"dim": 1, "half_to_float": False}),
                                      ("aten._log_softmax", {"dim": 1, "half_to_float": False}),
                                      ("aten.flip", {"dims": [1]}), ("aten.roll", {"shifts": [1], "dims": [1]}),
                                      ("aten.topk#0", {"k": 2, "dim": 1})])
def test_rowwise_op_of_a_concat_along_another_dim(plugins, op, attrs):
    if op == "aten.topk#0":
        spec = [("aten.topk", ["X"], ["Y", "I"], attrs)]
        impl = lambda r: [("aten.topk", [f"X@{r}"], [f"Y@{r}", f"I@{r}"], attrs)]  # noqa: E731
        r = _verify(plugins, spec, impl, {"X": [4, 3]}, {"X": [2, 3]}, ROWS)
    else:
        r = _verify(plugins, *_unary(op, [4, 3], [2, 3], ROWS, **attrs))
    assert r.verdict == "refines", r.failure


@pytest.mark.parametrize("op,attrs", [("aten._softmax", {"dim": 0, "half_to_float": False}),
                                      ("aten.cumsum", {"dim": 0, "dtype": None})])
def test_rowwise_op_along_the_cut_dim_must_not_prove(plugins, op, attrs):
    assert _verify(plugins, *_unary(op, [4, 3], [2, 3], ROWS, **attrs)).verdict != "refines"


def test_roll_along_the_cut_dim_is_the_ranks_rows_in_another_order(plugins):
    """Each rank rolling its own rows keeps every entry: G_s's roll is those rows rearranged (data movement
    of the ranks' outputs, found on labelled entries), a refinement."""
    r = _verify(plugins, *_unary("aten.roll", [4, 3], [2, 3], ROWS, shifts=[1], dims=[0]))
    assert r.verdict == "refines", r.failure
    assert r.r_o_lines() == ["Y = concat(slice(Y@1, dim=0, start=0, end=1), slice(Y@0, dim=0, start=1, end=2), "
                             "slice(Y@0, dim=0, start=0, end=1), slice(Y@1, dim=0, start=1, end=2), dim=0)"]


def test_flip_along_the_cut_dim_reverses_the_parts(plugins):
    spec = [("aten.flip", ["X"], "Y", {"dims": [0]})]
    impl = lambda r: [("aten.flip", [f"X@{r}"], f"Y@{r}", {"dims": [0]})]  # noqa: E731
    r = _verify(plugins, spec, impl, {"X": [4, 3]}, {"X": [2, 3]}, {"X": "concat(X@1, X@0, dim=0)"})
    assert r.verdict == "refines", r.failure  # rank 1 holds the first rows: its flip is the flip's second half
    assert r.r_o["Y"][0].args[0].name == "Y@0"
    # not the parts in their own order
    assert not proves("aten.flip(concat(P, Q, dim=0), dims=[0])",
                      "concat(aten.flip(P, dims=[0]), aten.flip(Q, dims=[0]), dim=0)", {"P": [2, 3], "Q": [2, 3]})


def test_layer_norm_of_rows(plugins):
    attrs = {"normalized_shape": [6], "eps": 1e-5}
    spec = [("aten.native_layer_norm", ["X", "G", "B"], ["Y", "M", "R"], attrs)]
    impl = lambda r: [("aten.native_layer_norm", _at(r, "X", "G", "B"), _at(r, "Y", "M", "R"), attrs)]  # noqa: E731
    r = _verify(plugins, spec, impl, {"X": [4, 6], "G": [6], "B": [6]}, {"X": [2, 6], "G": [6], "B": [6]},
                {**ROWS, **REPL("G", "B")})
    assert r.verdict == "refines", r.failure
    # over a cut of the normalised dim: each rank normalises half a row
    r = _verify(plugins, spec, lambda r: [("aten.native_layer_norm", _at(r, "X", "G", "B"), _at(r, "Y", "M", "R"),
                                           {"normalized_shape": [3], "eps": 1e-5})],
                {"X": [4, 6], "G": [6], "B": [6]}, {"X": [4, 3], "G": [3], "B": [3]},
                {"X": "concat(X@0, X@1, dim=1)", "G": "concat(G@0, G@1, dim=0)", "B": "concat(B@0, B@1, dim=0)"})
    assert r.verdict != "refines"


# -- 1208 / 1209: commutation and regrouping where the other form exists ----------------------------------

def test_commuted_bias_add(plugins):
    spec = [("aten.add.Tensor", ["X", "B"], "Y", {})]
    r = _verify(plugins, spec, lambda r: [("aten.add.Tensor", _at(r, "B", "X"), f"Y@{r}", {})],
                {"X": [4, 6], "B": [6]}, {"X": [2, 6], "B": [6]}, {**ROWS, **REPL("B")})
    assert r.verdict == "refines", r.failure
    # a - b is not b - a; alpha * other does not commute either
    spec = [("aten.sub.Tensor", ["X", "B"], "Y", {})]
    r = _verify(plugins, spec, lambda r: [("aten.sub.Tensor", _at(r, "B", "X"), f"Y@{r}", {})],
                {"X": [4, 6], "B": [6]}, {"X": [2, 6], "B": [6]}, {**ROWS, **REPL("B")})
    assert r.verdict != "refines"
    assert not proves("aten.add.Tensor(X, Y, alpha=2)", "aten.add.Tensor(Y, X, alpha=2)", {"X": [3], "Y": [3]})
    assert proves("aten.add.Tensor(X, Y)", "aten.add.Tensor(Y, X)", {"X": [3], "Y": [3]})


def test_regrouping_where_grouped():
    s = {"A": [3], "B": [3], "C": [3]}
    assert proves("aten.mul.Tensor(aten.mul.Tensor(A, B), C)", "aten.mul.Tensor(A, aten.mul.Tensor(B, C))", s)
    assert proves("aten.maximum(A, aten.maximum(B, C))", "aten.maximum(aten.maximum(A, B), C)", s)
    assert not proves("aten.sub.Tensor(aten.sub.Tensor(A, B), C)", "aten.sub.Tensor(A, aten.sub.Tensor(B, C))", s)
    assert not proves("aten.div.Tensor(aten.div.Tensor(A, B), C)", "aten.div.Tensor(A, aten.div.Tensor(B, C))", s)


# -- 1213: elementwise ops of reshaped inputs ---------------------------------------------------------------

def test_elementwise_of_reshapes():
    """where(mask.unsqueeze(-1), ids.unsqueeze(-1), 0) (a specification's nll_loss targets) is the rank's
    where(mask, ids, 0) unsqueezed (the right side holds it: the lemmas apply where it exists; late lemmas, as
    1211/1212); another reshape of the result, or inputs of other shapes, must not."""
    assert not proves("aten.mul.Tensor(reshape(A, shape=[6]), reshape(A, shape=[6]))",
                      "reshape(aten.mul.Tensor(A, A), shape=[6])", {"A": [2, 3]})  # (not in the first search)
    s = {"M": [6], "I": [6], "A": [2, 3], "B": [3, 2]}
    d = {"M": "bool", "I": "int64"}
    zero = "aten.scalar_tensor(s=0, dtype=int64)"
    whole = f"aten.where.self(M, I, {zero})"
    lhs = f"aten.where.self(reshape(M, shape=[6, 1]), reshape(I, shape=[6, 1]), {zero})"
    assert proves(lhs, f"reshape({whole}, shape=[6, 1])", s, dtypes=d, late=True)
    assert not proves(f"reshape({lhs}, shape=[6])", f"aten.flip(reshape({whole}, shape=[6, 1]), dims=[0])", s,
                      dtypes=d, late=True)
    assert proves("aten.mul.Tensor(reshape(A, shape=[6]), reshape(A, shape=[6]))",
                  "reshape(aten.mul.Tensor(A, A), shape=[6])", s, late=True)
    # [2, 3] and [3, 2] both read as [6], but B's entries are not A's
    assert not proves("aten.mul.Tensor(reshape(A, shape=[6]), reshape(B, shape=[6]))",
                      "reshape(aten.mul.Tensor(A, A), shape=[6])", s, late=True)
    assert not proves("aten.mul.Tensor(reshape(A, shape=[6]), reshape(A, shape=[6]))",
                      "reshape(aten.mul.Tensor(A, A), shape=[3, 2])", s, late=True)


# -- 1214: a reduction over the last dim of rows in another layout ----------------------------------------------

def _layout(x, shape):
    return f"reshape(permute(reshape({x}, shape=[2, 2, 2, {shape}]), dims=[0, 2, 1, 3]), shape=[8, {shape}])"


def test_reduction_over_the_last_dim_of_a_layout():
    """Megatron's probabilities' gradient at TP x EP: the rows of X re-sorted (reshape, permute, reshape keeping
    the last dim) then summed over the last dim are X's row sums re-sorted the same way; summing over a dim the
    layout moves, or re-sorting the sums otherwise, must not prove."""
    s = {"X": [8, 5]}
    lhs = f"aten.sum.dim_IntList({_layout('X', 5)}, dim=[1], keepdim=true, dtype=None)"
    rhs = _layout("aten.sum.dim_IntList(X, dim=[1], keepdim=true, dtype=None)", 1)
    assert not proves(lhs, rhs, s)  # (late)
    assert proves(lhs, rhs, s, late=True)
    assert proves(f"aten.amax({_layout('X', 5)}, dim=[1], keepdim=false)",
                  "reshape(permute(reshape(aten.amax(X, dim=[1], keepdim=false), shape=[2, 2, 2]), dims=[0, 2, 1]),"
                  " shape=[8])",
                  s, late=True)
    other = "reshape(permute(reshape({x}, shape=[2, 2, 2, 1]), dims=[1, 0, 2, 3]), shape=[8, 1])"
    assert not proves(lhs, other.format(x="aten.sum.dim_IntList(X, dim=[1], keepdim=true, dtype=None)"), s, late=True)
    assert not proves("aten.sum.dim_IntList(permute(reshape(X, shape=[2, 4, 5]), dims=[0, 2, 1]), dim=[2], "
                      "keepdim=true, dtype=None)",
                      "permute(aten.sum.dim_IntList(reshape(X, shape=[2, 4, 5]), dim=[2], keepdim=true, dtype=None), "
                      "dims=[0, 2, 1])", s, late=True)


# -- 1215 / 1216: broadcast views (the broadcast_to property: aten.expand, onnx.Expand) -------------------------

@pytest.mark.parametrize("op,size,extra", [("aten.expand", "size", ", implicit=false"), ("onnx.Expand", "shape", "")])
def test_broadcast_of_concat_and_at_a_narrower_copy(op, size, extra):
    """Grouped-query attention's KV heads repeated for their query heads: the broadcast of two ranks' heads is
    their broadcasts concatenated; a wider broadcast splits where a narrower copy exists (ranks holding some of a
    head's repeats). Swapped parts, a copy of another tensor, or too few repeats must not prove."""
    b = lambda x, s: f"{op}({x}, {size}={s}{extra})"  # noqa: E731
    s = {"A": [2, 1, 3], "B": [1, 1, 3], "X": [2, 1, 3]}
    assert proves(b("concat(A, B, dim=0)", "[3, 4, 3]"), f"concat({b('A', '[2, 4, 3]')}, {b('B', '[1, 4, 3]')}, dim=0)", s)
    assert proves(b("concat(A, B, dim=0)", "[5, 3, 4, 3]"),
                  f"concat({b('A', '[5, 2, 4, 3]')}, {b('B', '[5, 1, 4, 3]')}, dim=1)", s)
    assert not proves(b("concat(A, B, dim=0)", "[3, 4, 3]"),
                      f"concat({b('B', '[1, 4, 3]')}, {b('A', '[2, 4, 3]')}, dim=0)", s)
    assert proves(b("X", "[2, 4, 3]"), f"concat({b('X', '[2, 1, 3]')}, {b('X', '[2, 3, 3]')}, dim=1)", s)
    assert proves(b("X", "[2, 4, 3]"), f"concat({b('X', '[2, 2, 3]')}, {b('X', '[2, 2, 3]')}, dim=1)", s)
    assert not proves(b("X", "[2, 4, 3]"), f"concat({b('X', '[2, 1, 3]')}, {b('Y', '[2, 3, 3]')}, dim=1)",
                      {"X": [2, 1, 3], "Y": [2, 1, 3]})  # (a copy of another tensor)
    assert not proves(b("X", "[2, 4, 3]"), f"concat({b('X', '[2, 1, 3]')}, {b('X', '[2, 2, 3]')}, dim=1)", s)


# -- 1211 / 1212 and 223 / 224: slices of rows (several ranks' rows interleaved) ----------------------------

def test_elementwise_and_rowwise_ops_of_slices():
    s = {"A": [4, 3], "B": [4, 3]}
    assert not proves("aten.neg(slice(A, dim=1, start=0, end=2))", "slice(aten.neg(A), dim=1, start=0, end=2)", s)  # late
    assert proves("aten.mul.Tensor(slice(A, dim=0, start=1, end=3), slice(B, dim=0, start=1, end=3))",
                  "slice(aten.mul.Tensor(A, B), dim=0, start=1, end=3)", s, late=True)
    assert proves("aten.neg(slice(A, dim=1, start=0, end=2))", "slice(aten.neg(A), dim=1, start=0, end=2)", s, late=True)
    assert proves("aten._softmax(slice(A, dim=0, start=2, end=4), dim=1, half_to_float=false)",
                  "slice(aten._softmax(A, dim=1, half_to_float=false), dim=0, start=2, end=4)", s, late=True)
    assert proves("aten._softmax(slice(A, dim=0, start=2, end=4), dim=-1, half_to_float=false)",
                  "slice(aten._softmax(A, dim=-1, half_to_float=false), dim=0, start=2, end=4)", s, late=True)
    # other rows of the two inputs; a slice along the softmax's own dim (its rows are cut)
    assert not proves("aten.mul.Tensor(slice(A, dim=0, start=1, end=3), slice(B, dim=0, start=0, end=2))",
                      "slice(aten.mul.Tensor(A, B), dim=0, start=1, end=3)", s, late=True)
    assert not proves("aten._softmax(slice(A, dim=1, start=0, end=2), dim=1, half_to_float=false)",
                      "slice(aten._softmax(A, dim=1, half_to_float=false), dim=1, start=0, end=2)", s, late=True)
    assert not proves("aten._softmax(slice(A, dim=1, start=0, end=2), dim=-1, half_to_float=false)",
                      "slice(aten._softmax(A, dim=-1, half_to_float=false), dim=1, start=0, end=2)", s, late=True)



def test_gather_of_row_slices_with_its_index_sliced_alike():
    """Family 1212 for ``gather`` (row-wise with an index input): the same rows of the data and of the index
    are those rows of the whole gather (a router's backward over a rank's tokens); other rows of the index,
    or a slice along the gathered dim, must not."""
    s, dt = {"X": [4, 3], "I": [4, 2]}, {"I": "int64"}
    g = "aten.gather(X, I, dim=1)"
    assert proves("aten.gather(slice(X, dim=0, start=1, end=3), slice(I, dim=0, start=1, end=3), dim=1)",
                  f"slice({g}, dim=0, start=1, end=3)", s, dtypes=dt, late=True)
    assert not proves("aten.gather(slice(X, dim=0, start=1, end=3), slice(I, dim=0, start=1, end=3), dim=1)",
                      f"slice({g}, dim=0, start=1, end=3)", s, dtypes=dt)  # (late)
    assert not proves("aten.gather(slice(X, dim=0, start=1, end=3), slice(I, dim=0, start=0, end=2), dim=1)",
                      f"slice({g}, dim=0, start=1, end=3)", s, dtypes=dt, late=True)
    assert not proves("aten.gather(slice(X, dim=1, start=0, end=2), slice(I, dim=1, start=0, end=2), dim=1)",
                      f"slice({g}, dim=1, start=0, end=2)", s, dtypes=dt, late=True)


def test_matmul_of_interleaved_row_slices():
    s = {"A": [2, 3], "B": [2, 3], "W": [3, 4]}
    rows = "concat(slice(A, dim=0, start=0, end=1), slice(B, dim=0, start=0, end=1), slice(A, dim=0, start=1, end=2), dim=0)"
    want = ("concat(slice(aten.mm(A, W), dim=0, start=0, end=1), slice(aten.mm(B, W), dim=0, start=0, end=1), "
            "slice(aten.mm(A, W), dim=0, start=1, end=2), dim=0)")
    assert proves(f"aten.mm({rows}, W)", want, s, late=True)
    assert not proves(f"aten.mm({rows}, W)", want, s)  # 224 is late: only after relayout.py's equalities
    assert not proves(f"aten.mm({rows}, W)", "concat(slice(aten.mm(B, W), dim=0, start=0, end=1), "
                      "slice(aten.mm(A, W), dim=0, start=0, end=1), slice(aten.mm(A, W), dim=0, start=1, end=2), dim=0)",
                      s, late=True)
    # 223 alone: a slice of the rows is the same slice of the product, not another one
    assert proves("aten.mm(slice(A, dim=0, start=1, end=2), W)", "slice(aten.mm(A, W), dim=0, start=1, end=2)", s,
                  late=True)
    assert not proves("aten.mm(slice(A, dim=0, start=1, end=2), W)", "slice(aten.mm(A, W), dim=0, start=0, end=1)", s,
                      late=True)
    # ... and only over slices of a tensor (a rank's own rows), not of any sub-term
    assert not proves(f"aten.mm(concat(slice(A, dim=0, start=0, end=1), slice(aten.neg(B), dim=0, start=0, end=1), "
                      "dim=0), W)", "concat(slice(aten.mm(A, W), dim=0, start=0, end=1), "
                      "slice(aten.mm(aten.neg(B), W), dim=0, start=0, end=1), dim=0)", s, late=True)


# -- the derived rules are normal rules: listed, fuzzed, gated --------------------------------------------

def test_every_derived_rule_is_listed_and_fuzzed(plugins):
    derived = [r for r in plugins.lemmas if r.lemma.variant]
    assert {r.lemma.ref for r in derived} == set(range(1201, 1230))  # (1223-1227: engine/invariances.py)
    assert len({r.id for r in plugins.lemmas}) == len(plugins.lemmas)  # one id per rule
    # every one is in the fuzzed packs (test_lemmas.BUILTIN fuzzes each pack's rules) ...
    from test_lemmas import BUILTIN
    assert {r.lemma.pack for r in derived} <= {p for p, _ in BUILTIN}
    # ... and `lemmas list` / `lemmas check` name each of a family's rules
    p = run_cli("lemmas", "list")
    assert p.returncode == 0
    for r in derived:  # pack, pack:number, name, its family and op, where
        assert re.search(rf"^{re.escape(r.lemma.pack)} +{re.escape(r.lemma.label)} +{re.escape(r.lemma.name)}  family "
                         rf"{re.escape(r.lemma.family[0])}, op {re.escape(r.lemma.family[1])}  .*(?:families|invariances)\.py:\d+$",
                         p.stdout, re.M), r.lemma
    fam = [r for r in derived if r.lemma.ref == 1208]
    p = run_cli("lemmas", "check", "--ref", "1208")
    assert p.returncode == 0, p.stdout[-2000:]
    for r in fam:
        assert re.search(rf"ok\s+{re.escape(r.id)} ", p.stdout), r.id
    assert f"{len(fam)} passed, 0 failed" in p.stdout


def test_families_cover_the_new_aten_ops(plugins):
    names = {r.lemma.name for r in plugins.lemmas if r.lemma.variant}
    for n in ("elementwise-of-concats[aten.gt.Tensor]", "elementwise-of-concats[aten.abs]",
              "elementwise-of-concats[aten.logical_and]", "commutes-where-mirrored[aten.ne.Tensor]",
              "reduction-of-concat-along-it[aten.amin]", "reduction-of-concat-other-dims[aten.var.correction]",
              "reduction-of-concat-other-dims[aten.linalg_vector_norm]", "rowwise-of-concats[aten.roll]",
              "linear-over-sum[aten.flip]"):
        assert n in names, n


PROPERTY_PLUGIN = '''
import numpy as np
from graphguard import hookimpl
from graphguard.ir.ops import OpDef

@hookimpl
def graphguard_ops():
    return [OpDef("extra.double", 1, lambda s, a, cx: tuple(s[0]), lambda xs, a: 2 * xs[0], doc="2x",
                  elementwise=(0,), linear=(0,)),
            OpDef("extra.square", 1, lambda s, a, cx: tuple(s[0]), lambda xs, a: xs[0] * xs[0], doc="x*x",
                  elementwise=(0,), linear=SQUARE_LINEAR)]

@hookimpl
def graphguard_lemmas():
    return []
'''


def test_a_third_party_op_gets_the_families_by_declaring_properties(third_party, tmp_path):  # noqa: F811
    init = tmp_path / "ggextra" / "__init__.py"
    init.write_text(PROPERTY_PLUGIN.replace("SQUARE_LINEAR", "()"))
    p = _gg(third_party, "lemmas", "list")
    assert p.returncode == 0, p.stderr
    assert re.search(r"^extra +extra:1201 +elementwise-of-concats\[extra.double\]  family elementwise-of-concats, "
                     r"op extra.double  .*families\.py:\d+\n    extra.double\(concat\(\?a0, \?b0, dim=\?d\)\)", p.stdout, re.M)
    assert re.search(r"^extra +extra:1203 +linear-over-sum\[extra.double\]  family", p.stdout, re.M)
    assert re.search(r"^extra +extra:1211 +elementwise-of-slices\[extra.square\]  family", p.stdout, re.M)
    assert re.search(r"^extra: 10 lemmas \(10 derived from operator properties\)$", p.stdout, re.M)
    p = _gg(third_party, "plugins")  # fuzzed when first loaded, as its hand-written lemmas would be
    assert p.returncode == 0, p.stderr
    assert re.search(r"lemmas: .*extra: 10", p.stdout), p.stdout  # 1201, 1203, 1211, 1213, 1217 for double; 1201, 1211, 1213, 1217 for square; 1204
    # a false declaration (x*x is not linear) fails the fuzzer: the pack is refused, naming the derived lemma
    init.write_text(PROPERTY_PLUGIN.replace("SQUARE_LINEAR", "(0,)"))
    p = _gg(third_party, "plugins")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert re.search(r"lemma pack 'extra' is refused: lemma extra:120[34] (linear-over-sum|scalar-factor-out)\[extra.square",
                     p.stderr), p.stderr


# -- the new ATen ops: captured by the fx frontend, references agree with torch -----------------------------

def test_new_aten_ops_are_captured_and_match_torch(plugins):
    torch = pytest.importorskip("torch")
    import numpy as np
    import graphguard.torch as ggt

    class M(torch.nn.Module):
        def forward(self, x, ids):
            a = torch.flip(x, [1]) + torch.roll(x, 1, 1) + x.abs()
            b = (torch.amin(a, 1, keepdim=True) + torch.var(a, 1, keepdim=True, correction=0)
                 + torch.linalg.vector_norm(a, dim=1, keepdim=True))
            m = torch.logical_and(torch.bitwise_and(ids >= 0, ids < 5), torch.gt(ids, 2)) ^ torch.ne(ids, 3)
            return a * b + m.to(x.dtype) + torch.ge(x, a).float()

    c = ggt.capture(lambda r: M(), lambda r: (torch.randn(4, 3), torch.randint(-2, 7, (4, 3))), world_size=1)
    ops = {n["op"] for n in c.doc["nodes"]}
    assert {"aten.flip", "aten.roll", "aten.abs", "aten.amin", "aten.var.correction", "aten.linalg_vector_norm",
            "aten.gt.Scalar", "aten.ne.Scalar", "aten.logical_and", "aten.bitwise_xor.Tensor", "aten.ge.Tensor"} <= ops
    assert len(c.graph(plugins).nodes) == len(c.doc["nodes"])
    x = torch.randn(3, 4, dtype=torch.float64)
    y = torch.randint(-3, 4, (3, 4))
    reg = plugins.registry
    cases = [("aten.flip", [x], {"dims": (0, 1)}, torch.flip(x, [0, 1])),
             ("aten.roll", [x], {"shifts": (2,), "dims": ()}, torch.roll(x, 2)),
             ("aten.roll", [x], {"shifts": (1, -1), "dims": (0, 1)}, torch.roll(x, (1, -1), (0, 1))),
             ("aten.abs", [y], {}, y.abs()),
             ("aten.amin", [x], {"dim": (1,), "keepdim": False}, torch.amin(x, 1)),
             ("aten.var.correction", [x], {"dim": (0,), "correction": None, "keepdim": True}, torch.var(x, 0, keepdim=True)),
             ("aten.var.dim", [x], {"dim": None, "unbiased": False, "keepdim": False}, torch.var(x, unbiased=False)),
             ("aten.linalg_vector_norm", [x], {"ord": 3, "dim": (1,), "keepdim": False, "dtype": None},
              torch.linalg.vector_norm(x, 3, 1)),
             ("aten.linalg_vector_norm", [x], {"ord": float("inf"), "dim": None, "keepdim": False, "dtype": None},
              torch.linalg.vector_norm(x, float("inf"))),
             ("aten.gt.Tensor", [x, x.T[:1, :].T], {}, x > x.T[:1, :].T),
             ("aten.logical_xor", [y, x], {}, torch.logical_xor(y, x)),
             ("aten.bitwise_xor.Tensor", [y, y.flip(0)], {}, y ^ y.flip(0))]
    for name, args, attrs, want in cases:
        op = reg.get(name)
        got = op.ref([a.numpy() for a in args], {s.name: attrs.get(s.name, s.default) for s in op.attrs})
        assert np.allclose(np.asarray(got, dtype=np.float64), want.numpy().astype(np.float64)), name


# -- identity elements (graphguard/passes): x + 0, x * 1 dropped before proving ------------------------------

def _partial_sum_from(fill, fill_op="aten.full", alpha=1):
    """Y = X @ W in G_s; on each rank Z = C + X@r @ W@r, a partial sum started from a constant C (Y is their
    sum: the partial results allowed)."""
    attrs = {"size": [4, 3], "fill_value": fill, "dtype": "float32"} if fill_op == "aten.full" else \
        {"s": fill, "dtype": "float32"}

    def impl(r):
        return [(fill_op, [], f"C@{r}", attrs), ("aten.mm", _at(r, "X", "W"), f"P@{r}", {}),
                ("aten.add.Tensor", [f"C@{r}", f"P@{r}"], f"Z@{r}", {"alpha": alpha})]
    return ([("aten.mm", ["X", "W"], "Y", {})], impl, {"X": [4, 4], "W": [4, 3]}, {"X": [4, 2], "W": [2, 3]},
            {"X": "concat(X@0, X@1, dim=1)", "W": "concat(W@0, W@1, dim=0)"})


@pytest.mark.parametrize("fill,fill_op,alpha,ok", [
    ("0", "aten.full", 1, True),             # x.new_zeros(shape) + y
    ("0", "aten.scalar_tensor", 1, True),    # a 0-dim zero: kept in the graph, lemma 408 drops it
    ("1", "aten.full", 1, False),            # not the identity: 1 + y
    ("nan", "aten.full", 1, False),          # an empty buffer read (the PyTorch frontend fills it with NaN)
    ("0", "aten.full", 2, False),            # 0 + 2 y
])
def test_identity_elements_are_dropped_before_proving(plugins, fill, fill_op, alpha, ok):
    spec, impl, shapes, shards, rel = _partial_sum_from(fill, fill_op, alpha)
    res = _verify(plugins, spec, impl, shapes, shards, rel, allow_partial=True)
    assert res.verdict == ("refines" if ok else "does-not-refine"), res.render()
    if ok:
        assert res.r_o_lines() == ["Y = sum(Z@0, Z@1)"]


def test_identity_declarations_are_fuzzed(plugins):
    """Every declared identity passes the fuzzer; a false one (0 - x, x * 0) is caught on a counterexample."""
    import dataclasses

    from graphguard.engine.fuzz import check_identity
    reg = plugins.registry
    declared = [op for op in reg if op.identity]
    assert {"aten.add.Tensor", "aten.sub.Tensor", "aten.mul.Tensor", "aten.div.Tensor"} <= {o.name for o in declared}
    for op in declared:
        assert all(why is None and n >= 20 for _, n, why in check_identity(op, reg)), op.name
    for name, wrong in (("aten.sub.Tensor", ((0, 0, {"alpha": 1}),)), ("aten.mul.Tensor", ((1, 0, {}),)),
                        ("aten.div.Tensor", ((0, 1, {}),))):
        op = dataclasses.replace(reg.get(name), identity=wrong)
        assert check_identity(op, reg)[0][2], name


# -- family 1220: one elementwise function in two dialects (OpDef.computes) --------------------------------

def test_the_same_function_in_two_dialects_is_one_op_up_to_broadcasting():
    """``aten.where`` broadcasts its operands; ``hlo.select`` takes them broadcast explicitly (HLO's broadcast
    op): the two are one op where the dims line up, and only there, and only for the same function."""
    s = {"M": [2, 1, 2, 6], "A": [2, 4, 2, 6], "B": [6], "K": [2, 6]}
    d = {"M": "bool", "A": "float16", "B": "float16", "K": "int32"}
    bc = "hlo.broadcast(B, shape=[2, 4, 2, 6], dimensions=[3])"
    mb = "hlo.broadcast(M, shape=[2, 4, 2, 6], dimensions=[0, 1, 2, 3])"
    assert proves("aten.where.self(M, A, B)", f"hlo.select({mb}, A, {bc})", s, dtypes=d)
    # must not prove: the broadcast along other dims, the operands swapped, another function
    sq = {"M": [2, 1, 2, 2], "A": [2, 4, 2, 2], "B": [2]}
    mq = "hlo.broadcast(M, shape=[2, 4, 2, 2], dimensions=[0, 1, 2, 3])"
    assert proves("aten.where.self(M, A, B)",
                  f"hlo.select({mq}, A, hlo.broadcast(B, shape=[2, 4, 2, 2], dimensions=[3]))", sq, dtypes=d)
    assert not proves("aten.where.self(M, A, B)",
                      f"hlo.select({mq}, A, hlo.broadcast(B, shape=[2, 4, 2, 2], dimensions=[2]))", sq, dtypes=d)
    assert not proves("aten.where.self(M, A, B)", f"hlo.select({mb}, {bc}, A)", s, dtypes=d)
    assert not proves("aten.where.self(M, A, B)", f"hlo.maximum(A, {bc})", s, dtypes=d)
    # comparisons: hlo.compare's direction is the function; a wrong direction is not the same op
    ks = "hlo.broadcast(K, shape=[2, 2, 6], dimensions=[1, 2])"
    kt = {"K": [2, 6], "J": [2, 2, 6]}
    assert proves("aten.le.Tensor(K, J)", f"hlo.compare({ks}, J, direction=LE)", kt, dtypes={"K": "int32", "J": "int32"})
    assert not proves("aten.le.Tensor(K, J)", f"hlo.compare({ks}, J, direction=LT)", kt,
                      dtypes={"K": "int32", "J": "int32"})
    assert not proves("aten.le.Tensor(K, J)", f"hlo.compare({ks}, J, direction=GE)", kt,
                      dtypes={"K": "int32", "J": "int32"})
    # mixed dtypes: ATen promotes, HLO does not -- no lemma
    assert not proves("aten.le.Tensor(K, J)", f"hlo.compare({ks}, J, direction=LE)", kt,
                      dtypes={"K": "int32", "J": "int64"})
    # functions of the reals: the same on floats; ATen's sin of an integer computes in float32, HLO's does not
    assert proves("aten.sin(A)", "hlo.sine(A)", s, dtypes=d)
    assert not proves("aten.sin(K)", "hlo.sine(K)", s, dtypes=d)


def test_mul_is_one_op_across_dialects_up_to_broadcasting():
    """aten.mul.Tensor and hlo.multiply declare ``computes="mul"``: family 1220 relates them with the broadcast
    made explicit -- and not along another axis, nor another function."""
    s = {"A": [2, 3, 4], "B": [4], "C": [2, 3, 4]}
    d = {"A": "float32", "B": "float32", "C": "float32"}
    assert proves("aten.mul.Tensor(A, B)", "hlo.multiply(A, hlo.broadcast(B, shape=[2, 3, 4], dimensions=[2]))", s,
                  dtypes=d)
    sq = {"A": [2, 4, 4], "B": [4]}
    assert not proves("aten.mul.Tensor(A, B)", "hlo.multiply(A, hlo.broadcast(B, shape=[2, 4, 4], dimensions=[1]))",
                      sq, dtypes=d)
    assert not proves("aten.mul.Tensor(A, C)", "hlo.add(A, C)", s, dtypes=d)


def test_fills_of_one_shape_value_and_dtype_are_one_tensor_across_dialects():
    assert proves("aten.full(size=[2, 3], fill_value=-30000, dtype=float16)",
                  "hlo.constant(shape=[2, 3], value=-30000, dtype=float16)", {})
    for other in ("hlo.constant(shape=[2, 3], value=-30000, dtype=float32)",
                  "hlo.constant(shape=[3, 2], value=-30000, dtype=float16)",
                  "hlo.constant(shape=[2, 3], value=-29999, dtype=float16)"):
        assert not proves("aten.full(size=[2, 3], fill_value=-30000, dtype=float16)", other, {})


# -- family 1222: a function others define (COMPOSITES), spelt in any dialect computing its parts ---------------

def test_silu_is_x_times_the_logistic_of_x_in_any_dialect():
    """HF's ``silu`` against NeuronX's ``multiply(x, logistic(x))`` and ATen's own ``mul(x, sigmoid(x))``; and
    not against a product with another tensor's logistic, the logistic squared, or an integer x."""
    s = {"X": [2, 3], "Y": [2, 3]}
    d = {"X": "float16", "Y": "float16"}
    assert proves("aten.silu(X)", "hlo.multiply(X, hlo.logistic(X))", s, dtypes=d)
    assert proves("aten.silu(X)", "aten.mul.Tensor(X, aten.sigmoid(X))", s, dtypes=d)
    assert not proves("aten.silu(X)", "hlo.multiply(X, hlo.logistic(Y))", s, dtypes=d)
    assert not proves("aten.silu(X)", "hlo.multiply(hlo.logistic(X), hlo.logistic(X))", s, dtypes=d)
    assert not proves("aten.silu(X)", "hlo.multiply(Y, hlo.logistic(X))", s, dtypes=d)
    assert not proves("aten.silu(X)", "hlo.exponential(X)", s, dtypes=d)


def test_composites_are_derived_only_where_the_parts_are_computed(plugins):
    """Each derived lemma spells the composite in one dialect's ops (the one op computing each part, its
    attributes all fixed by the function), guarded by its innermost op; every one passes the fuzzer."""
    from graphguard.engine.fuzz import fuzz_rule
    rules = [r for r in plugins.lemmas if r.lemma.ref == 1222]
    texts = {r.lemma.rule for r in rules}
    assert "aten.silu(?x0) => hlo.multiply(?x0, hlo.logistic(?x0))" in texts, texts
    assert "aten.silu(?x0) => aten.mul.Tensor(?x0, aten.sigmoid(?x0))" in texts, texts
    assert all(r.lemma.when.startswith(("hlo.logistic(", "aten.sigmoid(")) for r in rules)
    for r in rules:
        assert fuzz_rule(r, plugins.registry).ok, r.lemma.label


def test_slice_of_a_transpose_is_the_transpose_of_the_operands_slice():
    """core 115 (only where the operand's slice exists): HF's h[:, -1:] of [b, s, h] is NeuronX's slice of
    its [h, s, b] activations, transposed; the slice of another dim or range is not."""
    s = {"X": [4, 3, 2]}
    assert proves("slice(permute(X, dims=[2, 1, 0]), dim=1, start=2, end=3)",
                  "permute(slice(X, dim=1, start=2, end=3), dims=[2, 1, 0])", s)
    assert not proves("slice(permute(X, dims=[2, 1, 0]), dim=1, start=2, end=3)",
                      "permute(slice(X, dim=1, start=1, end=2), dims=[2, 1, 0])", s)
    assert not proves("slice(permute(X, dims=[2, 0, 1]), dim=1, start=0, end=1)",
                      "permute(slice(X, dim=1, start=0, end=1), dims=[2, 0, 1])", s)


def test_a_multiply_by_a_splat_is_a_scale_and_moves_through_the_dot():
    """hlo 886 / 887 and hlo.dot's linearity (family 1204): NeuronX's (q * 0.5) . k is 0.5 (q . k)."""
    s = {"Q": [2, 2, 4, 4], "K": [6, 2, 4, 4]}
    d = {"Q": "float16", "K": "float16"}
    dims = "lhs_batch=[1, 2], rhs_batch=[1, 2], lhs_contracting=[3], rhs_contracting=[3]"
    half = "hlo.constant(shape=[2, 2, 4, 4], value=1/2, dtype=float16)"
    assert proves(f"hlo.multiply(Q, {half})", "scale(Q, factor=1/2)", s, dtypes=d)
    assert proves(f"hlo.multiply({half}, Q)", "scale(Q, factor=1/2)", s, dtypes=d)
    assert proves(f"hlo.dot(hlo.multiply(Q, {half}), K, {dims})", f"scale(hlo.dot(Q, K, {dims}), factor=1/2)", s,
                  dtypes=d)
    # must not: another factor, a constant of another dtype
    assert not proves(f"hlo.multiply(Q, {half})", "scale(Q, factor=1/4)", s, dtypes=d)
    assert not proves(f"hlo.multiply(Q, {half})", "scale(Q, factor=1/2)", s, dtypes={"Q": "float32"})


def test_a_maximum_with_the_max_reductions_own_init_is_the_reduction():
    """hlo 888 (JAX's softmax takes max(reduce_max(x, init), init); NeuronX's the reduction alone)."""
    s = {"X": [2, 3, 4]}
    red = "hlo.reduce(X, dims=[2], reducer=max, init=-1000)"
    assert proves(f"hlo.maximum({red}, hlo.constant(shape=[2, 3], value=-1000, dtype=float32))", red, s)
    # must not: a maximum with another constant (it may clip the reduction)
    assert not proves(f"hlo.maximum({red}, hlo.constant(shape=[2, 3], value=-999, dtype=float32))", red, s)


def test_a_dot_of_a_partial_sum_is_the_sum_of_dots_and_only_that():
    """hlo.dot declared linear in each operand: family 1203 for it; must not pair the summands with other operands."""
    s = {"A": [2, 3], "B": [2, 3], "W": [3, 4], "V": [3, 4]}
    dims = "lhs_batch=[], rhs_batch=[], lhs_contracting=[1], rhs_contracting=[0]"
    assert proves(f"hlo.dot(sum(A, B), W, {dims})", f"sum(hlo.dot(A, W, {dims}), hlo.dot(B, W, {dims}))", s)
    assert not proves(f"hlo.dot(sum(A, B), W, {dims})", f"sum(hlo.dot(A, W, {dims}), hlo.dot(B, V, {dims}))", s)
