"""Shortcuts are theorems: every cap, threshold and fast path of the engine, forced on small cases.

Each ``MAX_*`` constant of graphguard/engine/ is declared here as one of two kinds (a new one must be, or
``test_every_cap_is_declared`` fails):

- a **shortcut**: above it the engine decides by another method (products on positions instead of pairs, a
  weight's shards read whole instead of labelled, the positions checked in chunks). Forced on the small cases,
  the verdicts and R_o must be the slow path's -- the proving cases still refine with the same R_o, the
  must-not-prove ones still do not;
- a **give-up**: above it a prover claims nothing and leaves the operator to the next one (the search). Forced
  to 0, a proving case may lose its proof (inconclusive or does not refine), but no must-not-prove case may
  refine, and no run may crash.

Two fast paths that are not constants are forced alike: ``_column_groups`` (the positions proof checking X once
per group of alike columns, against the general path over every column) and the memo (tests/test_memo_key.py).
The engine is run alone (``check="off"`` where the independent checker exists): the point is what the engine
claims, not what the checker catches.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import graphguard
import graphguard.engine
from test_relayout import (_interleaved, _mul_of_interleaved, _repeated_operands, _row_parallel, _scores,
                           _transposed_shards)

SHORTCUTS = {  # module -> caps above which another method decides
    "graphguard.engine.labels.products": ("MAX_PRODUCT_TERMS", "MAX_PRODUCT_LABELS", "MAX_PRODUCT_CHUNK"),
}
# the proving cases each shortcut's method covers (it must keep their proofs); on the others it may claim nothing
# (the whole-shards proof covers a column-parallel weight only: tests/test_relayout.py's _vocab_parallel)
KEEPS = {"MAX_PRODUCT_TERMS": {"row-parallel", "scores", "repeated-rows"},
         "MAX_PRODUCT_CHUNK": {"row-parallel", "scores", "repeated-rows"}, "MAX_PRODUCT_LABELS": set()}
GIVE_UPS = {  # module -> caps above which a prover claims nothing
    "graphguard.engine.labels.layout": ("MAX_MOVED", "MAX_ENTRIES", "MAX_CHUNKS", "MAX_PERMUTED_RANK"),
    "graphguard.engine.labels.movement": ("MAX_MOVED_FORMS", "MAX_ALIAS_STEPS"),
    "graphguard.engine.labels.counterparts": ("MAX_COUNTERPARTS",),
    "graphguard.engine.labels.elementwise": ("MAX_ELEMENTWISE",),
    "graphguard.engine.labels.poly": ("MAX_MONOMIALS", "MAX_POLY_ENTRIES"),
    "graphguard.engine.labels.propagate": ("MAX_PROPAGATED",),
    "graphguard.engine.labels.sums": ("MAX_SUMMED",),
    "graphguard.engine.gd_facts": ("MAX_INDEX_ANCESTRY",),
    "graphguard.engine.frontier": ("MAX_HOPS", "MAX_DERIVED", "MAX_UNFOLDED", "MAX_INDEX_DERIVED"),
    "graphguard.engine.deferral": ("MAX_DEFERRED",),
    "graphguard.engine.infer": ("MAX_CONSTANT_TERM",),
    "graphguard.engine.memo": ("MAX_ENTRIES",),
    "graphguard.engine.egraph": ("MAX_OPTIONAL_ARITY",),
    "graphguard.engine.explain": ("MAX_NEIGHBOURS", "MAX_HOPS"),  # (the report's drawing and hint, not a proof)
}
# caps whose forcing to 0 makes every run a bad input rather than a run without the shortcut (their value is a
# dtype table, an arity the e-graph declares ops for): forced only where a number is meaningful
NOT_FORCED = {("graphguard.engine.egraph", "MAX_OPTIONAL_ARITY")}

PROVING = {
    "row-parallel": lambda p: _row_parallel(p),
    "scores": lambda p: _scores(p),
    "interleaved": lambda p: _interleaved(p),
    "mul-of-interleaved": lambda p: _mul_of_interleaved(p),
    "transposed-shards": lambda p: _transposed_shards(p),
    "repeated-rows": lambda p: _repeated_operands(p, 5, along_contraction=False),
}
MUST_NOT_PROVE = {
    "row-parallel-ranks-swapped": lambda p: _row_parallel(p, w_order=(1, 0)),
    "scores-keys-permuted": lambda p: _scores(p, key_perm=(2, 1, 3, 0)),
    "mul-of-interleaved-other-order": lambda p: _mul_of_interleaved(p, p_order=(0, 1, 2, 3)),
    "transposed-shard-scrambled": lambda p: _transposed_shards(p, scrambled=True),
    "repeated-along-contraction": lambda p: _repeated_operands(p, 5, along_contraction=True),
}


def _engine_alone(monkeypatch):
    """graphguard.verify without the independent checker (where it exists), for the builders that call it."""
    real = graphguard.verify
    if "check" in inspect.signature(real).parameters:
        monkeypatch.setattr(graphguard, "verify", lambda *a, **k: real(*a, **{"check": "off", **k}))


def _run(plugins, build):
    got = build(plugins)
    return graphguard.verify(*got) if isinstance(got, tuple) else got


def _caps():
    for mod, names in list(SHORTCUTS.items()) + list(GIVE_UPS.items()):
        for name in names:
            yield mod, name


def test_every_cap_is_declared():
    """Every MAX_* constant of the engine is declared a shortcut or a give-up above (and nothing declared is
    missing): a new cap states which claim it makes."""
    found = set()
    for info in pkgutil.walk_packages(graphguard.engine.__path__, "graphguard.engine."):
        mod = importlib.import_module(info.name)
        found |= {(info.name, n) for n in vars(mod) if n.startswith("MAX_")
                  and getattr(vars(mod)[n], "__module__", None) is None and _defined_in(mod, n)}
    assert found == set(_caps())


def _defined_in(mod, name) -> bool:
    import re
    return re.search(rf"^{name}\s*=", inspect.getsource(mod), re.M) is not None


@pytest.fixture(scope="module")
def unforced(plugins):
    """The proving cases' R_o with nothing forced."""
    mp = pytest.MonkeyPatch()
    try:
        _engine_alone(mp)
        return {k: _run(plugins, b) for k, b in PROVING.items()}
    finally:
        mp.undo()


