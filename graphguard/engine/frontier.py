"""The observations of Listing 3 that relate a G_d tensor to v without a clean expression yet: outputs of data
movement, broadcasts and scaling by a constant of related tensors (their input is a clean function of their
output), and v's own operator applied to tensors related to v's inputs (a rank's partial result), within
``MAX_HOPS`` operators; and, for a G_s operator whose declared invariance holds whatever term the ranks
computed it with (a softmax's shift: any row term), the operators computing such terms from related tensors
(:func:`derived_bound`)."""
from __future__ import annotations

from ..ir.graph import Node
from .context import Context

MAX_HOPS = 4  # G_d operators the frontier follows from a related tensor on the observations alone
MAX_DERIVED = 4  # G_d operators the frontier follows from related tensors where v's invariance reads their results
MAX_UNFOLDED = 12  # ... where v unfolds into reductions the ranks compute (a layer norm: sum, all-reduce, / n, -,
# ** 2, sum, all-reduce, / n, + eps, rsqrt: each reduction, collective and scalar op of its expression one operator)
MAX_INDEX_DERIVED = 6  # G_d operators from related tensors to a mask or index a rank computes from them (index_derived)


def relate(ctx: Context, explored: dict[str, Node], hops: dict[str, int], inside: set[str], const: frozenset,
            op: str | None, derived: dict[str, int] | None = None) -> None:
    """Relate the outputs of explored operators by the observations of :func:`explore_frontier`, to a
    fixpoint (a tensor found closer to a named one may bring others within the bound). With ``derived`` (the
    tensors computed from related ones only, :func:`derived_bound`): ``x - c`` and ``x + c`` of a related x and
    such a c broadcast along x (a row term: a shift) too -- x is the output less c, computed alike."""
    changed = True
    while changed:
        changed = False
        for n in explored.values():
            ins = [i for i in n.inputs if i not in const]
            shifted = derived is not None and _shift(ctx, n, hops, derived, const)
            if shifted:
                ins = [shifted]
            if not ins or not all(i in hops for i in ins):
                continue
            own = (n.op == op or partial_reduction(ctx, n.op, op)) and all(i in inside for i in ins)
            if not (own or shifted or n.op in INVERTIBLE or _scaling(ctx, n, const) or _broadcast(ctx, n, const)):
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


def partial_reduction(ctx: Context, n_op: str, op: str | None) -> bool:
    """Whether G_d op ``n_op`` reduces as G_s op ``op`` does, over some dims (one dialect, parts combined by one
    op: ``x.sum(1)`` for ``x.sum()``): its output is a partial result of v's, as v's own operator's is (family 1229
    takes the rest of the reduction)."""
    from .families import combined_by
    reg = ctx.egraph.reg
    a, b = reg.get(n_op), reg.get(op) if op else None
    if a is None or b is None or a.name.split(".")[0] != b.name.split(".")[0]:
        return False
    comb = combined_by(a, reg)
    return comb is not None and comb == combined_by(b, reg)


INVERTIBLE = frozenset({"core.reshape", "core.permute", "core.identity", "core.concat", "core.all_gather",
                        "core.all_to_all", "core.split", "core.slice"})
# (core.convert: the exact conversion a relation states, relation.exact_conversions -- a G_d input built as the
# widening of a new narrower one, which it holds exactly)
INVERTIBLE_TERMS = frozenset({"core.reshape", "core.permute", "core.identity", "core.convert"})


def invertible_terms(ctx: Context) -> frozenset:
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


