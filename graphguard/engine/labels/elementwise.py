"""Elementwise operators on labels: an output entry of an elementwise op is f of its inputs' entries at that
position, so v's output entry whose inputs carry labels (a, b, ...) is the entry of any G_d counterpart (the
same op, or another dialect's spelling a lemma equates) whose inputs carry the same labels.
"""
from __future__ import annotations

import numpy as np

from ...ir.expr import AConst, App, Leaf, PVar, Term, app
from ...ir.graph import Node
from .counterparts import MAX_COUNTERPARTS, counterparts, named_first
from .layout import concrete, solve
from .propagate import Propagated, labelled_inputs


MAX_ELEMENTWISE = 1 << 19  # output entries of one elementwise problem (Llama-3.2-1B's logits: 256k)


def elementwise_outputs(ctx, snap, v: Node, R: dict, explored: set[str], grow, const_of) -> list[tuple[Term, Term]]:
    """Equalities for the output of an elementwise G_s operator (``OpDef.elementwise`` on every input, NumPy
    broadcasting allowed) whose inputs are each related as data movement, possibly in different layouts (an
    expert's activations as the ranks' column halves, its routing weights as rows an all-to-all delivered).
    Every entry of the relation's G_d tensors is labelled and the labels carried through G_d's definitions
    (:class:`Propagated`) to the inputs of v's G_d counterparts (same op and attributes, same dtypes). An
    output entry of v whose input entries carry the labels (a, b, ...) is f(a, b, ...); so is each entry of a
    counterpart's output whose input entries carry the same labels. Where every output entry of v finds one,
    v's output is that data movement of the counterparts' outputs (``solve`` on fresh labels). The G_s side is
    v's op applied to the inputs' relations (congruent to v's output)."""
    op = ctx.egraph.reg.get(v.op)
    g_s, g_d = ctx.g_s, ctx.g_d
    if (op is None or len(v.outputs) != 1 or not v.inputs
            or sorted(op.elementwise) != list(range(len(v.inputs)))):
        return []
    const_labels: dict = {}
    got = labelled_inputs(ctx, v, R, MAX_ELEMENTWISE, const_of=const_of, const_labels=const_labels)
    if got is None:
        return []
    out_shape, rels, lab, ev = got
    try:
        xs = [np.broadcast_to(a, out_shape) for a in ev]
    except ValueError:
        return []
    dtypes = [g_s.tensors[x].dtype for x in v.inputs] + [g_s.tensors[v.outputs[0]].dtype]
    attrs = dict(v.attrs)
    nodes = [(n, n.inputs) for ns in named_first(counterparts(g_d, v), v) for n in ns
             if dict(n.attrs) == attrs and [g_d.tensors[t].dtype for t in n.inputs + n.outputs] == dtypes]
    nodes += [(n, reads) for n, reads in _renamed_counterparts(ctx, v, dtypes)
              if (n, reads) not in nodes]
    prop = Propagated(ctx, lab, const_of, const_labels)
    where: dict[tuple, tuple[int, int]] = {}  # input labels -> (counterpart, flat output index)
    used, ys, base = [], [], 0
    for n, reads in nodes:
        if len(used) >= MAX_COUNTERPARTS:
            break
        z = concrete(g_d.shape(n.outputs[0]))
        ins = [prop.get(t) for t in reads]
        if z is None or any(a is None for a in ins):
            continue
        try:
            ins = [np.broadcast_to(a, z).reshape(-1) for a in ins]
        except ValueError:
            continue
        size = int(np.prod(z, dtype=np.int64))
        if base + size > MAX_ELEMENTWISE * 4:
            break
        k = len(used)
        for q, key in enumerate(zip(*ins)):
            where.setdefault(key, (k, q))
        used.append(n)
        ys.append(np.arange(base, base + size, dtype=np.int64).reshape(z))
        base += size
    if not used:
        return []
    flat = [a.reshape(-1) for a in xs]
    got = np.empty(len(flat[0]), dtype=np.int64)
    hits = set()
    for p, key in enumerate(zip(*flat)):
        hit = where.get(key)
        if hit is None:
            return []
        got[p] = ys[hit[0]].reshape(-1)[hit[1]]
        hits.add(hit[0])
    lhs = app(v.op, *rels, **attrs)
    keep = sorted(hits)  # (the counterparts x reads: a replica's copy on another rank computes the same entries)
    used, ys = [used[k] for k in keep], [ys[k] for k in keep]
    terms = solve(got.reshape(out_shape), ys, [Leaf(n.outputs[0]) for n in used], [tuple(y.shape) for y in ys])
    return [(lhs, t) for t in terms]


