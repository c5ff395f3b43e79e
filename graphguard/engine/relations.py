"""Keeping R (§4.3): sums of partial sums regrouped into the G_d tensors that hold parts of them, sizes the data
decides given one name, only the simplest expression of each self-provable class, and the aliases (equal G_d
tensors) that two expressions of one G_s tensor show."""
from __future__ import annotations

import time

from ..ir import scalar as S
from ..ir.expr import App, Leaf, Term, base_name, flat_args, leaves, rename_symbols, size, to_text
from .context import Context, Relation
from .egraph import BudgetExceeded
from .snapshot import Snapshot
from .labels.layout import is_movement
from .labels.replicas import equal_leaves

def regroup_sums(snap: Snapshot, exprs: list[Term]) -> list[Term]:
    """§4.3-style help for sums of partial sums: a sum of G_d tensors (``e0 + e1 + s1 + s0``, accumulated
    by G_s in its own order) is also the sum of the G_d tensors that hold parts of it (``A0 = e0 + s0``, a
    rank's gradient). Lemmas reassociate only where a grouping exists next to the terms; this finds the
    groups in any order (sums of distinct tensors of one shape commute). Returns the regrouped sums."""
    flat = [(e, flat_args(e)) for e in exprs if isinstance(e, App) and e.op == SUM]
    flat = [(e, xs) for e, xs in flat if len(xs) > 2 and all(isinstance(x, Leaf) for x in xs)
            and len({x.name for x in xs}) == len(xs)]
    if not flat:
        return []
    groups: dict[frozenset, str] = {}  # the leaves a G_d tensor sums -> that tensor
    for c, nodes in snap.classes.items():
        names = [nd.attrs for nd in nodes if nd.op == "T"]
        if not names or not any(nd.op == SUM for nd in nodes):
            continue
        for v in snap.clean_variants(c):
            xs = flat_args(v) if isinstance(v, App) and v.op == SUM else []
            if len(xs) > 1 and all(isinstance(x, Leaf) for x in xs) and len({x.name for x in xs}) == len(xs):
                groups.setdefault(frozenset(x.name for x in xs), min(names))
    out = []
    for e, xs in flat:
        rest = {x.name for x in xs}
        picked = []
        for part, name in sorted(groups.items(), key=lambda g: (-len(g[0]), g[1])):
            if part <= rest and name not in rest:
                picked.append(name)
                rest -= part
        if picked:
            terms = [Leaf(n) for n in picked] + [x for x in xs if x.name in rest]
            new = terms[0]
            for t in terms[1:]:
                new = App(SUM, (new, t), ())
            if new not in exprs and new not in out:
                out.append(new)
    return out


SUM = "core.sum"


def size_equalities(ctx: Context, snap: Snapshot) -> dict[str, str]:
    """Sizes the data decides (``nonzero``'s row count: a symbol per captured node) are equal where two
    e-nodes of the op have equal operands and other attributes -- equal data, equal size. Returns the
    renaming that gives each such symbol one name (a G_s symbol where there is one)."""
    reg = ctx.egraph.reg
    groups: dict[tuple, list[tuple]] = {}
    for c, nodes in snap.classes.items():
        for nd in nodes:
            op = reg.get(nd.op) if nd.op != "T" else None
            if op is None or not op.data_sizes:
                continue
            sized = {a for a, _ in op.data_sizes}
            attrs = dict(nd.attrs)
            kids = nd.children if op.data_size_args is None else tuple(nd.children[i] for i in op.data_size_args)
            key = (nd.op, kids, tuple((k, x) for k, x in nd.attrs if k not in sized))
            groups.setdefault(key, []).append(tuple(attrs[a] for a, _ in op.data_sizes))
    names: dict[str, str] = {}
    s_syms = ctx.g_s.symbols() if any(len(set(x)) > 1 for x in groups.values()) else set()
    for sizes in groups.values():
        for dims in zip(*sizes):
            syms = sorted({str(d) for d in dims if isinstance(d, S.sp.Symbol)}, key=lambda x: (x not in s_syms, x))
            for other in syms[1:]:  # (a size that is not a bare symbol is not renamed)
                names[other] = syms[0]
    return names


