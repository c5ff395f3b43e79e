"""An expression an op declares it computes (:attr:`OpDef.fuses`), spelt out op by op, collapsed into that op."""
from __future__ import annotations

from ..ir import scalar as S
from ..ir.graph import Graph
from ..ir.ops import Registry


def fuse_expressions(g: Graph, reg: Registry, cx: S.Constraints, ops: set[str] | None = None,
                     other: Graph | None = None) -> int:
    """Collapse every expression an op declares it computes (:attr:`OpDef.fuses`; family 1218 states the
    identity, fuzzed) into one node of that op, where the graph spells it out op by op and its intermediate
    tensors are read only inside it (no graph output): HF's RMSNorm -- ``pow``, ``mean``, ``add``, ``rsqrt``,
    ``mul``, ``_to_copy``, ``mul`` -- is one ``aten.hf_rms_norm`` beside the kernel another program calls. Only
    the ops named in ``ops`` (default: every declaring op); with ``other`` (the program it is compared with), only
    expressions whose ops ``other`` does not all call (two HF programs keep theirs: their operators meet one by
    one, and a failure names the one). The number of expressions collapsed."""
    from ..engine.families import fused_expression
    from ..engine.lemma import EvalContext, build_rules, check_condition, match_attrs, term_ops
    from ..ir.expr import App, Leaf, PVar
    from ..ir.lemma import Lemma
    fusers = [op for op in reg if op.fuses and (ops is None or op.name in ops)]
    if not fusers:
        return 0
    rules, canonical = [], set()
    there = {n.op for n in other.nodes} if other is not None else None
    for op in fusers:
        several = len(op.spellings()) > 1 or not isinstance(op.fuses[0], str)
        for rule_text, cond, when, *_ in fused_expression(op, reg):
            built = build_rules(Lemma(1218, f"fused-expression[{op.name}]", rule_text, cond, "root", op.source,
                                      pack=op.source), reg)
            if several:  # a canonical op (several spellings): its every spelling, in both programs
                canonical |= {id(r) for r in built}
            elif there is not None:
                built = [r for r in built if not term_ops(r.lhs, set()) <= there]
            rules += built
    outputs = set(g.outputs)
    changed = 0

    def gmatch(p, t: str, env: dict, inside: set) -> bool:
        """Pattern ``p`` against the computation of tensor ``t`` (variables bind tensors and attribute values)."""
        if isinstance(p, PVar):
            if p.name in env:
                return env[p.name] == Leaf(t)
            env[p.name] = Leaf(t)
            return True
        node = g.producer.get(t)
        if node is None or node.op != p.op or len(node.outputs) != 1:
            return False
        term = g.node_terms(node)[0]
        if not isinstance(term, App) or term.op != p.op or len(term.args) != len(p.args) or \
                not all(isinstance(x, Leaf) for x in term.args) or not match_attrs(p, term, env):
            return False
        inside.add(t)
        return all(gmatch(a, x.name, env, inside) for a, x in zip(p.args, term.args))

    for rule in rules:
        root_op = rule.lhs.op
        for n in list(g.nodes):
            if n.op != root_op or len(n.outputs) != 1:
                continue
            env: dict = {}
            inside: set = set()
            if not gmatch(rule.lhs, n.outputs[0], env, inside):
                continue
            inside.discard(n.outputs[0])
            tensors = {v: e.name for v, e in env.items() if isinstance(e, Leaf)}
            ctx = EvalContext(lambda leaf: g.shape(leaf.name), cx, reg.functions,
                              lambda leaf: g.tensors[leaf.name].dtype)
            if not check_condition(rule, env, ctx):
                continue
            # the tensors the pattern's own operators compute (below its root) must be read only inside it; a
            # canonical op's spelling keeps those read elsewhere too (a mask the backward reads again), and the
            # operators computing them
            nodes_inside = [g.producer[t] for t in inside]
            shared = [m for m in nodes_inside if any(t in outputs for t in m.outputs) or any(
                c not in nodes_inside and c is not n for t in m.outputs for c in g.consumers.get(t, []))]
            if shared and id(rule) not in canonical:
                continue
            while shared:
                m = shared.pop()
                if m in nodes_inside:
                    nodes_inside.remove(m)
                    shared += [g.producer[t] for t in m.inputs if t in inside and g.producer[t] in nodes_inside]
            rhs = rule.rhs
            g.rewrite(n, op=rhs.op, inputs=[tensors[a.name] for a in rhs.args],
                      attrs={k: (env[v.name] if hasattr(v, "name") and v.name in env else getattr(v, "value", v))
                             for k, v in rhs.attrs})
            g.remove_nodes(nodes_inside)
            changed += 1
            g.revalidate(reg, cx)
    return changed
