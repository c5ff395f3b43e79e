"""Per-operator results reused where a local problem repeats (a layer stacked N times, a chain of one op).

**Invariant: a key holds every fact that can decide a value the result depends on.** What Listing 2 finds for
a G_s operator ``v`` depends on: ``v`` (its operator, its terms over its inputs, which of its outputs G_s
outputs), the relations of its inputs, the aliases of the G_d tensors those name, and the part of G_d that the
search reads -- the related tensors, the operators filed under them (operator, attributes, inputs, outputs) and
every tensor seen there: its shape, dtype, rank, whether it is related or a G_d output, its stated value range,
and *what the search may take as its value*: for a constant tensor its producer (and so, numbered in turn, the
whole constant chain), for an index tensor the constant that ``index_constant`` proves it is (a term without
G_d names: ``core.full``'s fill, a top-k's order), or None where it proves none. :class:`Problem` writes all of
that with the tensors numbered in the order they are met, so two operators whose problems read the same are the
same problem up to the names of their tensors. Lemmas read shapes, attributes and those values, never names;
names only break ties between equally good expressions. A result found for one problem, renamed, therefore
rests on G_d facts and relations that hold for the other one as well: it is sound there (possibly another of
equally good expressions than a fresh search would keep). An index tensor recorded by shape alone would let
two layers whose masks are computed alike but from other values (``scatter(..., value=1)`` then ``value=0``)
share one result -- ``tests/test_memo_key.py`` builds such layers for each kind of value the search reads.

The related tensors are known only once the search has run: an entry keeps them (by number), and a later
operator matches the entry when the problem read with those tensors related is the entry's. Where the result
names a tensor that read does not reach (a KV head's replica: its view is found from a proven alias, not from
the related tensors' operators; a product whose operands the labels reached through G_d's definitions), the
tensors whose operators lead to it are read as related too -- a larger key, so a stricter match: the chain of
operators that computes every tensor the result names enters the key -- and where no such chain is found the
entry is not stored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..ir.expr import App, Leaf, Term, leaves, rank_of

MAX_ENTRIES = 8  # entries kept per operator and input relations (distinct neighbourhoods in G_d)


def rename(t: Term, f: Callable[[str], str]) -> Term:
    if isinstance(t, Leaf):
        return Leaf(f(t.name))
    assert isinstance(t, App)
    return App(t.op, tuple(rename(a, f) for a in t.args), t.attrs)


@dataclass
class Entry:
    related: frozenset  # numbers of the tensors the search related
    key: tuple  # the problem read with those related
    found: dict  # output position -> expressions over numbered tensors (leaves named by number)
    explored: tuple  # numbers
    aliases: tuple  # (number, numbers) pairs the search added
    truncated: bool
    origin: str = ""  # the G_s operator whose search found it
    by: dict | None = None  # output position -> the prover of each expression of ``found`` (prover.py)


class Problem:
    """The local problem of G_s operator ``v``: its head (``v``, relations, aliases, broadcast definitions)
    is read at once; :meth:`read` adds the part of G_d seen from the related tensors."""

    def __init__(self, ctx, v, R, const: frozenset, watch: dict, d_out: frozenset, s_out: frozenset,
                 value: Callable[[str], Any] = lambda t: None):
        self.ctx, self.const, self.watch, self.d_out, self.value = ctx, const, watch, d_out, value
        self.ids: dict[str, int] = {}
        self.names: list[str] = []
        g_s, g_d = ctx.g_s, ctx.g_d
        ins = list(dict.fromkeys(v.inputs))
        pos = {t: f"#{i}" for i, t in enumerate(ins)}
        rel = tuple(tuple(self.term(e) for e in R[t]) for t in ins)
        in_leaves = list(self.names)
        ali = tuple(tuple(self.id(a) for a in sorted(ctx.aliases.get(x, ()))) for x in in_leaves)
        reg = ctx.egraph.reg
        bdefs = []
        for x in in_leaves:
            p = g_d.producer.get(x)
            bdefs.append(self.term(g_d.node_terms(p)[0]) if p is not None and reg.get(p.op).broadcast else None)
        self.head = (v.op, tuple(rename(t, pos.__getitem__) for t in g_s.node_terms(v)),
                     tuple(o in s_out for o in v.outputs), rel, ali, tuple(bdefs))

    def id(self, t: str) -> int:
        i = self.ids.get(t)
        if i is None:
            i = self.ids[t] = len(self.names)
            self.names.append(t)
        return i

    def term(self, e: Term) -> Term:
        return rename(e, lambda x: str(self.id(x)))

    def read(self, related: Callable[[int, str], bool]) -> tuple[tuple, list[str], dict[str, int]]:
        """The problem with the tensors for which ``related(number, name)`` holds related: (key, names by
        number, numbers by name). Tensors are numbered breadth-first from the head's."""
        ids, names = dict(self.ids), list(self.names)

        def num(t: str) -> int:
            i = ids.get(t)
            if i is None:
                i = ids[t] = len(names)
                names.append(t)
            return i

        g_d, const, watch, d_out = self.ctx.g_d, self.const, self.watch, self.d_out
        lr = self.ctx.egraph.leaf_range  # (stated value ranges: conditions may read them)
        facts, sigs = _facts(self.ctx), _sigs(self.ctx)
        seen: list[Any] = []
        i = 0
        while i < len(names):
            t = names[i]
            rel = related(i, t)
            item: list[Any] = [*facts[t], t in d_out, rel, lr(t) if lr else None]
            if t in const:
                p = g_d.producer[t]
                item.append((*sigs[id(p)], tuple(num(x) for x in p.inputs), tuple(num(o) for o in p.outputs)))
            else:  # (the value the search may take for it: an index tensor's proven constant -- module docstring)
                item.append(self.value(t))
            if rel:
                for n in watch.get(t, ()):
                    item.append((*sigs[id(n)], tuple(num(x) for x in n.inputs), tuple(num(o) for o in n.outputs)))
            seen.append(tuple(item))
            i += 1
        return (self.head, tuple(seen)), names, ids