def derived_bound(ctx: Context, op: str | None) -> int:
    """How many G_d operators the frontier follows from related tensors when they read no other (:data:`MAX_DERIVED`;
    :data:`MAX_UNFOLDED` for an op that unfolds) for G_s operator ``op`` -- where ``op`` declares an invariance under a term the ranks may compute any way
    from what they hold (``shift_invariant``: softmax(x - c) = softmax(x) for any row term c, a mean, a max
    all-reduced with sum, none), whose G_d form has no G_s counterpart to relate it by, or where ``op`` (one of
    its outputs) ``unfolds`` into an expression of such terms (a variance, a layer norm: the ranks' sums,
    all-reduced); 0 elsewhere (the search stays local: every other operator's frontier is as Listing 3 has it)."""
    reg = ctx.egraph.reg
    ops = [o for o in [reg.get(op)] if o is not None] if op else []
    while ops and reg.get(f"{op}#{len(ops) - 1}") is not None:  # (a multi-output op's outputs: op#0, op#1...)
        ops.append(reg.get(f"{op}#{len(ops) - 1}"))
    if any(o.unfolds for o in ops):
        return MAX_UNFOLDED
    return MAX_DERIVED if any(o.shift_invariant for o in ops) else 0


def computes_terms(ctx: Context, n: Node) -> bool:
    """Whether ``n``'s outputs count as computed from its inputs for :func:`derived_bound`: an elementwise op, a
    reduction or a collective (a shift's max, mean or sum, all-reduced; a written-out softmax's exp, row sum and
    quotient) -- not data movement, indexing or scattering, whose readers Listing 3 relates by its own rules."""
    o = ctx.egraph.reg.get(n.op)
    return o is not None and bool(o.elementwise or o.reduction is not None or o.collective)


def _shift(ctx: Context, n: Node, hops: dict[str, int], derived: dict[str, int], const: frozenset) -> str:
    """The related operand x of ``n`` where n is ``x - c`` or ``x + c`` (an op computing sub or add) of a c
    derived from related tensors (or related, or constant) and broadcast along x -- fewer entries, x's shape after
    broadcasting; else ''."""
    if len(n.inputs) != 2 or len(n.outputs) != 1:
        return ""
    o = ctx.egraph.reg.get(n.op)
    fns = set(o.computes) if o is not None and isinstance(o.computes, dict) else {getattr(o, "computes", "")}
    if not fns & {"sub", "add"} or (isinstance(o.computes, dict) and any(
            n.attrs.get(k) != v for fn in fns & {"sub", "add"} for k, v in o.computes[fn].items())):
        return ""  # (under the attribute values that make it x - c or x + c: alpha 1)
    shape = ctx.g_d.tensors
    a, b = n.inputs
    for x, c in [(a, b), (b, a)] if "add" in fns else [(a, b)]:
        if x in hops and (c in derived or c in const or c in hops):
            xs, cs = tuple(shape[x].shape), tuple(shape[c].shape)
            if tuple(shape[n.outputs[0]].shape) == xs and len(cs) <= len(xs) and _row_term(xs, cs):
                return x
    return ""


def _row_term(xs: tuple, cs: tuple) -> bool:
    """c (shape ``cs``) broadcasts to x's shape ``xs`` and is 1 on a dim where x is not: a term constant along it."""
    cs = (1,) * (len(xs) - len(cs)) + cs
    return all(c == 1 or c == x for c, x in zip(cs, xs)) and any(c == 1 and x != 1 for c, x in zip(cs, xs))


def index_derived(ctx: Context, n: Node) -> bool:
    """Whether ``n`` computes index tensors only (integer or boolean: masks, shifted ids, positions). A rank
    derives such masks from the data it holds (a vocabulary shard's ``ids < s | ids >= e``) and reads them beside
    the data; the frontier follows those computed from related tensors within :data:`MAX_INDEX_DERIVED` operators,
    and treats them as it treats constants (operands that do not make a reader's output unrelated), so the rank's
    masked pick of a shard a split lemma names (core.masked_pick(x@r, t, start=s, end=e)) is reached however its
    mask is spelt. Exploration only adds G_d definitions to the e-graph: what it relates is still proven by the
    lemmas."""
    from .gd_facts import is_index_dtype
    return bool(n.outputs) and all(is_index_dtype(ctx.g_d.tensors[o].dtype) for o in n.outputs)