@pytest.mark.parametrize("mod,name", sorted(m for m in _caps() if m[0] in SHORTCUTS))
@pytest.mark.parametrize("case", sorted(PROVING) + sorted(MUST_NOT_PROVE))
def test_a_shortcut_forced_decides_as_the_slow_path(plugins, monkeypatch, unforced, mod, name, case):
    _engine_alone(monkeypatch)
    monkeypatch.setattr(importlib.import_module(mod), name, 1 if name == "MAX_PRODUCT_CHUNK" else 0)
    if case in PROVING:
        r = _run(plugins, PROVING[case])
        want = unforced[case]
        assert want.verdict == "refines", want.render()
        if case in KEEPS[name]:
            assert r.verdict == "refines", (r.render(), want.render())
        if r.verdict == "refines":
            assert r.r_o_lines() == want.r_o_lines()
    else:
        r = _run(plugins, MUST_NOT_PROVE[case])
        assert r.verdict != "refines", r.render()


@pytest.mark.parametrize("mod,name", sorted(m for m in _caps() if m[0] in GIVE_UPS and m not in NOT_FORCED))
def test_a_give_up_forced_claims_nothing(plugins, monkeypatch, mod, name):
    """Forced to 0: no must-not-prove case refines, no run crashes; a proving case that still refines holds."""
    _engine_alone(monkeypatch)
    monkeypatch.setattr(importlib.import_module(mod), name, 0)
    for case, build in MUST_NOT_PROVE.items():
        r = _run(plugins, build)
        assert r.verdict != "refines", (case, r.render())
    for case in ("row-parallel", "interleaved"):
        r = _run(plugins, PROVING[case])
        assert r.verdict in ("refines", "does-not-refine", "inconclusive"), (case, r.render())
        if r.verdict == "refines" and r.replay is not None:
            assert r.replay["ok"], (case, r.render())


@pytest.mark.parametrize("case", sorted(PROVING) + sorted(MUST_NOT_PROVE))
def test_the_positions_proof_without_its_column_groups(plugins, monkeypatch, unforced, case):
    """Positions forced (MAX_PRODUCT_TERMS = 0), its fast path off (_column_groups -> None: every column checked
    on its own) and its chunks one column each: the same verdicts and R_o."""
    import graphguard.engine.labels.products as products
    _engine_alone(monkeypatch)
    monkeypatch.setattr(products, "MAX_PRODUCT_TERMS", 0)
    monkeypatch.setattr(products, "_column_groups", lambda *a: None)
    monkeypatch.setattr(products, "MAX_PRODUCT_CHUNK", 1)  # (and the general path one column at a time)
    if case in PROVING:
        r = _run(plugins, PROVING[case])
        assert r.verdict == "refines", r.render()
        assert r.r_o_lines() == unforced[case].r_o_lines()
    else:
        assert _run(plugins, MUST_NOT_PROVE[case]).verdict != "refines"