def _renamed_counterparts(ctx, v: Node, dtypes: list) -> list[tuple[Node, list[str]]]:
    """G_d counterparts of another dialect's op or expression that a lemma says computes the same function: a
    rule ``f(?a, ?b, attrs) => g(?a, ?b, attrs')`` -- distinct variables, constant attributes
    (``aten.mul.Tensor(?a, ?b) => hlo.multiply(?a, ?b)``, aten-hlo 836) -- or ``f(?x) => e`` with ``e`` an
    expression of elementwise ops over f's variables (``aten.silu(?x) => hlo.multiply(?x, hlo.logistic(?x))``,
    family 1222), each found spelt out in G_d's definitions (every op of ``e`` the producer of the tensor read
    there, attributes equal) and the condition holding on the tensors bound: there ``f`` and ``e`` agree (the
    lemma, fuzzed), and every op of both is elementwise, so each output entry of the G_d node is f of the
    bound tensors' entries at that position, as :func:`elementwise_outputs` needs. (node, the tensors bound to
    f's operands) each."""
    from ..lemma import EvalContext, check_condition
    g_d, out, reg = ctx.g_d, [], ctx.egraph.reg
    attrs = dict(v.attrs)

    def elementwise(p, bound: dict) -> bool:  # every op of the pattern elementwise in all its operands,
        if isinstance(p, PVar):  # attributes constants or the lhs's
            return True
        op = reg.get(p.op) if isinstance(p, App) else None
        return (op is not None and sorted(op.elementwise) == list(range(len(p.args)))
                and all(isinstance(x, AConst) or isinstance(x, PVar) and x.name in bound for _, x in p.attrs)
                and all(elementwise(a, bound) for a in p.args))

    def match(p, t: str, env: dict, bound: dict) -> bool:
        if isinstance(p, PVar):
            return env.setdefault(p.name, t) == t
        n = g_d.producer.get(t)
        return (n is not None and n.op == p.op and len(n.outputs) == 1 and len(n.inputs) == len(p.args)
                and dict(n.attrs) == {k: x.value if isinstance(x, AConst) else bound[x.name] for k, x in p.attrs}
                and all(match(a, u, env, bound) for a, u in zip(p.args, n.inputs)))

    for r in getattr(ctx.egraph, "rules", ()):
        lhs, rhs = r.lhs, r.rhs
        if not isinstance(lhs, App) or not isinstance(rhs, App) or lhs.op != v.op or rhs.op == v.op:
            continue
        if len(lhs.args) != len(v.inputs) or not all(isinstance(a, PVar) for a in lhs.args) or \
                len({a.name for a in lhs.args}) != len(lhs.args):
            continue
        bound = {x.name: attrs.get(k) for k, x in lhs.attrs if isinstance(x, PVar)}  # (attribute variables: v's)
        if set(attrs) != {k for k, _ in lhs.attrs} or any(
                not (isinstance(x, PVar) or isinstance(x, AConst) and x.value == attrs[k]) for k, x in lhs.attrs):
            continue
        if not elementwise(rhs, bound) or {a.name for a in _pattern_vars(rhs)} != {a.name for a in lhs.args}:
            continue
        ec = EvalContext(lambda leaf: g_d.shape(leaf.name), ctx.egraph.cx, ctx.egraph.reg.functions,
                         lambda leaf: g_d.tensors[leaf.name].dtype)
        for n in g_d.nodes:
            if n.op != rhs.op or len(n.outputs) != 1 or g_d.tensors[n.outputs[0]].dtype != dtypes[-1]:
                continue
            env: dict = {}
            if not match(rhs, n.outputs[0], env, bound):
                continue
            reads = [env[a.name] for a in lhs.args]
            if [g_d.tensors[t].dtype for t in reads] != dtypes[:-1]:
                continue
            if check_condition(r, {**bound, **{a.name: Leaf(t) for a, t in zip(lhs.args, reads)}}, ec):
                out.append((n, reads))
    return list({(n.outputs[0], tuple(reads)): (n, reads) for n, reads in out}.values())  # (two rules, one node)


def _pattern_vars(p) -> list:
    """The tensor variables of a rule's side."""
    if isinstance(p, PVar):
        return [p]
    return [x for a in getattr(p, "args", ()) for x in _pattern_vars(a)]
