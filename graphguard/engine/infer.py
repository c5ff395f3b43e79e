"""Iterative relation inference (paper §4): Listings 1, 2 and 3, and the provers in the order they are asked.

``R`` maps each G_s tensor to a list of clean expressions over G_d tensors (several per tensor:
``C = sum(C@0, C@1)`` and ``C = concat(D@0, D@1, dim=0)`` are both kept, because later operators may need
either). For each G_s operator in topological order the provers of :data:`PROVERS` are asked in turn: label
proofs that answer some operators outright, then the search -- a small e-graph holding the operator applied to
its inputs' expressions (and the G_d definitions of the broadcasts they name), saturated with the lemmas and
grown with the G_d operators next to related tensors (the frontier of Listing 3, which stays within a few
operators of them) -- keeping the clean expressions found for the operator's outputs. Every fact of R records
the prover that made it (``ctx.provenance``). An operator whose problem repeats one solved before (a stacked
layer) reuses that result (memo.py).
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

from ..ir.expr import Leaf, Term, leaves, substitute, to_text
from ..ir.graph import Node
from .context import Context, Relation
from .deferral import Carried, definitions
from .egraph import Budget, BudgetExceeded, EGraph
from .snapshot import Snapshot
from . import frontier
from .frontier import computes_terms, derived_bound, index_derived, invertible_terms, relate
from .gd_facts import broadcast_definitions, constant_term, constants_for, index_constant, structure
from .labels.provers import (ELEMENTWISE, ELEMENTWISE_FIRST, MOVED, MOVEMENT_FIRST, POLY, PRODUCTS_FIRST, RELAYOUTS,
                             ROWS)
from .labels.sums import summed_outputs
from .memo import Problem
from .outputs import failure_at, is_scaled, partial_outputs, track_partial, track_scaled
from .prover import Fact, Prover, Query, any_op, check_order
from .relations import leaf_aliases, prune_self_provable, regroup_sums, replica_aliases, size_equalities, unify_sizes
from .result import NodeStat, VerifyResult

# -- Listing 1 ------------------------------------------------------------------------------------


def compute_out_rel(ctx: Context, r_i: Relation, partial_ok: bool | frozenset[str] = frozenset()) -> VerifyResult:
    """Listing 1: walk G_s in topological order, extending R operator by operator. Every output of G_s
    must end up *held* by G_d (see :func:`is_held`) unless ``partial_ok`` (True, or the outputs named)
    allows it to stay a cross-rank sum or max of the ranks' partial results.

    An operator whose outputs have no clean expression is *deferred* (:class:`Carried`): its outputs are
    carried as terms to their readers, and a failure is reported at the earliest operator whose outputs
    no reader rescued (see :meth:`Carried.report`). The result's ``provenance`` names the prover of every line
    of R and R_o."""
    result = _walk(ctx, r_i, partial_ok)
    lines = [(t, e) for t, exprs in result.relations.items() for e in exprs]
    lines += [(t, e) for t, exprs in result.r_o.items() for e in exprs]
    result.provenance = {f"{t} = {to_text(e)}": ctx.provenance.get((t, e), "?") for t, e in lines}
    return result


def _walk(ctx: Context, r_i: Relation, partial_ok) -> VerifyResult:
    R: Relation = {t: list(exprs) for t, exprs in r_i.items()}
    _record(ctx, R, "input")
    result = VerifyResult(relations=R, sizes=ctx.size_equalities)
    scaled_from: dict[str, Node] = ctx.scaled_from  # G_s tensor known only up to a constant factor -> where it began
    partial_from: dict[str, Node] = ctx.partial_from  # G_s tensor known only as the ranks' partial results -> where
    order = {n.name: i for i, n in enumerate(ctx.g_s.topo_order())}
    replica_aliases(ctx, R)
    const_size: dict[str, int] = {}  # G_s tensor known as a constant term -> (at most) that term's size
    carried = Carried(ctx.g_s, order)
    topo = ctx.g_s.topo_order()
    for done, v in enumerate(topo):
        if ctx.progress is not None:
            ctx.progress(done, len(topo), v)
        if carried.failed is not None:  # after a failure: only what settles earlier deferrals
            if carried.settled():
                break
            if not carried.settles(v, R):
                continue
        t0 = time.monotonic()
        if all(t in const_size or not list(leaves(R[t][0])) for t in v.inputs):
            # a constant (or an op of constants) is its own definition: nothing of G_d is needed to know it
            n = 1 + sum(const_size.get(t, 1) for t in v.inputs)
            if n > MAX_CONSTANT_TERM:  # (terms are trees: a long or self-reusing computation is too big)
                result.node_stats.append(NodeStat(v.name, v.op, time.monotonic() - t0, 0))
                carried.fail(v, failure_at(ctx, v, {}, set(), f"a constant computed by more than {MAX_CONSTANT_TERM} "
                                           "operators: too large a term to reason about"), "inconclusive")
                continue
            subst = {t: R[t][0] for t in v.inputs}
            R.update(zip(v.outputs, ([substitute(t, subst)] for t in ctx.g_s.node_terms(v))))
            _record(ctx, {o: R[o] for o in v.outputs}, "constant")
            const_size.update(dict.fromkeys(v.outputs, n))
            continue
        ctx.reused = False
        try:
            r_v, explored = compute_node_out_rel(ctx, v, R)
        except BudgetExceeded as e:
            result.node_stats.append(NodeStat(v.name, v.op, time.monotonic() - t0, 0))
            # (reading a deferred tensor: the failure is where deferring began)
            carried.fail(v, failure_at(ctx, v, R, set(), f"search budget exhausted: {e.what}"), "inconclusive")
            continue
        result.node_stats.append(NodeStat(v.name, v.op, time.monotonic() - t0, len(explored), ctx.reused))
        # (an output nothing reads -- the indices of a max whose values alone are used -- constrains nothing)
        missing = [o for o in v.outputs if not r_v.get(o) and (o in ctx.g_s.consumers or o in ctx.g_s.outputs)]
        if missing:
            # a failure after a truncated search could be an artefact of the truncation
            verdict = "inconclusive" if ctx.stats.get("truncated") else "does-not-refine"
            why = f"no clean expression over G_d tensors for {', '.join(missing)}"
            origins = sorted({scaled_from[t].name for t in v.inputs if t in scaled_from})
            if origins:
                why += f" (inputs known only up to a constant factor since {', '.join(origins)})"
            failure = failure_at(ctx, v, R, explored, why)
            if verdict == "does-not-refine" and carried.can_defer(v) and not (set(missing) & set(ctx.g_s.outputs)):
                # deferred: the outputs stay the operator applied to its inputs' expressions (exact, not clean)
                # for the operators that read them -- the ranks may compute a fused form (Megatron's
                # x[i] -= y reads x[i], which no rank holds whole); unless a reader rescues them, a failure
                # is reported here
                subst = {t: R[t][0] for t in v.inputs}
                for t in v.inputs:  # (the term names one G_d tensor of each input: the others equal to it are
                    leaf_aliases(ctx, R[t])  # its aliases, so the readers explore every rank's copy)
                defs = definitions(ctx, v, R)
                for o, term in zip(v.outputs, ctx.g_s.node_terms(v)):
                    if o in missing:
                        r_v[o] = [substitute(term, subst)] + ([substitute(term, {**subst, **defs})] if defs else [])
                        _record(ctx, {o: r_v[o]}, "deferred")
                carried.defer(v, missing, failure, verdict)
                R.update(r_v)
                continue
            carried.fail(v, failure, verdict)
            continue
        carried.rescue(v)
        R.update(r_v)
        track_scaled(v, r_v, scaled_from, order)
        track_partial(v, r_v, partial_from, order)
        replica_aliases(ctx, r_v)  # equal pieces of two concatenations found for one tensor
    if carried.failed is not None or carried.unrescued():  # (the latter: never, every deferred tensor is read)
        result.failure, result.verdict = carried.report()
        return result
    # Listing 1, line 9: R_o keeps the clean expressions over G_d outputs only (never a deferred term: a
    # deferred tensor is never an output of G_s)
    d_out = set(ctx.g_d.outputs)
    for o in ctx.g_s.outputs:
        exprs = [e for e in R.get(o, []) if set(leaves(e)) <= d_out and next(leaves(e), None) is not None
                 and not is_scaled(e) and o not in carried.origin]
        if not exprs and o not in carried.origin:  # (its sums over other G_d tensors, carried to the outputs)
            outs = sorted(d_out)
            for e in R.get(o, [])[:4]:
                exprs = summed_outputs(ctx, e, outs, functools.partial(constant_term, ctx))[:2]
                if exprs:
                    _record(ctx, {o: exprs}, "labels.sums:outputs")
                    break
        if not exprs:
            v = ctx.g_s.producer.get(o)
            known = ", ".join(to_text(e) for e in R.get(o, [])) or "none"
            result.verdict = "does-not-refine"
            if o in scaled_from or any(is_scaled(e) and set(leaves(e)) <= d_out for e in R.get(o, [])):
                v = scaled_from.get(o, v)  # a factor that G_d never takes back: report where it entered
                result.failure = failure_at(ctx, v, R, set(), f"output {o} is known only up to a constant factor "
                                            f"({known}); the factor entered here, at {', '.join(v.outputs)}")
            else:
                result.failure = failure_at(ctx, v, R, set(), f"output {o} maps only to tensors that are not "
                                            f"outputs of G_d ({known})", output=o)
            return result
        result.r_o[o] = exprs
    failure = partial_outputs(ctx, result, R, partial_ok, partial_from, order)
    if failure is not None:
        result.verdict, result.failure = "does-not-refine", failure
        return result
    result.verdict = "refines"
    return result


MAX_CONSTANT_TERM = 256  # operators in a G_s constant's term (its tree, as every function on terms walks it)


def _record(ctx: Context, r: Relation, by: str) -> None:
    """Provenance: each expression of ``r`` made by ``by`` (kept where it is recorded already)."""
    for t, exprs in r.items():
        for e in exprs:
            ctx.provenance.setdefault((t, e), by)


# -- Listing 2 ------------------------------------------------------------------------------------

def compute_node_out_rel(ctx: Context, v: Node, R: Relation) -> tuple[Relation, set[str]]:
    """Listing 2: the clean relation R_v of one G_s operator's outputs (once more whenever sizes that the
    data decides were found equal: under one name, the tensors of those sizes can be merged). A problem met
    before (the same operator on the same relations and the same neighbourhood in G_d, up to tensor names)
    takes the earlier result, renamed (:mod:`graphguard.engine.memo`)."""
    try:
        return _node_out_rel_memo(ctx, v, R)
    except BudgetExceeded:
        narrow = {t: R[t][:NARROW_EXPRS] for t in v.inputs}
        if all(len(narrow[t]) == len(R[t]) for t in v.inputs):
            raise
        # once more from the simplest few expressions of each input: what a search proves from fewer known
        # facts is as true, and a tensor known in many mixed forms (n-way partial sums at TP 4, each rank's
        # term in either of two layouts) can grow the e-graph past its budget where the simple forms suffice
        ctx.stats["narrowed"] = ctx.stats.get("narrowed", 0) + 1
        found, explored = _node_out_rel_memo(ctx, v, {**R, **narrow})
        ctx.stats["truncated"] = True  # (a failure after it is inconclusive: the dropped forms were not searched)
        return found, explored


NARROW_EXPRS = 4  # expressions per input of a retried search (the smallest: R keeps them sorted by size)


class SearchAgain(Exception):
    """Sizes the data decides were found equal and given one name: the operator is searched again."""


def _node_out_rel_memo(ctx: Context, v: Node, R: Relation) -> tuple[Relation, set[str]]:
    while True:
        problem = Problem(ctx, v, R, *structure(ctx), value=functools.partial(index_constant, ctx))
        hit = ctx.memo.lookup(problem, v.outputs)
        ctx.reused = hit is not None
        if hit is not None:
            found, explored, aliases, truncated, by = hit
            if truncated:
                ctx.stats["truncated"] = True
        else:
            before = ctx.stats.pop("truncated", False)
            try:
                found, explored, related, aliases, by = _node_out_rel(ctx, v, R)
            except SearchAgain:
                continue
            finally:  # (also where the search runs out of budget: an earlier truncation stays recorded)
                truncated = ctx.stats.get("truncated", False)
                ctx.stats["truncated"] = before or truncated
            ctx.memo.store(problem, v.outputs, found, explored, related, aliases, truncated, v.name, by)
        for leaf, same in aliases:
            ctx.aliases.setdefault(leaf, set()).update(same)
        for key, prover in by.items():
            ctx.provenance[key] = prover
        return found, explored


# -- the provers, in the order they are asked (the interface: prover.py) --------------------------------------

def _node_out_rel(ctx: Context, v: Node, R: Relation):
    """One operator: (R_v, the G_d tensors explored, those related, the aliases proved, the provenance of each
    expression) from the first prover that answers before the search, else from the searches (each while an
    output has no clean expression). Raises :class:`SearchAgain` where sizes were unified."""
    q = Query(ctx, v, R, const_of=functools.partial(constant_term, ctx))
    facts = _ask_first(q)
    if facts:
        ctx.stats["labels_first"] = ctx.stats.get("labels_first", 0) + 1
        exprs = [f.rhs for f in facts]
        explored = {leaf for e in exprs for leaf in leaves(e)}
        by = {(v.outputs[0], f.rhs): f.by for f in reversed(facts)}
        return {v.outputs[0]: exprs}, explored, set(explored), q.aliases, by
    hits = dict(ctx.stats.get("lemma_hits", {}))
    ctx.egraph.push()
    try:
        for p in PROVERS:  # (the first search always, each later one while an output has no clean expression)
            if p.stage == "search" and (q.search is None or _missing(ctx, v, q.search.found)):
                p.ask(q)
    finally:
        ctx.egraph.pop()
    s = q.search
    if ctx.ran_out is not None:  # (every output found in a search cut short: a later failure is inconclusive)
        ctx.stats["truncated"] = True
        ctx.stats["partial"] = ctx.stats.get("partial", 0) + 1
        ctx.ran_out = None
    # ... only the simplest of each self-provable class (checked without G_d facts or R)
    found = {out: prune_self_provable(ctx, exprs) for out, exprs in s.found.items()}
    searched = s.by + _lemmas_fired(hits, ctx.stats.get("lemma_hits", {}))
    answered = {f.rhs: f.by for f in reversed(s.answers)}
    by = {(o, e): answered.get(e, searched) for o, exprs in found.items() for e in exprs}
    return found, s.explored, s.t_rel, s.aliases, by


def _ask_first(q: Query) -> list[Fact]:
    """The first prover before the search whose facts answer v's output: for an output of G_s, over G_d's outputs
    (a prover's answer carried there through sums where it is not: the ranks' partial products, summed by an
    all-reduce after them), else the search runs."""
    _, _, d_outputs, s_outputs = structure(q.ctx)
    for p in PROVERS:
        if p.stage != "first":
            continue
        q.aliases = []
        facts = p.ask(q)
        over = not facts or q.v.outputs[0] not in s_outputs or any(set(leaves(f.rhs)) <= d_outputs for f in facts)
        if facts and p.to_outputs and not over:
            facts += [Fact(f.lhs, t, "labels.sums:outputs") for f in facts[:2]
                      for t in summed_outputs(q.ctx, f.rhs, sorted(d_outputs), q.const_of)[:2]]
            over = any(set(leaves(f.rhs)) <= d_outputs for f in facts)
        if facts and (over or not p.to_outputs):
            return facts
    q.aliases = []
    return []


def _missing(ctx: Context, v: Node, found: Relation) -> list[str]:
    """v's outputs without a clean expression that something reads (or that G_s outputs)."""
    return [o for o in v.outputs if not found[o] and (o in ctx.g_s.consumers or o in ctx.g_s.outputs)]


