"""What a failure report adds for its reader: where the operator is in *their* code, where the G_d tensors
it was compared with come from, the failing neighbourhood (drawn by ``graphguard report``), and a hint -- the
missing or nearest collective, a factor, a budget -- that explains the mismatch where one can be found.

Nothing here decides a verdict: it reads the graphs and the relations inference left (``result.relations``).
"""
from __future__ import annotations

from collections import deque

from ..ir.expr import App, Leaf, Term, leaves, rank_of, to_text
from ..ir.graph import Graph, Node
from .result import VerifyResult

MAX_NEIGHBOURS = 40  # G_d operators drawn around a failure
MAX_HOPS = 60  # G_d operators walked looking for the nearest collective


def explain(result: VerifyResult, g_s: Graph, g_d: Graph, reg, budget=None, partial_from: dict | None = None,
            scaled_from: dict | None = None, range_wanted: dict | None = None) -> None:
    """Fill ``result.failure``'s source, hint, G_d tensor sources and neighbourhood (no-op without a failure)."""
    f = result.failure
    if f is None:
        return
    by_name = {n.name: n for n in g_s.nodes}
    v = by_name.get(f.node)
    if v is not None:
        f.func, f.module = v.func, v.module
    R = result.relations
    d_leaves = list(dict.fromkeys(x for t in f.input_relations for e in R.get(t, [])[:4] for x in leaves(e)))
    named = list(dict.fromkeys(d_leaves + list(f.explored)))
    f.sources = {t: src for t in named if (src := _source(g_d.producer.get(t)))}
    collective = {o.name for o in reg if getattr(o, "collective", False)}
    f.hint = _hint(f, v, g_s, g_d, R, collective, budget, partial_from or {}, scaled_from or {}, result.verdict,
                   named)
    ranged = _range_hint(f, v, g_s, g_d, R, range_wanted or {})
    if ranged:
        f.hint = f"{ranged}; {f.hint}" if f.hint else ranged  # (the cause only the user can settle first)
    f.neighbourhood = _neighbourhood(v, g_s, g_d, named, collective)


def _source(n: Node | None) -> str | None:
    return n.source_text() or None if n is not None else None


def _hint(f, v, g_s, g_d, R, collective, budget, partial_from, scaled_from, verdict, named=()) -> str | None:
    if f.reason.startswith("search budget exhausted") or (verdict == "inconclusive" and budget is not None):
        return _budget_hint(f.reason, budget)
    if v is None:
        return None
    for t in dict.fromkeys(v.inputs):
        exprs = R.get(t, [])
        if exprs and all(_scaled(e) for e in exprs):
            return _factor_hint(t, exprs[0], scaled_from.get(t) or v)
        if exprs and all(_partial(e) for e in exprs):
            return _partial_hint(t, exprs[0], partial_from.get(t), g_d, collective)
    if f.partial_output is not None:
        exprs = R.get(f.partial_output, [])
        if exprs:
            return _partial_hint(f.partial_output, exprs[0], v, g_d, collective)
    if "constant factor" in f.reason:
        for o in f.outputs + [t for t in v.inputs]:
            e = next((e for e in R.get(o, []) if _scaled(e)), None)
            if e is not None:
                return _factor_hint(o, e, v)
    if not v.inputs or not all(R.get(t) for t in v.inputs):
        return None
    # every input is related: the ranks compute something else from them here
    mine = [x for t in v.inputs for e in R.get(t, [])[:1] for x in leaves(e)]
    counterparts = [n for x in mine for n in g_d.consumers.get(x, []) if n.op == v.op]
    copies = _summed_copies(f, v, g_d, R, collective)
    if copies:
        return copies
    split = next((f"{t} = {to_text(e)}" for t in v.inputs for e in R.get(t, [])[:1]
                  if isinstance(e, App) and e.op == "core.concat"), None)
    # (from the tensors the drawing shows too: a hint never says "no collective near" beside a drawn one)
    near = _nearest_collectives(g_d, list(dict.fromkeys(mine + list(named))), collective)
    parts = []
    if counterparts:
        c = counterparts[0]
        parts.append(f"G_d's {c.op} on the same tensors ({c.name}{_at(c)}) does not compute what G_s's does from "
                     f"them (other attributes, operands, or ranks' pieces)")
    else:
        parts.append(f"no G_d {v.op} reads the G_d tensors its inputs map to")
    if split:
        parts.append(f"its inputs are split across the ranks ({split})")
    if near:
        parts.append("nearest G_d collectives: " + "; ".join(f"{n.op}{_group(n)} {_dir} ({n.name}{_at(n)})"
                                                            for n, _dir in near))
    else:
        parts.append(f"no G_d collective is within {MAX_HOPS} operators of those tensors: the ranks compute this "
                     f"without communicating -- a missing all-reduce or all-gather here?")
    return "; ".join(parts)


