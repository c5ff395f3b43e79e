"""Iterative relation inference (paper §4): Listings 1, 2 and 3.

``R`` maps each G_s tensor to a list of clean expressions over G_d tensors (several per tensor:
``C = sum(C@0, C@1)`` and ``C = concat(D@0, D@1, dim=0)`` are both kept, because later operators may need
either). For each G_s operator in topological order we build a small e-graph holding the operator
applied to its inputs' expressions (and the G_d definitions of the broadcasts they name), saturate it with
the lemmas, grow it with the G_d operators next to related tensors (the frontier of Listing 3, which stays
within a few operators of them), and keep the clean expressions found for the operator's outputs. An
operator whose problem repeats one solved before (a stacked layer) reuses that result (memo.py).
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

from ..ir import scalar as S
from ..ir.expr import App, Leaf, Term, base_name, flat_args, leaves, rename_symbols, size, substitute, to_text
from ..ir.graph import Graph, Node
from .egraph import Budget, BudgetExceeded, EGraph, Snapshot
from .memo import Memo, Problem
from .relayout import elementwise_outputs, equal_leaves, is_movement, movement_first, products_first, moved_outputs, relayouts, rows_through, sum_outputs, summed_outputs
from .result import Failure, NodeStat, VerifyResult

Relation = dict[str, list[Term]]


@dataclass
class Context:
    g_s: Graph
    g_d: Graph
    egraph: EGraph
    budget: Budget
    max_exprs: int = 0  # expressions kept per tensor; 0: 16 + 4 per rank (replicated tensors have one per rank)
    stats: dict = field(default_factory=dict)
    aliases: dict = field(default_factory=dict)  # G_d tensor -> G_d tensors proven equal to it (same e-class)
    size_equalities: list = field(default_factory=list)  # (symbol, symbol it was proved equal to), in order
    structure: tuple | None = None  # G_d's constants, operators by input, outputs; G_s's outputs (_structure)
    memo: Memo = field(default_factory=Memo)  # per-operator results by local problem
    invertible: frozenset | None = None  # ops through which the frontier relates a class's parents (_invertible_terms)
    index_constants: dict = field(default_factory=dict)  # G_d index tensor -> the constant it is, or None
    ran_out: BudgetExceeded | None = None  # the current operator's search ran out of budget (partial_search)
    reused: bool = False  # the last operator took an earlier operator's result (memo.py)
    progress: object = None  # called (operators done, operators in all, node) after each G_s operator
    partial_from: dict = field(default_factory=dict)  # G_s tensor known only as partial results -> where they began
    scaled_from: dict = field(default_factory=dict)  # G_s tensor known only up to a constant factor -> where it entered

    def __post_init__(self):
        if not self.max_exprs:
            self.max_exprs = 16 + 4 * ((self.g_d.world_size or 1) if self.g_d is not None else 1)


# -- Listing 1 ------------------------------------------------------------------------------------

def compute_out_rel(ctx: Context, r_i: Relation, partial_ok: bool | frozenset[str] = frozenset()) -> VerifyResult:
    """Listing 1: walk G_s in topological order, extending R operator by operator. Every output of G_s
    must end up *held* by G_d (see :func:`is_held`) unless ``partial_ok`` (True, or the outputs named)
    allows it to stay a cross-rank sum or max of the ranks' partial results.

    An operator whose outputs have no clean expression is *deferred* (:class:`Carried`): its outputs are
    carried as terms to their readers, and a failure is reported at the earliest operator whose outputs
    no reader rescued (see :meth:`Carried.report`)."""
    R: Relation = {t: list(exprs) for t, exprs in r_i.items()}
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
                carried.fail(v, _failure(ctx, v, {}, set(), f"a constant computed by more than {MAX_CONSTANT_TERM} "
                                         "operators: too large a term to reason about"), "inconclusive")
                continue
            subst = {t: R[t][0] for t in v.inputs}
            R.update(zip(v.outputs, ([substitute(t, subst)] for t in ctx.g_s.node_terms(v))))
            const_size.update(dict.fromkeys(v.outputs, n))
            continue
        ctx.reused = False
        try:
            r_v, explored = compute_node_out_rel(ctx, v, R)
        except BudgetExceeded as e:
            result.node_stats.append(NodeStat(v.name, v.op, time.monotonic() - t0, 0))
            # (reading a deferred tensor: the failure is where deferring began)
            carried.fail(v, _failure(ctx, v, R, set(), f"search budget exhausted: {e.what}"), "inconclusive")
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
            failure = _failure(ctx, v, R, explored, why)
            if verdict == "does-not-refine" and carried.depth(v) <= MAX_DEFERRED \
                    and not (set(missing) & set(ctx.g_s.outputs)):
                # deferred: the outputs stay the operator applied to its inputs' expressions (exact, not clean)
                # for the operators that read them -- the ranks may compute a fused form (Megatron's
                # x[i] -= y reads x[i], which no rank holds whole); unless a reader rescues them, a failure
                # is reported here
                subst = {t: R[t][0] for t in v.inputs}
                for t in v.inputs:  # (the term names one G_d tensor of each input: the others equal to it are
                    _leaf_aliases(ctx, R[t])  # its aliases, so the readers explore every rank's copy)
                defs = _definitions(ctx, v, R)
                for o, term in zip(v.outputs, ctx.g_s.node_terms(v)):
                    if o in missing:
                        r_v[o] = [substitute(term, subst)] + ([substitute(term, {**subst, **defs})] if defs else [])
                carried.defer(v, missing, failure, verdict)
                R.update(r_v)
                continue
            carried.fail(v, failure, verdict)
            continue
        carried.rescue(v)
        R.update(r_v)
        _track_scaled(v, r_v, scaled_from, order)
        _track_partial(v, r_v, partial_from, order)
        replica_aliases(ctx, r_v)  # equal pieces of two concatenations found for one tensor
    if carried.failed is not None or carried.unrescued():  # (the latter: never, every deferred tensor is read)
        result.failure, result.verdict = carried.report()
        return result
    # Listing 1, line 9: R_o keeps the clean expressions over G_d outputs only (never a deferred term: a
    # deferred tensor is never an output of G_s)
    d_out = set(ctx.g_d.outputs)
    for o in ctx.g_s.outputs:
        exprs = [e for e in R.get(o, []) if set(leaves(e)) <= d_out and next(leaves(e), None) is not None
                 and not _is_scaled(e) and o not in carried.origin]
        if not exprs and o not in carried.origin:  # (its sums over other G_d tensors, carried to the outputs)
            outs = sorted(d_out)
            for e in R.get(o, [])[:4]:
                exprs = summed_outputs(ctx, e, outs, functools.partial(constant_term, ctx))[:2]
                if exprs:
                    break
        if not exprs:
            v = ctx.g_s.producer.get(o)
            known = ", ".join(to_text(e) for e in R.get(o, [])) or "none"
            result.verdict = "does-not-refine"
            if o in scaled_from or any(_is_scaled(e) and set(leaves(e)) <= d_out for e in R.get(o, [])):
                v = scaled_from.get(o, v)  # a factor that G_d never takes back: report where it entered
                result.failure = _failure(ctx, v, R, set(), f"output {o} is known only up to a constant factor "
                                          f"({known}); the factor entered here, at {', '.join(v.outputs)}")
            else:
                result.failure = _failure(ctx, v, R, set(), f"output {o} maps only to tensors that are not outputs "
                                          f"of G_d ({known})", output=o)
            return result
        result.r_o[o] = exprs
    failure = _partial_outputs(ctx, result, R, partial_ok, partial_from, order)
    if failure is not None:
        result.verdict, result.failure = "does-not-refine", failure
        return result
    result.verdict = "refines"
    return result


class Carried:
    """The deferred G_s tensors (outputs of operators without a clean expression, carried to their readers as
    the operator applied to its inputs' expressions) and the failures, for the report of Listing 1.

    Rules: (1) a deferred tensor's *origin* is the operator where deferring began -- the operator itself, or
    the earliest origin of its deferred inputs (origins follow every reader, not only the next one); (2) a reader
    that finds clean expressions for its outputs *rescues* its deferred inputs and, through them, the deferred
    tensors they were computed from; (3) a failure of an operator reading deferred tensors is charged to their
    earliest origin; (4) after the first failure, only the operators that can still rescue a deferred tensor
    of an earlier origin are processed (those reading a failed tensor fail with it); (5) the report names the
    earliest (topological order) of the charged failures and the origins of the deferred tensors not rescued:
    the first operator whose outputs cannot be mapped, deferral or not -- what the walk reports with no
    deferral, unless a reader rescues that operator's outputs."""

    def __init__(self, g_s: Graph, order: dict[str, int]):
        self.g_s, self.order = g_s, order
        self.origin: dict[str, tuple[Failure, str]] = {}  # deferred tensor -> (failure, verdict) at its origin
        self.depth_of: dict[str, int] = {}  # deferred tensor -> operators in a row deferred up to it
        self.parents: dict[str, list[str]] = {}  # deferred tensor -> the deferred inputs it was computed from
        self.rescued: set[str] = set()
        self.failed: tuple[Failure, str] | None = None  # the earliest failure charged so far
        self.poisoned: set[str] = set()  # tensors of failed operators (and of their readers, after a failure)
        self._needed: set[str] | None = None  # operators to process after a failure (None: to compute)

    def _at(self, fv: tuple[Failure, str]) -> int:
        return self.order[fv[0].node]

    def _deferred_inputs(self, v: Node) -> list[str]:
        return [t for t in dict.fromkeys(v.inputs) if t in self.origin]

    def depth(self, v: Node) -> int:
        """The operators in a row deferred if ``v`` is."""
        return 1 + max((self.depth_of[t] for t in self._deferred_inputs(v)), default=0)

    def _charged(self, v: Node, failure: Failure, verdict: str) -> tuple[Failure, str]:
        before = [self.origin[t] for t in self._deferred_inputs(v)]
        return min(before, key=self._at) if before else (failure, verdict)

    def defer(self, v: Node, outputs: list[str], failure: Failure, verdict: str) -> None:
        origin, depth, parents = self._charged(v, failure, verdict), self.depth(v), self._deferred_inputs(v)
        for o in outputs:
            self.origin[o], self.depth_of[o], self.parents[o] = origin, depth, parents
        self._needed = None

    def rescue(self, v: Node) -> None:
        """``v`` found clean expressions for all its outputs: its deferred inputs were right after all."""
        todo = self._deferred_inputs(v)
        while todo:
            t = todo.pop()
            if t not in self.rescued:
                self.rescued.add(t)
                todo.extend(self.parents[t])
                self._needed = None

    def fail(self, v: Node, failure: Failure, verdict: str) -> None:
        charged = self._charged(v, failure, verdict)
        if self.failed is None or self._at(charged) < self._at(self.failed):
            self.failed = charged
        self.poisoned.update(v.outputs)
        self._needed = None

    def unrescued(self) -> list[str]:
        return [t for t in self.origin if t not in self.rescued]

    def _open(self) -> list[str]:
        """Deferred tensors not rescued (yet) whose origin is before the earliest failure: a reader of theirs
        still to process decides whether the report is their origin."""
        return [t for t in self.unrescued() if self._at(self.origin[t]) < self._at(self.failed)]

    def settled(self) -> bool:
        return not self._open()

    def settles(self, v: Node, R: Relation) -> bool:
        """After a failure: whether to process ``v`` -- an operator that may rescue an open deferred tensor
        (a reader, within the deferrals a chain still allows), or one those need; it fails with its inputs'
        failures (and with a skipped input: what it would need was not computed)."""
        if self._needed is None:
            self._needed = self._needed_ops(R)
        if v.name not in self._needed:
            return False
        if any(t in self.poisoned or t not in R for t in v.inputs):
            self.poisoned.update(v.outputs)  # (charged to nothing: the failure it inherits is charged already)
            return False
        return True

    def _needed_ops(self, R: Relation) -> set[str]:
        known = lambda n: all(o in R or o in self.poisoned for o in n.outputs)
        targets, level = [], [(t, self.depth_of[t]) for t in self._open()]
        while level:  # the readers of open tensors, and theirs while they could be deferred again
            nxt = []
            for t, d in level:
                for n in self.g_s.consumers.get(t, ()):
                    if known(n):
                        continue
                    targets.append(n)
                    if d + 1 <= MAX_DEFERRED:
                        nxt.extend((o, d + 1) for o in n.outputs)
            level = nxt
        needed, todo = set(), list(targets)
        while todo:  # ... and the operators computing their inputs
            n = todo.pop()
            if n.name in needed:
                continue
            needed.add(n.name)
            todo.extend(p for t in n.inputs if (p := self.g_s.producer.get(t)) is not None and not known(p))
        return needed

    def report(self) -> tuple[Failure, str]:
        """The earliest of the failures charged and the origins of the deferred tensors no reader rescued."""
        return min([self.failed] * (self.failed is not None) + [self.origin[t] for t in self.unrescued()],
                   key=self._at)


def _definitions(ctx: Context, v: Node, R: Relation) -> dict[str, Term]:
    """For a deferred operator: each input that an operator computed, as that operator's term over its own
    inputs' expressions (the same value as the input's clean expression, which that operator's search proved
    from this very term). A reader then also sees how the input was made -- the one-hot that PyTorch's
    cross-entropy backward scatters, multiplied by the upstream gradient, inside log_softmax's backward, which
    the ranks compute fused."""
    out = {}
    for t in dict.fromkeys(v.inputs):
        n = ctx.g_s.producer.get(t)
        if n is None or any(not R.get(x) for x in n.inputs) or t in ctx.g_s.inputs:
            continue
        term = ctx.g_s.node_terms(n)[n.outputs.index(t)]
        out[t] = substitute(term, {x: R[x][0] for x in n.inputs})
    return out


MAX_DEFERRED = 2  # operators in a row whose outputs are carried as terms to their readers (no clean expression)
MAX_CONSTANT_TERM = 256  # operators in a G_s constant's term (its tree, as every function on terms walks it)


# -- the end of Listing 1: outputs held by G_d ------------------------------------------------------------

# what rebuilds a tensor out of the tensors that hold its pieces: an output built with these alone is *held*
HELD_OPS = frozenset({"core.concat", "core.slice", "core.permute", "core.reshape", "core.identity"})


def is_held(e: Term) -> bool:
    """``e`` rebuilds its tensor by data movement alone from G_d tensors (no cross-rank ``sum``/``max``):
    the ranks hold it, in pieces or whole, rather than partial results that still need a reduction."""
    return isinstance(e, Leaf) or (isinstance(e, App) and e.op in HELD_OPS and all(is_held(a) for a in e.args))


def _track_partial(v: Node, r_v: Relation, partial_from: dict, order: dict[str, int]) -> None:
    """Outputs known only as partial results (no held expression) inherit the earliest operator where
    their inputs' partial results began, or start at ``v``: the operator a report names when they reach
    an output of G_s still partial."""
    for o, exprs in r_v.items():
        if exprs and not any(is_held(e) for e in exprs):
            before = [partial_from[t] for t in v.inputs if t in partial_from]
            partial_from[o] = min(before, key=lambda n: order[n.name]) if before else v


def _partial_outputs(ctx: Context, result: VerifyResult, R: Relation, partial_ok, partial_from: dict,
                     order: dict[str, int]) -> Failure | None:
    """Keep only held expressions in R_o for every output not allowed to stay partial; an output with none
    is left as partial results on the ranks: the failure names the earliest operator where such an output's
    partial results began (the others are listed)."""
    partial = []
    for o, exprs in result.r_o.items():
        if partial_ok is True or o in partial_ok:
            continue
        held = [e for e in exprs if is_held(e)]
        if held:
            result.r_o[o] = held
        else:
            partial.append(o)
    if not partial:
        return None

    def origin(o):
        return partial_from.get(o) or ctx.g_s.producer.get(o)
    first = min(partial, key=lambda o: (order[origin(o).name] if origin(o) is not None else -1, o))
    v = origin(first)
    known = ", ".join(to_text(e) for e in result.r_o[first])
    why = (f"output {first} is left as partial results on the ranks: R_o has only {known}, which no rank holds "
           f"(a missing all-reduce?)")
    why += f"; the partial results began here, at {', '.join(v.outputs)}" if v is not None else ""
    others = [o for o in partial if o != first]
    if others:
        why += f" (also left partial: {', '.join(others)})"
    f = _failure(ctx, v, R, {leaf for e in result.r_o[first] for leaf in leaves(e)}, why, output=first)
    f.partial_output = first
    return f


def _is_scaled(e: Term) -> bool:
    return isinstance(e, App) and e.op == "core.scale"


def _track_scaled(v: Node, r_v: Relation, scaled_from: dict, order: dict[str, int]) -> None:
    """Outputs related only up to a constant factor inherit the earliest operator where their inputs' factor
    began, or start at ``v``: the operator a report names when no G_d operator takes the factor back."""
    for o, exprs in r_v.items():
        if exprs and all(_is_scaled(e) for e in exprs):
            before = [scaled_from[t] for t in v.inputs if t in scaled_from]
            scaled_from[o] = min(before, key=lambda n: order[n.name]) if before else v


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


def _node_out_rel_memo(ctx: Context, v: Node, R: Relation) -> tuple[Relation, set[str]]:
    while True:
        problem = Problem(ctx, v, R, *_structure(ctx), value=functools.partial(index_constant, ctx))
        hit = ctx.memo.lookup(problem, v.outputs)
        ctx.reused = hit is not None
        if hit is not None:
            found, explored, aliases, truncated = hit
            if truncated:
                ctx.stats["truncated"] = True
        else:
            before = ctx.stats.pop("truncated", False)
            try:
                got = _node_out_rel(ctx, v, R)
            finally:  # (also where the search runs out of budget: an earlier truncation stays recorded)
                truncated = ctx.stats.get("truncated", False)
                ctx.stats["truncated"] = before or truncated
            if got is None:
                continue
            found, explored, related, aliases = got
            ctx.memo.store(problem, v.outputs, found, explored, related, aliases, truncated)
        for leaf, same in aliases:
            ctx.aliases.setdefault(leaf, set()).update(same)
        return found, explored


def _node_out_rel(ctx: Context, v: Node, R: Relation) -> tuple[Relation, set[str], set[str], list] | None:
    """One search: (R_v, the G_d tensors explored, those related, the aliases it proved) or None when sizes
    were unified (search again)."""
    quick = _by_labels_first(ctx, v, R)
    if quick is not None:
        return quick
    eg = ctx.egraph
    deadline = time.monotonic() + ctx.budget.seconds
    eg.push()
    try:
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
            return None
        # Step 4: keep the clean expressions
        found, aliases = _clean_outputs(ctx, snap, v, roots)
        missing = [o for o in v.outputs if not found[o] and (o in ctx.g_s.consumers or o in ctx.g_s.outputs)]
        if missing and ctx.ran_out is not None:
            raise ctx.ran_out  # (inconclusive where the budget ran out, not "no clean expression")
        if missing and eg.has_held:
            # none for an output: once more with the lemmas constrained to what a rank holds (exists="tensor":
            # each part of a rank's concatenation is a slice of it), which would only add terms elsewhere
            eg.held = True
            try:
                snap = eg.saturate(ctx.budget, deadline, ctx.stats)
                snap, more = explore_frontier(ctx, snap, roots, t_in, deadline, v.op)  # (from the same start)
                if not size_equalities(ctx, snap):
                    explored |= more
                    t_rel |= t_in
                    found, aliases = _clean_outputs(ctx, snap, v, roots)
                    ctx.stats["held_searches"] = ctx.stats.get("held_searches", 0) + 1
            except BudgetExceeded:  # (the search without them stands)
                ctx.stats["held_budget"] = ctx.stats.get("held_budget", 0) + 1
            finally:
                eg.held = False
        missing = [o for o in v.outputs if not found[o] and (o in ctx.g_s.consumers or o in ctx.g_s.outputs)]
        if missing:
            # none still: an input related in one layout while v's G_d counterparts read another (relayout.py)
            # a last resort, on a smaller budget than the operator's (where a rank's data is missing, the
            # layouts found of what it holds grow the e-graph without finding the rest)
            late = Budget(ctx.budget.iterations, ctx.budget.enodes // 2, ctx.budget.seconds)

            def grow(facts):
                eg.union_all(facts)
                return eg.saturate(late, deadline, ctx.stats)
            const_of, moved = functools.partial(constant_term, ctx), []
            try:
                moved = (moved_outputs(ctx, snap, v, R, explored, grow, const_of)
                         or elementwise_outputs(ctx, snap, v, R, explored, grow, const_of)
                         or sum_outputs(ctx, snap, v, R, explored, grow, const_of))
                eqs = relayouts(ctx, snap, v, R, explored, grow, const_of)
                # (a row-wise operator of rows its counterparts read in another order: through it, on them)
                ins = {x: [t for e, t in eqs if e in R.get(x, ())] + list(R.get(x, ())) for x in v.inputs}
                eqs += moved + rows_through(ctx, v, {**R, **ins})
                if eqs or eg.has_late:  # (the late lemmas carry ops through slices the relation already holds)
                    ctx.stats["relayouts"] = ctx.stats.get("relayouts", 0) + len(eqs)
                    eg.union_all(eqs)
                    eg.late = True  # (with the lemmas for rows of several ranks interleaved)
                    snap2 = eg.saturate(late, deadline, ctx.stats)
                    snap2, more = explore_frontier(ctx, snap2, roots, t_rel, deadline, v.op)
                    if not size_equalities(ctx, snap2):
                        explored |= more
                        found, aliases = _clean_outputs(ctx, snap2, v, roots)
                        # the moved output over the ranks' own outputs is kept, though larger than other clean
                        # forms: its readers on the ranks are what the frontier explores next
                        for _, t in moved:
                            if t not in found[v.outputs[0]]:
                                found[v.outputs[0]].append(t)
            except BudgetExceeded:  # (the search without them stands: a missing output is reported as such)
                ctx.stats["relayout_budget"] = ctx.stats.get("relayout_budget", 0) + 1
                for _, t in moved:  # (an output proven on labels stands without the search's other forms)
                    found[v.outputs[0]].append(t)
                    explored |= set(leaves(t))
            finally:
                eg.late = False
    finally:
        eg.pop()
    if ctx.ran_out is not None:  # (every output found in a search cut short: a later failure is inconclusive)
        ctx.stats["truncated"] = True
        ctx.stats["partial"] = ctx.stats.get("partial", 0) + 1
        ctx.ran_out = None
    # ... only the simplest of each self-provable class (checked without G_d facts or R)
    return {out: prune_self_provable(ctx, exprs) for out, exprs in found.items()}, explored, t_rel, aliases


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


INTERLEAVED = 4  # slices of a concatenation from which it is the ranks' rows interleaved (relayout.chunks)


def _interleaved(t: Term) -> bool:
    """Whether ``t`` holds a concatenation of at least INTERLEAVED slices of two or more tensors: rows of
    several ranks interleaved one by one (relayout.chunks writes them so)."""
    if not isinstance(t, App):
        return False
    if t.op == "core.concat":
        parts = flat_args(t)
        if len(parts) >= INTERLEAVED and all(isinstance(a, App) and a.op == "core.slice" for a in parts) \
                and len({leaf for a in parts for leaf in leaves(a)}) > 1:
            return True
    return any(_interleaved(a) for a in t.args)


def _by_labels_first(ctx: Context, v: Node, R: Relation):
    """Operators the labels answer before the search (the same proof, entry by entry; None where they do not
    and the search runs):
    - a data-movement operator (a transpose, a view) of sharded inputs: its output as the same data over its
      G_d counterparts' outputs (``movement_first``), what the search proves at many times the cost;
    - an elementwise operator one of whose inputs is known only as the ranks' rows interleaved (every
      expression of it :func:`_interleaved`): matched to its G_d counterparts' outputs (``elementwise_outputs``,
      otherwise the search's last resort); the search would distribute the operator over every slice of the
      interleaving and every grouping of it and run out of budget (Megatron's MoE at TP x EP: the
      probabilities' multiply, 50 s -> 0.1 s)."""
    _, _, d_outputs, s_outputs = _structure(ctx)
    const_of = functools.partial(constant_term, ctx)
    exprs, aliases = movement_first(ctx, v, R, const_of)
    if not exprs:  # (a product of views: matched on the pairs of entries it sums)
        exprs = products_first(ctx, v, R, const_of)[:1]
    if exprs and v.outputs[0] in s_outputs and not any(set(leaves(e)) <= d_outputs for e in exprs):
        # (the ranks' partial products: their sum carried to the outputs of the all-reduce that sums them)
        exprs += [t for e in exprs[:2] for t in summed_outputs(ctx, e, sorted(d_outputs), const_of)[:2]]
    # (a G_s output needs an expression over G_d's outputs: where the labels find none, the search runs)
    if not exprs or (v.outputs[0] in s_outputs and not any(set(leaves(e)) <= d_outputs for e in exprs)):
        exprs, aliases = [], []
        if any(R.get(x) and all(_interleaved(e) for e in R[x]) for x in v.inputs) or _other_dialects(ctx, v):
            eqs = elementwise_outputs(ctx, None, v, R, set(), None, const_of)
            exprs = list(dict.fromkeys(t for _, t in eqs))
    if not exprs:
        return None
    ctx.stats["labels_first"] = ctx.stats.get("labels_first", 0) + 1
    explored = {leaf for e in exprs for leaf in leaves(e)}
    return {v.outputs[0]: exprs}, explored, set(explored), aliases


def _other_dialects(ctx: Context, v: Node) -> bool:
    """Is v a selection (``where``) that G_d spells only in another dialect? Its lemmas then state it with every
    operand's broadcast made explicit, each way (family 1220), and the search over them grows with the operands'
    forms (HF's masked scores against XLA's select at Llama-3.2-1B's dims, TP 1: 38 s); its G_d counterpart is
    found on labels instead (``elementwise_outputs``, its other-dialect counterparts by the same lemmas)."""
    op = ctx.egraph.reg.get(v.op)
    if op is None or op.computes != "where" or sorted(op.elementwise) != list(range(len(v.inputs))):
        return False
    return not any(n.op == v.op for n in ctx.g_d.nodes)


def _clean_outputs(ctx: Context, snap: Snapshot, v: Node, roots: list[Term]) -> tuple[Relation, list]:
    """Step 4 of :func:`_node_out_rel`: the clean expressions of v's outputs in ``snap``, and the G_d tensors
    proven equal to those they use."""
    found, aliases = {}, []
    _, _, d_outputs, s_outputs = _structure(ctx)
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
    identical operators is not walked to its end. With ``v`` (the operator's first search) a saturation cut
    short ends the exploration (:func:`partial_search`)."""
    g_d, eg = ctx.g_d, ctx.egraph
    const, watch, _, _ = _structure(ctx)
    hops = dict.fromkeys(t_rel, 0)  # related tensor -> operators since a tensor the relations name
    inside = set(t_rel)  # related to v's inputs (not only to its outputs)
    explored: dict[str, Node] = {}
    while True:
        r_d = [n for t in list(hops) for n in watch.get(t, ()) if n.name not in explored
               and all(i in hops or i in const or index_constant(ctx, i) is not None for i in n.inputs)]
        if not r_d:
            break
        facts = []
        for n in r_d:
            for m in _constants_for(g_d, n, const, explored):
                explored[m.name] = m
                facts.extend((Leaf(out), term) for out, term in zip(m.outputs, g_d.node_terms(m)))
            facts.extend((Leaf(i), index_constant(ctx, i)) for i in n.inputs if i not in hops and i not in const)
        eg.union_all(facts)
        _relate(ctx, explored, hops, inside, const, op)
        snap = partial_search(ctx, eg, ctx.budget, deadline, v, roots)
        if ctx.ran_out is not None:  # (no further: what it found is what there is)
            break
        found = {leaf for root in roots for e in snap.clean_variants(snap.find(root)) for leaf in leaves(e)}
        # beyond the paper's rule: G_d tensors that are sub-results of v's output (descendants of its
        # e-class) are related too -- e.g. partial products whose reduction G_s fused into one op
        found |= snap.leaves_below([snap.find(r) for r in roots], _invertible_terms(ctx))
        if any(hops.get(t) != 0 for t in found):
            hops.update(dict.fromkeys(found, 0))
            _relate(ctx, explored, hops, inside, const, op)
    t_rel.update(hops)
    return snap, {t for n in explored.values() for t in n.outputs}


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
    _, _, d_out, s_out = _structure(ctx)
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


MAX_HOPS = 4  # G_d operators the frontier follows from a related tensor on the observations alone


def index_constant(ctx: Context, t: str) -> Term | None:
    """The constant that an integer or boolean G_d tensor computed from the data provably is, or None: its
    G_d definition (at most ``MAX_INDEX_ANCESTRY`` operators back) saturated with the lemmas on its own,
    and a term without G_d tensors read off its e-class. Megatron's capacity-padded dispatch sorts a mask
    that a top-k over every token makes all ones: each rank's token order is then a constant, as in G_s,
    though no relation names it. Decided once per tensor (index tensors only: masks and orders are what a
    rank derives from its data without carrying it)."""
    memo = ctx.index_constants
    if t in memo:
        return memo[t]
    memo[t] = None
    g_d = ctx.g_d
    info = g_d.tensors.get(t)
    const = _structure(ctx)[0]
    if info is None or t in const or t not in g_d.producer or not _is_index_dtype(info.dtype):
        return None
    nodes, stack, seen = [], [g_d.producer[t]], set()
    while stack:
        m = stack.pop()
        if m.name in seen:
            continue
        seen.add(m.name)
        nodes.append(m)
        if len(nodes) > MAX_INDEX_ANCESTRY:
            return None
        stack.extend(g_d.producer[i] for i in m.inputs if i in g_d.producer)
    eg = ctx.egraph
    eg.push_nested()
    try:
        eg.union_all([(Leaf(o), term) for m in nodes for o, term in zip(m.outputs, g_d.node_terms(m))])
        try:
            snap = eg.saturate(INDEX_BUDGET, time.monotonic() + INDEX_BUDGET.seconds, {})
        except BudgetExceeded:
            return None
        memo[t] = snap.constant_term(snap.find(Leaf(t)))
    finally:
        eg.pop_nested()
    return memo[t]


def constant_term(ctx: Context, t: str, depth: int = 32) -> Term | None:
    """A G_d tensor as a term without G_d tensors: its definition where it is computed from no input (a
    structural constant), else what :func:`index_constant` proves; None if neither."""
    if t not in _structure(ctx)[0]:
        return index_constant(ctx, t)
    n = ctx.g_d.producer.get(t)
    if n is None or depth <= 0:
        return None
    subst = {}
    for i in n.inputs:
        c = constant_term(ctx, i, depth - 1)
        if c is None:
            return None
        subst[i] = c
    return substitute(ctx.g_d.node_terms(n)[n.outputs.index(t)], subst)


def _is_index_dtype(dtype: str) -> bool:
    return dtype in ("bool", "pred") or dtype.startswith(("int", "uint"))


MAX_INDEX_ANCESTRY = 32  # G_d operators an index tensor's definition may take to be read as a constant
INDEX_BUDGET = Budget(iterations=12, enodes=4000, seconds=10.0)


def _relate(ctx: Context, explored: dict[str, Node], hops: dict[str, int], inside: set[str], const: frozenset,
            op: str | None) -> None:
    """Relate the outputs of explored operators by the observations of :func:`explore_frontier`, to a
    fixpoint (a tensor found closer to a named one may bring others within the bound)."""
    changed = True
    while changed:
        changed = False
        for n in explored.values():
            ins = [i for i in n.inputs if i not in const]
            if not ins or not all(i in hops for i in ins):
                continue
            own = n.op == op and all(i in inside for i in ins)
            if not (own or n.op in INVERTIBLE or _scaling(ctx, n, const) or _broadcast(ctx, n, const)):
                continue
            h = 1 + max(hops[i] for i in ins)
            if h > MAX_HOPS:
                continue
            # data movement keeps a tensor's side; v's own operator turns an input-side tensor into a partial
            # result of v's output
            keep_inside = not own and all(i in inside for i in ins)
            for o in n.outputs:
                if hops.get(o, MAX_HOPS + 1) > h:
                    hops[o] = h
                    changed = True
                if keep_inside and o not in inside:
                    inside.add(o)
                    changed = True


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
    ctx.size_equalities.extend(names.items())


def broadcast_definitions(ctx: Context, names: list[str]) -> list[tuple[Term, Term]]:
    """``(b, broadcast(x))`` for each named G_d tensor that a broadcast produces: G_d facts, true whatever R
    says. R relates G_s tensors to G_d *names*, so a G_s tensor kept as copies of a wide broadcast (a rank's q
    heads' RoPE table) would otherwise be opaque where a narrower piece of it is needed (its k head's)."""
    g_d, reg = ctx.g_d, ctx.egraph.reg
    defs = [(n, g_d.producer.get(n)) for n in names]
    return [(Leaf(t), g_d.node_terms(p)[0]) for t, p in defs if p is not None and reg.get(p.op).broadcast]

# all_to_all and split: their outputs, together, hold exactly the data of their inputs (so do the slices
# a backward takes of a concatenation)
INVERTIBLE = frozenset({"core.reshape", "core.permute", "core.identity", "core.concat", "core.all_gather",
                        "core.all_to_all", "core.split", "core.slice"})
INVERTIBLE_TERMS = frozenset({"core.reshape", "core.permute", "core.identity"})


def _invertible_terms(ctx: Context) -> frozenset:
    """The ops through which a class holds the data of its one operand (:data:`INVERTIBLE_TERMS`) or that
    data times a number (``scale``, ``x * c``, ``-x``: a unary op declaring ``scaling``) -- a G_d tensor that
    is a sub-result of v's output up to a constant factor (an all-reduce of ``c x``, taken back by ``/ c``
    after it) is related too."""
    if ctx.invertible is None:
        ctx.invertible = INVERTIBLE_TERMS | {op.name for op in ctx.egraph.reg
                                             if op.arity == 1 and (op.scaling or op.scalar_factor)}
    return ctx.invertible


def _scaling(ctx: Context, n: Node, const: frozenset) -> bool:
    """``x * c`` or ``x / c`` for a constant c (DTensor adds a replicated bias to a partial sum as bias / W), or
    ``-x``: x is the output scaled back, so the output relates to v as much as x does."""
    n_const = sum(i in const for i in n.inputs)
    return ctx.egraph.reg.get(n.op).scaling and len(n.inputs) - n_const == 1 and len(n.inputs) <= 2


def _broadcast(ctx: Context, n: Node, const: frozenset) -> bool:
    """A broadcast of x (``expand``): x is a slice of the output, so the output relates to v as much as x does
    (a micro-batch's share of a stacked loss's gradient is a slice of ``expand(g)``)."""
    return ctx.egraph.reg.get(n.op).broadcast and sum(i not in const for i in n.inputs) == 1


def _structure(ctx: Context) -> tuple[frozenset, dict[str, list[Node]], frozenset, frozenset]:
    """Per G_d, computed once: its constant tensors (computed from no graph input); each non-constant
    operator filed under one of its non-constant inputs, the one read by the fewest operators -- an operator
    whose inputs are all related is found there, and a tensor that many operators read (a replicated weight,
    a shared constant) costs nothing per G_s operator; its outputs, and those of G_s."""
    if ctx.structure is None:
        g_d = ctx.g_d
        const: set[str] = set()
        for n in g_d.topo_order():
            if all(i in const for i in n.inputs):
                const.update(n.outputs)
        watch: dict[str, list[Node]] = {}
        for n in g_d.nodes:
            ins = [i for i in n.inputs if i not in const]
            if ins:
                # (an index tensor last: it may be a constant only a lemma sees, see index_constant)
                pivot = min(ins, key=lambda i: (_is_index_dtype(g_d.tensors[i].dtype), len(g_d.consumers.get(i, ()))))
                watch.setdefault(pivot, []).append(n)
        ctx.structure = (frozenset(const), watch, frozenset(g_d.outputs), frozenset(ctx.g_s.outputs))
    return ctx.structure


def _constants_for(g_d: Graph, n: Node, const: frozenset, explored: dict[str, Node]) -> list[Node]:
    """``n`` after the not yet explored operators that compute its constant inputs (their definitions are G_d
    facts the lemmas may need, e.g. the zeros of a padding)."""
    out, seen, stack = [], set(), [n]
    while stack:
        m = stack.pop()
        if m.name in explored or m.name in seen:
            continue
        seen.add(m.name)
        out.append(m)
        stack.extend(g_d.producer[i] for i in m.inputs if i in const)
    return out[::-1]


# -- §4.3: keep only the simplest expression of each self-provable class -------------------------

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


def _leaf_aliases(ctx: Context, exprs: list[Term]) -> None:
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


# -- helpers --------------------------------------------------------------------------------------

def _input_leaves(v: Node, R: Relation) -> list[str]:
    return list(dict.fromkeys(leaf for t in v.inputs for e in R[t] for leaf in leaves(e)))


def _failure(ctx: Context, v: Node | None, R: Relation, explored: set[str], reason: str,
             output: str | None = None) -> Failure:
    if v is None:  # an output that is a graph input
        return Failure(op="(input)", node=output or "", loc=None, outputs=[output] if output else [],
                       reason=reason, input_relations={}, explored=[])
    return Failure(op=v.op, node=v.name, loc=v.loc, outputs=list(v.outputs), reason=reason,
                   input_relations={t: [to_text(e) for e in R.get(t, [])] for t in dict.fromkeys(v.inputs)},
                   explored=sorted(explored))
