"""The end of Listing 1: an output of G_s must be *held* by G_d (rebuilt by data movement from G_d tensors), not
left as the ranks' partial results or known only up to a constant factor; where such forms began is tracked
operator by operator so that a report names it. Also the failure record of an operator (:func:`failure_at`)."""
from __future__ import annotations

from ..ir.expr import App, Leaf, Term, leaves, to_text
from ..ir.graph import Node
from .context import Context, Relation
from .result import Failure, VerifyResult


# what rebuilds a tensor out of the tensors that hold its pieces: an output built with these alone is *held*
HELD_OPS = frozenset({"core.concat", "core.slice", "core.permute", "core.reshape", "core.identity"})


def is_held(e: Term) -> bool:
    """``e`` rebuilds its tensor by data movement alone from G_d tensors (no cross-rank ``sum``/``max``):
    the ranks hold it, in pieces or whole, rather than partial results that still need a reduction."""
    return isinstance(e, Leaf) or (isinstance(e, App) and e.op in HELD_OPS and all(is_held(a) for a in e.args))


def track_partial(v: Node, r_v: Relation, partial_from: dict, order: dict[str, int]) -> None:
    """Outputs known only as partial results (no held expression) inherit the earliest operator where
    their inputs' partial results began, or start at ``v``: the operator a report names when they reach
    an output of G_s still partial."""
    for o, exprs in r_v.items():
        if exprs and not any(is_held(e) for e in exprs):
            before = [partial_from[t] for t in v.inputs if t in partial_from]
            partial_from[o] = min(before, key=lambda n: order[n.name]) if before else v


def partial_outputs(ctx: Context, result: VerifyResult, R: Relation, partial_ok, partial_from: dict,
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
    f = failure_at(ctx, v, R, {leaf for e in result.r_o[first] for leaf in leaves(e)}, why, output=first)
    f.partial_output = first
    return f


def is_scaled(e: Term) -> bool:
    return isinstance(e, App) and e.op == "core.scale"


def track_scaled(v: Node, r_v: Relation, scaled_from: dict, order: dict[str, int]) -> None:
    """Outputs related only up to a constant factor inherit the earliest operator where their inputs' factor
    began, or start at ``v``: the operator a report names when no G_d operator takes the factor back."""
    for o, exprs in r_v.items():
        if exprs and all(is_scaled(e) for e in exprs):
            before = [scaled_from[t] for t in v.inputs if t in scaled_from]
            scaled_from[o] = min(before, key=lambda n: order[n.name]) if before else v


def failure_at(ctx: Context, v: Node | None, R: Relation, explored: set[str], reason: str,
             output: str | None = None) -> Failure:
    if v is None:  # an output that is a graph input
        return Failure(op="(input)", node=output or "", loc=None, outputs=[output] if output else [],
                       reason=reason, input_relations={}, explored=[])
    return Failure(op=v.op, node=v.name, loc=v.loc, outputs=list(v.outputs), reason=reason,
                   input_relations={t: [to_text(e) for e in R.get(t, [])] for t in dict.fromkeys(v.inputs)},
                   explored=sorted(explored))