def _range_hint(f, v, g_s: Graph, g_d: Graph, R: dict, wanted: dict) -> str | None:
    """Where a lemma's condition failed on value ranges alone (``wanted``: lemma -> the G_d tensors whose range
    it read) near the failure: the G_s integer inputs those tensors come from, and the ``ranges:`` line that
    would state what the lemma needs -- only the user knows whether their values keep to it."""
    if not wanted or v is None:
        return None
    near = {x for t in v.inputs for e in R.get(t, []) for x in leaves(e)} | set(f.explored)
    near |= _ancestors(g_d, near, MAX_HOPS)
    lemmas = sorted(lab for lab, ts in wanted.items() if ts & near)
    if not lemmas:
        return None
    d_inputs = _ancestors(g_d, {t for lab in lemmas for t in wanted[lab]}, MAX_HOPS) | {
        t for lab in lemmas for t in wanted[lab]}
    names = [n for n in g_s.inputs if str(g_s.tensors[n].dtype).startswith(("int", "uint"))
             and any(x in d_inputs for e in R.get(n, []) for x in leaves(e))]
    if not names:
        return None
    example = ", ".join(f'{n}: "[0, N)"' for n in names)
    return (f"lemma {', '.join(lemmas[:3])} would apply if the values of {', '.join(repr(n) for n in names)} lay in a "
            f"known range (e.g. token ids or labels below the vocabulary size): if they do, state it in the relation "
            f"file as ranges: {{{example}}}")


def _ancestors(g: Graph, start: set, hops: int) -> set:
    out, frontier = set(), set(start)
    for _ in range(hops):
        nxt = set()
        for t in frontier:
            p = g.producer.get(t)
            if p is not None:
                nxt |= set(p.inputs) - out
        out |= nxt
        frontier = nxt
        if not frontier:
            break
    return out


# what usually makes the ranks hold a constant multiple of the value (a README promise: the hint says them)
FACTOR_CAUSES = ("a differentiable all-reduce whose backward reduces again (torch.distributed."
                 "_functional_collectives.all_reduce as a TP layer's output reduction: its backward all-reduces the "
                 "replicated gradient, W times too large -- Megatron's g is an autograd.Function, all-reduce forward "
                 "and identity backward); a sum where an average is meant (all-reduce op sum, not avg: a gradient "
                 "averaged and summed, or summed twice), a missing 1/N; a loss not divided by the micro-batch count "
                 "(or divided twice)")


def _factor_hint(t: str, e: App, v: Node) -> str:
    factor = dict(e.attrs).get("factor") if hasattr(e, "attrs") else None
    times = f"{_inverse(factor)} times" if factor is not None else "a constant multiple of"
    return (f"the ranks hold {times} the value G_s computes ({t} = {to_text(e)}); the factor entered at G_s "
            f"{v.op} ({v.source_text() or v.name}); usual causes: {FACTOR_CAUSES}")


def _summed_copies(f, v: Node, g_d: Graph, R: dict, collective: set) -> str | None:
    """Where G_d's counterpart of ``v`` reads, in place of a tensor every rank holds whole (R: ``t = x@0``,
    ``t = x@1``, ...), a sum all-reduce of those copies: the ranks hold k times t there (k the copies summed).
    The factor, the all-reduce where it entered (its line in the user's code) and the usual causes."""
    copies: dict[str, str] = {}  # G_d leaf -> the G_s input of v it is a whole copy of
    for t in dict.fromkeys(v.inputs):
        for e in R.get(t, []):
            if isinstance(e, Leaf):
                copies[e.name] = t
    looked = set(f.explored) | {i for x in copies for n in g_d.consumers.get(x, []) if n.op == v.op
                                for i in n.inputs}
    for x in copies:
        for n in g_d.consumers.get(x, []):
            if n.op not in collective or "reduce" not in n.op or n.attrs.get("op", "sum") != "sum":
                continue
            if len(n.inputs) < 2 or not all(copies.get(i) == copies[x] for i in n.inputs):
                continue
            if not set(n.outputs) & looked:
                continue
            k, t = len(n.inputs), copies[x]
            readers = [c for o in n.outputs for c in g_d.consumers.get(o, []) if c.op == v.op]
            read = (f"G_d's {readers[0].op} ({readers[0].name}{_at(readers[0])}) reads" if readers
                    else "G_d reads")
            backward = ", its backward" if any(
                o.startswith("bw.") for o in n.outputs) and not (n.func or "").startswith("backward") else ""
            return (f"the ranks hold {k} times the value G_s computes (a constant factor {k}): {read} "
                    f"{n.outputs[0]} = the sum over {k} ranks of {t}, which every rank already holds whole "
                    f"({t} = {' = '.join(n.inputs[:4])}{' = ...' if k > 4 else ''}); the factor entered at "
                    f"{n.op}{_group(n)} ({n.name}{_at(n)}{backward}); usual causes: {FACTOR_CAUSES}")
    return None