def _lemmas_fired(before: dict, after: dict) -> str:
    fired = sorted((k for k, n in after.items() if n > before.get(k, 0)),
                   key=lambda k: (k.rpartition(":")[0], int(k.rpartition(":")[2]) if k.rpartition(":")[2].isdigit()
                                  else 0, k))
    return f" [lemmas {' '.join(fired)}]" if fired else ""


@dataclass
class _Search:
    """What the searches of one operator share, in one e-graph scope."""
    deadline: float
    roots: list
    t_rel: set  # G_d tensors related (input leaves, their aliases, what the frontier reached)
    t_in: set  # those of the inputs alone (where the held search starts)
    snap: Snapshot
    explored: set
    found: Relation
    aliases: list
    by: str = "search"  # the search whose outputs stand
    answers: tuple = ()  # late provers' facts kept as output expressions


def _search(q: Query) -> list[Fact]:
    """Listing 2, steps 1-4: the e-graph of v over its inputs' expressions, saturated with the lemmas and grown
    over the frontier of G_d (Listing 3); v's clean expressions read from it."""
    ctx, v, R, eg = q.ctx, q.v, q.R, q.ctx.egraph
    deadline = time.monotonic() + ctx.budget.seconds
    # Step 1: rewrite_t_to_expr -- each input becomes the e-class of all its known expressions
    subst, equal = {}, []
    for t in v.inputs:
        exprs = R[t]
        subst[t] = exprs[0]
        equal += [(exprs[0], e) for e in exprs[1:]]
    in_leaves = _input_leaves(v, R)
    for leaf in in_leaves:  # equalities proven for earlier operators
        equal += [(Leaf(leaf), Leaf(other)) for other in ctx.aliases.get(leaf, ())]
    for a, b in spanning(equal):
        eg.union(a, b)
    eg.union_all(broadcast_definitions(ctx, in_leaves))
    roots = [substitute(term, subst) for term in ctx.g_s.node_terms(v)]
    for r in roots:
        eg.add(r)
    # Step 2: rewrite_using_lemma
    ctx.ran_out = None
    snap = partial_search(ctx, eg, ctx.budget, deadline, v, roots)
    # Step 3 (Listing 3): rewrite_expr_to_t over the explored frontier of G_d
    t_rel = set(in_leaves)
    t_rel |= {a for leaf in list(t_rel) for a in ctx.aliases.get(leaf, ())}
    t_in = set(t_rel)
    snap, explored = explore_frontier(ctx, snap, roots, t_rel, deadline, v.op, v=v)  # (v: may be cut short)
    names = size_equalities(ctx, snap)
    if names:
        eg.pop()
        try:
            unify_sizes(ctx, names, R)
        finally:
            eg.push()
        raise SearchAgain
    # Step 4: keep the clean expressions
    found, aliases = _clean_outputs(ctx, snap, v, roots)
    q.search = _Search(deadline, roots, t_rel, t_in, snap, explored, found, aliases)
    if _missing(ctx, v, found) and ctx.ran_out is not None:
        raise ctx.ran_out  # (inconclusive where the budget ran out, not "no clean expression")
    return []


