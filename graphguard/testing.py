"""graphguard in a user's own test suite::

    from graphguard.testing import assert_refines

    def test_my_tp_plan():
        assert_refines("models/my_tp.py", world_size=2, backward=True)

    def test_inline():
        assert_refines(spec=lambda: Seq(), impl=lambda rank, world: TP(rank, world),
                       inputs=lambda rank, world: (torch.randn(4, 8),), world_size=2)

The model is a model file (as ``graphguard capture`` reads: ``spec()``, ``impl(rank, world)``,
``inputs(rank, world)``, optionally ``relation(world, backward)``, ``expect``, ``repeat`` ...), any object with
those attributes (a module you imported), or the functions given by keyword. Both programs are captured with
the fx frontend, verified, and a verdict other than "refines" fails the test with graphguard's report as the
assertion message (the operator, its source line and module, the hint). Returns the :class:`VerifyResult`.

One-line lemma tests, for pack authors: ``proves("slice(concat(P, Q, dim=0), dim=0, start=0, end=2)", "P",
{"P": [2, 3], ...})`` builds an e-graph with both expressions (tensor names are leaves with the given shapes),
saturates it with the loaded lemmas and reports whether they end up in one e-class -- for "this proves that"
tests and, as importantly, "this must NOT prove that" tests.
"""
from __future__ import annotations

import time

from .engine.egraph import Budget, EGraph
from .engine.lemma import relevant_rules, term_ops
from .errors import InputError, ShapeError
from .ir import scalar as S
from .ir.expr import to_text
from .ir.relation import parse_term
from .ir.semantics import normalize_term, term_shape
from .plugins import load_plugins
from .torch import assert_refines

__all__ = ["assert_refines", "proves"]


def proves(lhs: str, rhs: str, shapes: dict[str, list], symbols: dict[str, dict] | None = None,
           budget: Budget | None = None, plugins=None, dtypes: dict[str, str] | None = None,
           ranges: dict[str, tuple[int, int]] | None = None, late: bool = False) -> bool:
    """Do the loaded lemmas prove ``lhs`` and ``rhs`` equal? ``shapes`` (and ``dtypes``, float32 by default;
    ``ranges``, the [lo, hi) of an integer tensor's values, as a relation file's ``ranges:``) of the tensors
    they name. ``late``: with the lemmas that run only after layouts found on labelled entries."""
    pl = plugins or load_plugins()
    cx = S.Constraints()
    for name, spec in (symbols or {}).items():
        cx.declare(S.SymbolInfo(name, spec.get("min", 1), spec.get("max"), spec.get("multiple_of")))
    shp = {k: tuple(S.parse(d) if isinstance(d, str) else d for d in v) for k, v in shapes.items()}
    terms = []
    for t in (parse_term(lhs, pl.registry), parse_term(rhs, pl.registry)):
        try:
            t = normalize_term(t, shp.__getitem__, pl.registry, cx)  # dims as a loaded graph has them
            term_shape(t, shp.__getitem__, pl.registry, cx)
        except (ShapeError, KeyError) as e:
            raise InputError(f"{to_text(t)}: {e}") from None
        terms.append(t)
    a, b = terms
    dt = dtypes or {}
    ops = {o.name for o in pl.registry.ops.values() if o.clean}  # as verify does: only rules that can fire
    for t in terms:
        term_ops(t, ops)
    eg = EGraph(pl.registry, relevant_rules(pl.lemmas, ops), cx, lambda n: shp[n], ops,
                leaf_dtype=lambda n: dt.get(n, "float32"), leaf_range=(ranges or {}).get)
    eg.late = late
    eg.push()
    eg.add(a)
    eg.add(b)
    budget = budget or Budget()
    snap = eg.saturate(budget, time.monotonic() + budget.seconds, {})
    return snap.find(a) == snap.find(b)
