"""The provers as data (graphguard/engine/prover.py; their order: ``infer.PROVERS``): one list, each prover named
once; each fires on a small pair and is named in the certificate's provenance; each, made to return a wrong fact,
is refused (the independent checker, graphguard/check.py, does not confirm the R_o it leads to)."""
from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

import graphguard
import graphguard.engine.infer as infer
from graphguard.engine.labels import provers as label_provers
from graphguard.engine.prover import Prover, check_order
from graphguard.ir.expr import App, Leaf, base_name, rank_of

sys.path.insert(0, str(Path(__file__).parent))
import test_engine as TE  # noqa: E402
import test_memo_key as TM  # noqa: E402
import test_relayout as TR  # noqa: E402

ORDER = ["labels.movement", "labels.products", "labels.elementwise.first", "search", "search.held", "labels.moved",
         "labels.elementwise", "labels.poly", "labels.relayouts", "labels.rows", "search.late"]


def test_the_list_is_the_single_source():
    """Every prover defined is in the list, once, in this order; a list naming one twice is refused."""
    names = [p.name for p in infer.PROVERS]
    assert names == ORDER
    defined = {x.name for m in (infer, label_provers) for x in vars(m).values() if isinstance(x, Prover)}
    assert defined == set(names)
    assert [p.stage for p in infer.PROVERS] == ["first"] * 3 + ["search"] * 2 + ["late"] * 5 + ["search"]
    with pytest.raises(ValueError, match="named twice"):
        check_order([infer.SEARCH, infer.SEARCH])
    with pytest.raises(ValueError, match="first prover after a search"):
        check_order([infer.SEARCH, label_provers.MOVEMENT_FIRST])


def _product(x, y, axes):
    """The product a Bilinear declaration states, by einsum."""
    lb, lc, rb, rc = axes
    letters = iter("abcdefghijklmnop")
    sx, sy = [None] * x.ndim, [None] * y.ndim
    for a, b in list(zip(lb, rb)) + list(zip(lc, rc)):
        sx[a] = sy[b] = next(letters)
    sx = [s or next(letters) for s in sx]
    sy = [s or next(letters) for s in sy]
    out = [sx[d] for d in lb] + [sx[d] for d in range(x.ndim) if d not in lb + lc] + \
        [sy[d] for d in range(y.ndim) if d not in rb + rc]
    return np.einsum(f"{''.join(sx)},{''.join(sy)}->{''.join(out)}", x, y)


@pytest.mark.parametrize("op,shapes,attrs", [
    ("aten.mm", ([3, 4], [4, 5]), {}), ("core.matmul", ([3, 4], [4, 5]), {}), ("aten.bmm", ([2, 3, 4], [2, 4, 5]), {}),
    ("hlo.dot", ([2, 3, 4], [5, 4, 2]), {"lhs_batch": [0], "rhs_batch": [2], "lhs_contracting": [2],
                                          "rhs_contracting": [1]})])
def test_bilinear_declarations_are_the_references_products(plugins, op, shapes, attrs):
    """``OpDef.bilinear`` (read by the product provers instead of op names) states the product the reference
    computes."""
    d = plugins.registry.get(op)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(s) for s in shapes)
    axes = d.bilinear.axes(attrs, x.ndim, y.ndim)
    assert np.allclose(d.ref([x, y], attrs), _product(x, y, axes))
    assert plugins.registry.get("aten.add.Tensor").bilinear is None


# -- each prover fires on a small pair, and is named in the provenance ----------------------------------------

PAIRS = {  # prover -> a small pair it proves a line of (tests/test_relayout.py's, tests/test_engine.py's)
    "labels.movement": lambda p: TR._transposed_shards(p),
    "labels.products": lambda p: TR._scores(p),
    "labels.elementwise.first": lambda p: TR._mul_of_interleaved(p),
    "search": lambda p: TR._transposed_shards(p),
    "search.held": lambda p: TE._packed(p, 2)[0],
    "labels.moved": lambda p: TR._gather_rows(p, "same", "index_select"),
    "labels.elementwise": lambda p: TR._gathered_rows(p, (1, 0)),
    "labels.poly": lambda p: TR._packed_contraction(p),
    "labels.relayouts": lambda p: TR._moe_like(p, [1, 0, 2]),
    "labels.rows": lambda p: TR._interleaved(p),
    "search.late": lambda p: TR._moe_like(p, [1, 0, 2]),
}


def _run(pair, **kw) -> "graphguard.VerifyResult":
    """A pair's verification (a helper that verifies itself, as tests/test_relayout.py's _verify does: its result,
    R_o checked)."""
    return pair if hasattr(pair, "verdict") else graphguard.verify(*pair, **kw)


def test_every_prover_has_a_pair():
    assert set(PAIRS) == set(ORDER)