def _held_search(q: Query) -> list[Fact]:
    """None for an output: once more with the lemmas constrained to what a rank holds (exists="tensor": each part
    of a rank's concatenation is a slice of it), which would only add terms elsewhere."""
    ctx, v, eg, s = q.ctx, q.v, q.ctx.egraph, q.search
    if not eg.has_held:
        return []
    eg.held = True
    try:
        s.snap = eg.saturate(ctx.budget, s.deadline, ctx.stats)
        s.snap, more = explore_frontier(ctx, s.snap, s.roots, s.t_in, s.deadline, v.op)  # (from the same start)
        if not size_equalities(ctx, s.snap):
            s.explored |= more
            s.t_rel |= s.t_in
            s.found, s.aliases = _clean_outputs(ctx, s.snap, v, s.roots)
            s.by = "search.held"
            ctx.stats["held_searches"] = ctx.stats.get("held_searches", 0) + 1
    except BudgetExceeded:  # (the search without them stands)
        ctx.stats["held_budget"] = ctx.stats.get("held_budget", 0) + 1
    finally:
        eg.held = False
    return []


def _late_search(q: Query) -> list[Fact]:
    """None still: an input related in one layout while v's G_d counterparts read another. The late provers'
    equalities (proven on labels) are added and the search runs once more, with the late lemmas (rows of several
    ranks interleaved) -- a last resort, on a smaller budget than the operator's (where a rank's data is missing,
    the layouts found of what it holds grow the e-graph without finding the rest)."""
    ctx, v, eg, s = q.ctx, q.v, q.ctx.egraph, q.search
    late = Budget(ctx.budget.iterations, ctx.budget.enodes // 2, ctx.budget.seconds)

    def grow(facts):
        eg.union_all(facts)
        return eg.saturate(late, s.deadline, ctx.stats)
    q.snap, q.explored, q.grow, q.facts = s.snap, s.explored, grow, []
    try:
        answered = False
        for p in PROVERS:
            if p.stage == "late" and not (p.answers and answered):
                got = p.ask(q)
                answered |= p.answers and bool(got)
                s.answers += tuple(f for f in got if p.answers)
                q.facts += got
        if q.facts or eg.has_late:  # (the late lemmas carry ops through slices the relation already holds)
            ctx.stats["relayouts"] = ctx.stats.get("relayouts", 0) + len(q.facts)
            eg.union_all([(f.lhs, f.rhs) for f in q.facts])
            eg.late = True  # (with the lemmas for rows of several ranks interleaved)
            snap2 = eg.saturate(late, s.deadline, ctx.stats)
            snap2, more = explore_frontier(ctx, snap2, s.roots, s.t_rel, s.deadline, v.op)
            if not size_equalities(ctx, snap2):
                s.explored |= more
                s.found, s.aliases = _clean_outputs(ctx, snap2, v, s.roots)
                used = sorted({f.by for f in q.facts})
                s.by = f"search.late ({', '.join(used)})" if used else "search.late"
                # the moved output over the ranks' own outputs is kept, though larger than other clean
                # forms: its readers on the ranks are what the frontier explores next
                for f in s.answers:
                    if f.rhs not in s.found[v.outputs[0]]:
                        s.found[v.outputs[0]].append(f.rhs)
    except BudgetExceeded:  # (the search without them stands: a missing output is reported as such)
        ctx.stats["relayout_budget"] = ctx.stats.get("relayout_budget", 0) + 1
        for f in s.answers:  # (an output proven on labels stands without the search's other forms)
            s.found[v.outputs[0]].append(f.rhs)
            s.explored |= set(leaves(f.rhs))
    finally:
        eg.late = False
    return []


SEARCH = Prover("search", "search", any_op, _search, "Listing 2 with Listing 3's frontier: the lemmas' e-graph")
HELD_SEARCH = Prover("search.held", "search", any_op, _held_search, "the search again with the held lemmas")
LATE_SEARCH = Prover("search.late", "search", any_op, _late_search,
                     "the search again with the late provers' equalities and the late lemmas")

# The order, and why:
# - first the label provers that answer an operator outright, each exact on labels and far cheaper than the
#   search where it applies (their ops are disjoint: data movement, bilinear products, elementwise ops); the
#   elementwise one only on interleaved rows or a where in another dialect, where the search would not end;
# - then the search, which every operator gets, and the held search for an output it left without a clean
#   expression (the held lemmas would only add terms elsewhere);
# - last, for what is still missing, the late label provers, asked by the late search in this order: the
#   answering ones (moved, elementwise, poly: the first that answers stands, its facts kept as the output's
#   expressions), then the relayouts of the inputs, then the rows (they read the relayouts' layouts); the late
#   search adds their equalities to the e-graph.
PROVERS: list[Prover] = check_order([
    MOVEMENT_FIRST, PRODUCTS_FIRST, ELEMENTWISE_FIRST,
    SEARCH, HELD_SEARCH,
    MOVED, ELEMENTWISE, POLY, RELAYOUTS, ROWS,
    LATE_SEARCH,
])


def spanning(pairs: list[tuple[Term, Term]]) -> list[tuple[Term, Term]]:
    """The equalities of ``pairs`` not implied by those before them (a union-find over the terms): the replicas
    of a tensor at degree n are n terms related pairwise, n - 1 unions say it all (each union is an egglog
    command)."""
    parent: dict[Term, Term] = {}

    def root(t):
        while (p := parent.get(t, t)) != t:
            parent[t] = t = parent.get(p, p)
        return t
    kept = []
    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[ra] = rb
            kept.append((a, b))
    return kept


def _clean_outputs(ctx: Context, snap: Snapshot, v: Node, roots: list[Term]) -> tuple[Relation, list]:
    """Step 4 of Listing 2: the clean expressions of v's outputs in ``snap``, and the G_d tensors proven equal
    to those they use."""
    found, aliases = {}, []
    _, _, d_outputs, s_outputs = structure(ctx)
    for out, root in zip(v.outputs, roots):
        c = snap.find(root)
        # (failing that: the output up to a constant factor, which a later average may take back)
        exprs = snap.clean_variants(c) or snap.scaled_variants(c)
        exprs += regroup_sums(snap, exprs)
        if out in s_outputs:  # R_o needs expressions over G_d outputs: extract those too
            over_out = snap.clean_variants(c, d_outputs) or snap.scaled_variants(c, d_outputs)
            exprs += [e for e in over_out if e not in exprs]
        found[out] = exprs
        for e in exprs:  # remember which G_d tensors are equal to the ones kept
            for leaf in leaves(e):
                same = {nd.attrs for nd in snap.classes.get(snap.find(Leaf(leaf)), ()) if nd.op == "T"}
                # (not e's other operands: equal ones are shares, sum(x/2@0, x/2@1), which must stay a sum
                # of two values for the operators that use it)
                same -= set(leaves(e))
                if same:
                    aliases.append((leaf, same))
    return found, aliases


def _input_leaves(v: Node, R: Relation) -> list[str]:
    return list(dict.fromkeys(leaf for t in v.inputs for e in R[t] for leaf in leaves(e)))


# -- Listing 3 ------------------------------------------------------------------------------------

def explore_frontier(ctx: Context, snap: Snapshot, roots: list[Term], t_rel: set[str], deadline: float,
                     op: str | None = None, v: Node | None = None):
    """Listing 3: add the G_d operators whose inputs are all related tensors (constants relate to everything),
    one step at a time, until nothing new is reachable.

    Related are: the tensors of the input relations (``t_rel``) and of the clean expressions found for v's
    outputs (the paper's rule), and -- within ``MAX_HOPS`` operators of those -- outputs of operators whose
    input is a clean function of their output (data movement, broadcasts, scaling by a constant: observation (i)
    carries over), and outputs of v's own operator applied to tensors related to v's *inputs* (a rank's partial
    result of v: DTensor adds a replicated bias before the all-reduce). The bound and the last rule keep the search
    local: the same operator applied again to v's *output* is the next G_s operator's business, so a chain of
    identical operators is not walked to its end (frontier.py). For an operator declaring an invariance under a
    term the ranks compute from what they hold (a softmax's shift), the operators computing from related tensors
    only are followed too, within ``frontier.MAX_DERIVED`` of them (frontier.derived_bound; elsewhere none:
    Listing 3 as it is). Masks and shifted ids a rank computes from related tensors are followed for every
    operator, within ``frontier.MAX_INDEX_DERIVED`` operators, and count as constants do for their readers
    (frontier.index_derived). With ``v`` (the operator's first search) a
    saturation cut short ends the exploration (:func:`partial_search`)."""
    g_d, eg = ctx.g_d, ctx.egraph
    const, watch, _, _ = structure(ctx)
    hops = dict.fromkeys(t_rel, 0)  # related tensor -> operators since a tensor the relations name
    inside = set(t_rel)  # related to v's inputs (not only to its outputs)
    explored: dict[str, Node] = {}
    bound = derived_bound(ctx, op)  # (0: Listing 3 as it is)
    derived: dict[str, int] = {}  # G_d tensor computed from related ones only -> operators since them
    masks: dict[str, int] = {}  # index tensor (mask, shifted ids) computed from related ones -> operators since
    while True:
        known = const | frozenset(masks)
        r_d, seen = [], set()
        for n in (n for t in [*hops, *derived, *masks] for n in watch.get(t, ())):
            if n.name in explored or n.name in seen or not all(
                    i in hops or i in derived or i in known or index_constant(ctx, i) is not None for i in n.inputs):
                continue
            depth = _depth(n, hops, derived)
            d = 1 + max((masks.get(i, 0) for i in n.inputs), default=0)
            if depth == 0 and d <= frontier.MAX_INDEX_DERIVED and index_derived(ctx, n):  # (inputs related, constant, masks)
                masks.update((o, d) for o in n.outputs if o not in hops)  # (frontier.index_derived)
            elif depth > bound:
                continue
            r_d.append(n)
            seen.add(n.name)
        if not r_d:
            break
        facts = []
        for n in r_d:
            for m in constants_for(g_d, n, const, explored):
                explored[m.name] = m
                facts.extend((Leaf(out), term) for out, term in zip(m.outputs, g_d.node_terms(m)))
            facts.extend((Leaf(i), index_constant(ctx, i)) for i in n.inputs
                         if i not in hops and i not in const and i not in derived and i not in masks)
        eg.union_all(facts)
        if bound:
            for n in r_d:
                if computes_terms(ctx, n):
                    derived.update((o, max(1, _depth(n, hops, derived))) for o in n.outputs if o not in hops)
        relate(ctx, explored, hops, inside, const | frozenset(masks), op, derived if bound else None)
        snap = partial_search(ctx, eg, ctx.budget, deadline, v, roots)
        if ctx.ran_out is not None:  # (no further: what it found is what there is)
            break
        found = {leaf for root in roots for e in snap.clean_variants(snap.find(root)) for leaf in leaves(e)}
        # beyond the paper's rule: G_d tensors that are sub-results of v's output (descendants of its
        # e-class) are related too -- e.g. partial products whose reduction G_s fused into one op
        found |= snap.leaves_below([snap.find(r) for r in roots], invertible_terms(ctx))
        if any(hops.get(t) != 0 for t in found):
            hops.update(dict.fromkeys(found, 0))
            relate(ctx, explored, hops, inside, const | frozenset(masks), op, derived if bound else None)
    t_rel.update(hops)
    return snap, {t for n in explored.values() for t in n.outputs}


def _depth(n: Node, hops: dict[str, int], derived: dict[str, int]) -> int:
    """The operators from related tensors to ``n`` through derived ones (0: every input related or constant)."""
    return max((1 + derived[i] for i in n.inputs if i in derived and i not in hops), default=0)


def partial_search(ctx: Context, eg: EGraph, budget: Budget, deadline: float, v: Node | None,
                   roots: list[Term]) -> Snapshot:
    """Saturate -- for G_s operator ``v``'s first search (else plainly): where the budget runs out, or where
    a large e-graph already holds a clean expression for each of v's outputs (over G_d outputs for an output
    of G_s), the e-graph as it stands (its equalities are proven, only not all of them) with ``ctx.ran_out``
    set: v's outputs are read from it, and without a clean expression for each v is inconclusive. A search
    whose answer appears early (an n-way partial sum regrouped at TP 8) is not lost to the reassociations
    that go on growing the e-graph."""
    if v is None:
        return eg.saturate(budget, deadline, ctx.stats)
    if ctx.ran_out is not None:
        return ctx.ran_out.snapshot
    _, _, d_out, s_out = structure(ctx)
    needed = [(r, o in s_out) for o, r in zip(v.outputs, roots) if o in ctx.g_s.consumers or o in s_out]

    def answered(snap: Snapshot) -> bool:
        return all(snap.clean_variants(snap.find(r), d_out if out else None) for r, out in needed)
    try:
        return eg.saturate(budget, deadline, ctx.stats, goal=answered)
    except BudgetExceeded as e:
        if e.snapshot is None:
            raise
        ctx.ran_out = e
        return e.snapshot