def unify_sizes(ctx: Context, names: dict[str, str], R: Relation) -> None:
    """Give equal data-decided sizes one name in both graphs and in R, and record the equalities (they are
    part of the certificate)."""
    for g in (ctx.g_s, ctx.g_d):
        g.rename_symbols(names)
    for t, exprs in R.items():
        R[t] = [rename_symbols(e, names) for e in exprs]
    ctx.provenance = {(t, rename_symbols(e, names)): by for (t, e), by in ctx.provenance.items()}
    ctx.size_equalities.extend(names.items())


def prune_self_provable(ctx: Context, exprs: list[Term]) -> list[Term]:
    """Drop expressions that the lemmas alone prove equal to a simpler kept one. Only expressions over the
    same G_d tensors are compared (lemmas that drop a tensor, like a slice of a concat, could make
    others equal too: keeping such a pair costs time later, never soundness)."""
    exprs = sorted(exprs, key=lambda e: (size(e), to_text(e)))
    by_leaves: dict[frozenset, int] = {}
    for e in exprs:
        k = frozenset(leaves(e))
        by_leaves[k] = by_leaves.get(k, 0) + 1
    if all(n == 1 for n in by_leaves.values()):
        if len(exprs) > ctx.max_exprs:
            ctx.stats["truncated"] = True
        return exprs[: ctx.max_exprs]
    eg = ctx.egraph
    eg.push()
    try:
        for e in exprs:
            if by_leaves[frozenset(leaves(e))] > 1:
                eg.add(e)
        try:
            snap = eg.saturate(ctx.budget, time.monotonic() + ctx.budget.seconds, {})
        except BudgetExceeded:
            ctx.stats["truncated"] = True
            return exprs[: ctx.max_exprs]
        kept, seen = [], set()
        for e in exprs:
            c = snap.find(e)
            if c is not None and c in seen:
                continue
            seen.add(c)
            kept.append(e)
        if len(kept) > ctx.max_exprs:
            ctx.stats["truncated"] = True
        return kept[: ctx.max_exprs]
    finally:
        eg.pop()


def leaf_aliases(ctx: Context, exprs: list[Term]) -> None:
    """G_d tensors that are expressions of one G_s tensor are equal (a replicated tensor's copies): aliases."""
    names = {e.name for e in exprs if isinstance(e, Leaf)}
    for a in names:
        if len(names) > 1:
            ctx.aliases.setdefault(a, set()).update(names - {a})


def replica_aliases(ctx: Context, R: Relation) -> None:
    """Two data-movement expressions of one G_s tensor over different ranks' copies have equal leaves wherever
    one leaf's entries all land where another's do (:func:`equal_leaves`): ``k = concat(k@0, k@2, dim=0) =
    concat(k@1, k@3, dim=0)`` gives ``k@0 = k@1``, ``k@2 = k@3`` (a KV head replicated on two ranks), however
    differently the two concatenations are nested."""
    reg = ctx.egraph.reg
    for exprs in R.values():
        forms = [e for e in exprs if is_movement(e)]
        for i, e in enumerate(forms):
            for f in forms[i + 1:]:
                le, lf = set(leaves(e)), set(leaves(f))
                if le == lf or {base_name(n) for n in le} != {base_name(n) for n in lf} or \
                        isinstance(e, Leaf) and isinstance(f, Leaf):  # (a replicated tensor's copies: one e-class)
                    continue
                for x, y in equal_leaves(e, f, ctx.g_d.shape, reg):
                    ctx.aliases.setdefault(x, set()).add(y)
                    ctx.aliases.setdefault(y, set()).add(x)