@pytest.mark.parametrize("name", ORDER)
def test_each_prover_fires_and_is_named_in_the_provenance(plugins, name):
    r = _run(PAIRS[name](plugins))
    assert r.verdict == "refines", r.render()
    named = [by for by in r.provenance.values() if by.split(" ")[0].split(":")[0] == name or f"{name}," in by
             or f"{name})" in by or f"({name}" in by]
    assert named, sorted(set(r.provenance.values()))
    assert all(line in r.provenance for line in r.r_o_lines())
    assert set(r.to_dict()["provenance"]) == set(r.provenance)
    assert "<-" in r.render(explain=True) and "<-" not in r.render()


@pytest.mark.parametrize("kind", sorted(TM.KINDS))
def test_memo_reuse_names_the_operator_it_reused(plugins, monkeypatch, kind):
    """A memo hit records ``memo:<operator>`` and the prover that found the result there: two alike layers, the
    second's lines taken from the first's operators."""
    r = TM._layers(plugins, kind, (False, False), True, monkeypatch)
    assert r.verdict == "refines" and r.stats["reused_results"] > 0, r.render()
    reused = [by for by in r.provenance.values() if by.startswith("memo:")]
    assert reused, sorted(set(r.provenance.values()))
    assert all(by.split(" ")[1] and by.split(" ")[1] != "?" for by in reused), reused


# -- each prover made to return a wrong fact: not certified ------------------------------------------------------

HAS_CHECKER = "check" in inspect.signature(graphguard.verify).parameters


def _other_rank(t, tensors):
    """``t`` with its first leaf of a rank read from the next rank (the same tensor there): another rank's data in
    one place (whatever the term sums or concatenates, no longer the same entries)."""
    leaves = [x for x in _leaves(t) if rank_of(x) is not None]
    for name in leaves:
        r, base = rank_of(name), base_name(name)
        other = next((f"{base}@{s}" for s in (r + 1, r - 1) if f"{base}@{s}" in tensors), None)
        if other is not None:
            return _rename(t, name, other)
    return t


def _leaves(t):
    if isinstance(t, Leaf):
        return [t.name]
    return [x for a in getattr(t, "args", ()) for x in _leaves(a)]


def _rename(t, name, other, done=None):
    """``t`` with the first occurrence of leaf ``name`` renamed ``other``."""
    done = done if done is not None else [False]
    if isinstance(t, Leaf):
        if t.name == name and not done[0]:
            done[0] = True
            return Leaf(other)
        return t
    if isinstance(t, App):
        return App(t.op, tuple(_rename(a, name, other, done) for a in t.args), t.attrs)
    return t


def _wrong(p: Prover) -> Prover:
    """``p`` whose facts (and, for a search, the expressions it leaves) read another rank's tensor in one place."""
    def prove(q):
        tensors = q.ctx.g_d.tensors
        facts = [dataclasses.replace(f, rhs=_other_rank(f.rhs, tensors)) for f in p.prove(q)]
        if p.stage == "search" and q.search is not None:
            q.search.found = {o: [_other_rank(e, tensors) for e in es] for o, es in q.search.found.items()}
        return facts
    return dataclasses.replace(p, prove=prove)


# (where the pair above has one rank, a pair of two: another rank's tensor is the wrong fact)
WRONG_PAIRS = {**PAIRS, "labels.products": lambda p: TR._row_parallel(p)}


@pytest.mark.skipif(not HAS_CHECKER, reason="awaits the independent checker (graphguard.verify(check=...))")
@pytest.mark.parametrize("name", ORDER)
def test_a_wrong_fact_from_each_prover_is_not_certified(plugins, monkeypatch, name):
    """Every line of R checked (``check="all"``: a wrong fact may stay an intermediate one, R_o proven otherwise)."""
    right = _run(WRONG_PAIRS[name](plugins), check="all")
    assert right.verdict == "refines", right.render()
    monkeypatch.setattr(infer, "PROVERS", [_wrong(p) if p.name == name else p for p in infer.PROVERS])
    r = _run(WRONG_PAIRS[name](plugins), check="all")
    assert r.verdict != "refines", r.render(explain=True)


@pytest.mark.skipif(not HAS_CHECKER, reason="awaits the independent checker (graphguard.verify(check=...))")
@pytest.mark.parametrize("kind", sorted(TM.KINDS))
def test_a_wrong_result_reused_from_the_memo_is_not_certified(plugins, monkeypatch, kind):
    """The memo as a prover: two alike layers, the second's reused result made to read another rank's tensor in one
    place -- the checker does not confirm it (``check="all"``)."""
    from graphguard.engine.memo import Memo
    real = Memo.lookup

    def lookup(self, problem, outputs):
        hit = real(self, problem, outputs)
        if hit is None:
            return None
        found, *rest = hit
        tensors = problem.ctx.g_d.tensors
        return ({o: [_other_rank(e, tensors) for e in es] for o, es in found.items()}, *rest)
    right = TM._layers(plugins, kind, (False, False), True, monkeypatch, check="all")
    assert right.verdict == "refines" and right.stats["reused_results"] > 0, right.render()
    monkeypatch.setattr(Memo, "lookup", lookup)
    r = TM._layers(plugins, kind, (False, False), True, monkeypatch, check="all")
    assert r.stats["reused_results"] > 0
    assert r.verdict != "refines", r.render(explain=True)