def _inverse(factor) -> str:
    try:
        from fractions import Fraction
        return str(1 / Fraction(str(factor)))
    except (ValueError, ZeroDivisionError, TypeError):
        return f"1/({factor})"


def _partial_hint(t: str, e: Term, origin: Node | None, g_d: Graph, collective: set) -> str:
    mine = list(dict.fromkeys(leaves(e)))
    mods = [m for x in mine if (p := g_d.producer.get(x)) is not None and (m := p.module)]
    module = (origin.module if origin is not None else None) or (mods[0] if mods else None)
    began = f"; the partial sums begin at G_s {origin.op} ({origin.source_text() or origin.name})" if origin else ""
    src = (origin.loc if origin is not None else None) or next(
        (p.loc for x in mine if (p := g_d.producer.get(x)) is not None and p.loc), None)
    where = f"`{module}`" if module else f"the operator at {src}" if src else ", ".join(mine[:3])
    reducing = {op for op in collective if "reduce" in op}
    after = [n for n, d in _nearest_collectives(g_d, mine, reducing) if d == "after"]
    if after:
        n = after[0]
        tail = (f"the nearest reduction after them, {n.op}{_group(n)} ({n.name}{_at(n)}), comes after operators that "
                f"do not distribute over the sum: move it up to the output of {where}?")
    else:
        tail = f"no all-reduce or reduce-scatter of G_d follows {where}: a missing all-reduce?"
    return (f"input {t} is known only as a sum of the ranks' partial results ({to_text(e)}){began}; on each rank the "
            f"output of {where} is a partial sum, and {tail}")


def _budget_hint(reason: str, budget) -> str:
    """Which budget ran out (the reason names it) and the option that raises it."""
    which = [(flag, now) for key, flag, now in (
        ("iterations", "--max-iterations", budget and budget.iterations), ("e-nodes", "--max-enodes", budget and
         budget.enodes), ("time budget", "--timeout", budget and f"{budget.seconds:g} s")) if key in reason]
    if which:
        flag, now = which[0]
        raise_it = f"raise {flag}" + (f" (now {now})" if now else "")
    else:  # an earlier operator's search was cut short: its result is partial
        raise_it = "an earlier operator's search was cut short; raise --max-enodes, --max-iterations or --timeout"
    return (f"the per-operator search budget ran out: {raise_it} (Python: graphguard.verify(..., "
            f"budget=Budget(iterations, enodes, seconds))); after a cut-short search the verdict is inconclusive, never "
            f"a certificate")


def _scaled(e: Term) -> bool:
    return isinstance(e, App) and e.op == "core.scale"


_LAYOUT = ("core.concat", "core.reshape", "core.permute", "core.slice")


def _partial(e: Term) -> bool:
    """A cross-rank sum (or max) of the ranks' tensors at the top, or inside a layout of them (a concat, a
    reshape, a permutation, a slice: the rows of a TP pair's partial products re-sorted into G_s's order)."""
    if isinstance(e, App) and e.op in ("core.sum", "core.max") and len({rank_of(x) for x in leaves(e)}) > 1:
        return True
    return isinstance(e, App) and e.op in _LAYOUT and any(_partial(a) for a in e.args)


def _at(n: Node) -> str:
    s = n.source_text()
    return f" at {s}" if s else ""


def _group(n: Node) -> str:
    g = n.attrs.get("group")
    return f" over ranks {list(g)}" if g is not None else ""