def _reaching(producer: dict, missing: set, ids: dict, related: set) -> set:
    """The read tensors, not yet read as related, whose operators lead to tensors the result names that the
    read did not reach (a replica's copy of a view, found from a proven alias): read as related, the key
    holds the operators that compute those tensors (one step more per read)."""
    more, seen, stack = set(), set(), list(missing)
    while stack:
        t = stack.pop()
        n = producer.get(t)
        if t in seen or n is None:
            continue
        seen.add(t)
        for i in n.inputs:
            if i not in ids:
                stack.append(i)
            elif i not in related:
                more.add(i)
    return more


def _facts(ctx) -> dict:
    """Tensor -> (shape, dtype, rank) of G_d, read once per verification (G_d does not change during one)."""
    f = getattr(ctx, "_memo_facts", None)
    if f is None:
        f = ctx._memo_facts = {t: (info.shape, info.dtype, rank_of(t)) for t, info in ctx.g_d.tensors.items()}
    return f


def _sigs(ctx) -> dict:
    """id(node) -> (operator, attributes as a tuple) of G_d's nodes, once per verification."""
    f = getattr(ctx, "_memo_sigs", None)
    if f is None:
        f = ctx._memo_sigs = {id(n): (n.op, _attrs(n.attrs)) for n in ctx.g_d.nodes}
    return f


def _attrs(a: dict) -> tuple:
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in a.items())


class Memo:
    """Results of Listing 2 by local problem."""

    def __init__(self):
        self.entries: dict[tuple, list[Entry]] = {}
        self.hits = 0

    def lookup(self, p: Problem, outputs: list[str]):
        """(relation of ``outputs``, explored, aliases to add, truncated, provenance) of an entry whose problem
        ``p`` is, renamed; None when there is none. Provenance: (output, expression) -> ``memo:<operator>``
        and the prover that found it there."""
        for e in self.entries.get(p.head, ()):
            key, names, _ = p.read(lambda i, t: i in e.related)
            if key != e.key:
                continue
            self.hits += 1
            back = names.__getitem__
            found = {o: [rename(x, lambda s: back(int(s))) for x in e.found[k]] for k, o in enumerate(outputs)}
            aliases = [(back(a), {back(b) for b in bs}) for a, bs in e.aliases]
            by = {(o, x): f"memo:{e.origin} {(e.by or {}).get(k, {}).get(j, '?')}"
                  for k, o in enumerate(outputs) for j, x in enumerate(found[o])}
            return found, {back(i) for i in e.explored}, aliases, e.truncated, by
        return None

    def store(self, p: Problem, outputs: list[str], found: dict, explored: set, related: set, aliases: list,
              truncated: bool, origin: str = "", by: dict | None = None) -> None:
        used = {x for exprs in found.values() for e in exprs for x in leaves(e)} | explored
        used |= {x for a, bs in aliases for x in (a, *bs)} | related
        related = set(related)
        while True:
            key, names, ids = p.read(lambda i, t: t in related)
            missing = used - ids.keys()
            if not missing:
                break
            more = _reaching(p.ctx.g_d.producer, missing, ids, related)
            if not more:
                return
            related |= more
        entries = self.entries.setdefault(p.head, [])
        if len(entries) >= MAX_ENTRIES:
            return
        num = lambda s: str(ids[s])  # noqa: E731
        entries.append(Entry(frozenset(ids[t] for t in related), key,
                             {k: [rename(x, num) for x in found[o]] for k, o in enumerate(outputs)},
                             tuple(sorted(ids[t] for t in explored)),
                             tuple((ids[a], tuple(sorted(ids[b] for b in bs))) for a, bs in aliases), truncated,
                             origin, {k: {j: (by or {}).get((o, x), "?") for j, x in enumerate(found[o])}
                                      for k, o in enumerate(outputs)}))