def _nearest_collectives(g: Graph, start: list[str], collective: set) -> list[tuple[Node, str]]:
    """The first collective met walking G_d forward (consumers) and backward (producers) from ``start``."""
    found = []
    for direction in ("after", "before"):
        seen, todo, hops = set(start), deque(start), 0
        while todo and hops < MAX_HOPS:
            t = todo.popleft()
            nodes = g.consumers.get(t, []) if direction == "after" else [g.producer[t]] if t in g.producer else []
            hit = None
            for n in nodes:
                hops += 1
                if n.op in collective:
                    hit = n
                    break
                for x in (n.outputs if direction == "after" else n.inputs):
                    if x not in seen:
                        seen.add(x)
                        todo.append(x)
            if hit is not None:
                found.append((hit, direction))
                break
    return found


def _node_record(n: Node, collective: set) -> dict:
    ranks = sorted({r for r in map(rank_of, n.outputs) if r is not None})
    return {"name": n.name, "op": n.op, "inputs": list(n.inputs), "outputs": list(n.outputs), "loc": n.loc,
            "func": n.func, "module": n.module, "ranks": ranks, "collective": n.op in collective}


def _neighbourhood(v: Node | None, g_s: Graph, g_d: Graph, named: list[str], collective: set) -> dict:
    """The failing G_s operator with its producers and readers, and the G_d operators around the tensors the
    report names (their producers and readers among them, the nearest collectives), for a drawing."""
    spec: list[Node] = []
    if v is not None:
        spec = [g_s.producer[t] for t in dict.fromkeys(v.inputs) if t in g_s.producer] + [v]
        spec += [n for o in v.outputs for n in g_s.consumers.get(o, [])][:6]
        spec = list({n.name: n for n in spec}.values())
    impl: dict[str, Node] = {}
    for t in named:
        if t in g_d.producer:
            impl.setdefault(g_d.producer[t].name, g_d.producer[t])
    mine = set(named)
    for t in named:
        for n in g_d.consumers.get(t, []):
            if len(impl) < MAX_NEIGHBOURS and any(o in mine for o in n.outputs):
                impl.setdefault(n.name, n)
    for n, _ in _nearest_collectives(g_d, named, collective):
        impl.setdefault(n.name, n)
    nodes = list(impl.values())[:MAX_NEIGHBOURS]
    return {"focus": v.name if v is not None else None,
            "spec": [_node_record(n, collective) for n in spec],
            "impl": [_node_record(n, collective) for n in nodes]}


def diverging_ranks(f, r_o: dict, g_d: Graph, expect: dict) -> None:
    """For a failure at an expected output that a rank should hold as another rank's copy (replicated) but
    computes otherwise: the hint names the operator where the two ranks' computations part."""
    t = f.outputs[0]
    want = [e for e in expect.get(t, []) if isinstance(e, Leaf) and e.name in g_d.producer]
    have = [e for e in r_o.get(t, []) if isinstance(e, Leaf) and e.name in g_d.producer]
    got = {e.name for e in have}
    for e in want:
        if e.name in got or not have:
            continue
        hint = rank_divergence(g_d, have[0].name, e.name)
        if hint:
            f.hint = hint
        return


def rank_divergence(g_d: Graph, held: str, expected: str) -> str | None:
    """Where G_d tensor ``expected`` (an output one rank should hold like another) stops being computed the
    way ``held`` is: the two producer cones in G_d's order, operator by operator (the ranks were traced from
    one program, so their operators line up until one rank runs something else). A hint naming the first
    operator that differs, or None where the two run the same operators."""
    order = {n.name: i for i, n in enumerate(g_d.topo_order())}

    def cone(t):
        seen, todo = {}, [t]
        while todo:
            n = g_d.producer.get(todo.pop())
            if n is not None and n.name not in seen:
                seen[n.name] = n
                todo.extend(n.inputs)
        return sorted(seen.values(), key=lambda n: order[n.name])

    def key(n):
        return n.op, len(n.inputs), tuple(sorted((k, str(v)) for k, v in n.attrs.items()))

    a, b = cone(held), cone(expected)
    for x, y in zip(a, b):
        if key(x) != key(y):
            return (f"{expected} is computed like {held} until {y.op} ({y.name}{_at(y)}), where the other rank runs "
                    f"{x.op} ({x.name}{_at(x)}): the ranks part there")
    if len(a) != len(b):
        y, x = (b[len(a)], None) if len(b) > len(a) else (None, a[len(b)])
        extra = y or x
        return (f"{expected} is computed like {held} but for {extra.op} ({extra.name}{_at(extra)}), which one rank "
                f"runs and the other does not: the ranks part there")
    return None
