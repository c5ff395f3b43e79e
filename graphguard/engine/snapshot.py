"""A frozen view of the e-graph (:class:`Snapshot`): its e-classes and e-nodes read back from egglog, with the
shapes, dtypes and value ranges of the classes, their representatives and the clean terms extracted from them
(the expressions R keeps). Nothing here changes the e-graph; :mod:`graphguard.engine.egraph` builds it."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from ..errors import ShapeError, UnsoundLemmaError
from ..ir import scalar as S
from ..ir.expr import App, Leaf, Term, ac_text, app, size, to_text
from ..ir.ops import fmt_shape

@dataclass(frozen=True)
class Hole(Term):
    """A reference to an e-class of the current snapshot (used while instantiating right-hand sides)."""
    cls: Any


HANDLE = "H"  # (H k): an egglog function naming an e-class, so a term spells it in two symbols
SHARES = "#shares"  # a virtual e-node of the clean extraction: x as the sum of n shares x/n (Snapshot)
CONSTANT = frozenset({"#constant"})  # marks a constant in the clean table


@dataclass
class ENode:
    op: str  # "T" for a leaf
    children: tuple
    attrs: tuple  # ((name, value), ...); for a leaf: the tensor name


class Snapshot:
    """A frozen view of the e-graph: e-classes, e-nodes, shapes, representatives, clean terms."""

    def __init__(self, eg):  # (the EGraph it reads)
        self.eg = eg
        fz = eg._eg.freeze()
        self.classes: dict[Any, list[ENode]] = {}
        self.hashcons: dict[tuple, Any] = {}
        self.matches: dict[str, list[tuple]] = {}
        self.handle: dict[Any, int] = {}  # e-class -> the number k of a handle (H k) naming it
        strings = eg._strings

        def s(v):
            t = strings.get(v)
            if t is None:
                t = strings[v] = eg._eg.value_to_string(v)
            return t

        n = 0
        classes, hashcons = self.classes, self.hashcons
        seen = getattr(eg, "_seen", None)  # match rows already handled since the last push: skipped here
        raw_matches: dict[Any, list[tuple]] = {}
        for fname, fn in fz.functions.items():
            if fn.is_let_binding:
                continue
            if fname == "T":
                for row in fn.rows:
                    out = row.output
                    name = s(row.inputs[0])
                    classes.setdefault(out, []).append(ENode("T", (), name))
                    hashcons[("T", (), name)] = out
                    n += 1
                continue
            hit = eg._ops_by_cname.get(fname)
            if hit is not None:
                op, k = hit
                specs = op.attrs
                decoded = eg._raw_attrs.setdefault(op.name, {})  # raw attribute values -> decoded attributes
                for row in fn.rows:
                    ins = row.inputs
                    out = row.output
                    ch = tuple(ins[:k])
                    raw = tuple(ins[k:])
                    attrs = decoded.get(raw)
                    if attrs is None:
                        attrs = decoded[raw] = tuple((spec.name, eg.decode(spec, op, s(v))) for spec, v in zip(specs, raw))
                    classes.setdefault(out, []).append(ENode(op.name, ch, attrs))
                    hashcons[(op.name, ch, attrs)] = out
                    n += 1
                continue
            if fname == HANDLE:  # (H k): a name for an e-class, set once (see EGraph.emit)
                for row in fn.rows:
                    self.handle.setdefault(row.output, eg._eg.value_to_i64(row.inputs[0]))
                continue
            if fname in eg._match_rels:  # one relation per column signature; column 0 names the rule
                for row in fn.rows:
                    t = tuple(row.inputs)
                    if seen is None or t not in seen:
                        raw_matches.setdefault(t[0], []).append(t)
        for v, rows in raw_matches.items():
            self.matches[s(v)] = rows
        self.n_nodes = n
        self._strings = s
        self._shape: dict[Any, tuple] = {}
        self._repr: dict[Any, Term] = {}
        self._clean: dict[Any, dict] = {}
        self._inv_parents: dict | None = None  # class -> classes holding reshape/permute/identity of it
        self._dtype: dict[Any, str | None] = {}  # e-class -> dtype (computed when a condition asks)
        self._range: dict[Any, tuple | None] = {}  # e-class -> [lo, hi) of its values (likewise)
        self._compute_shapes()
        # a class holding scale(x, 1/n) is a share of x: n different tensors of it add up to x; so is a class
        # holding scale(x, f) of one holding scale(x, n f) (a rank's x / 64 of G_s's x / 32) -- read off the
        # scales of one x here, not written as more scales of scales (which grow without end)
        self._shares: dict[Any, list[ENode]] = {}
        self._shared: dict[Any, dict] = {}  # per clean table: the classes clean only as a sum of shares
        multiples: dict[Any, dict] = {}  # x -> {class holding scale(x, f): f}
        for h, nodes in self.classes.items():
            for nd in nodes:
                f = dict(nd.attrs).get("factor") if nd.op == "core.scale" else None
                if isinstance(f, Fraction) and f > 0 and nd.children[0] != h:
                    multiples.setdefault(nd.children[0], {nd.children[0]: Fraction(1)})[h] = f
        for x, by in multiples.items():
            for d, g in by.items():
                for c, f in by.items():
                    r = f / g
                    if c != d and r.numerator == 1 and r.denominator > 1:
                        self._shares.setdefault(d, []).append(ENode(SHARES, (c,), r.denominator))

    # -- shapes ---------------------------------------------------------------------------------
    def _compute_shapes(self) -> None:
        """Shape every e-class bottom-up (a worklist: an e-node is shaped once all its children are) and check
        that every e-node of a class agrees -- a lemma that merged tensors of two shapes is unsound. An e-node
        shaped by an earlier snapshot of this push keeps its shape (e-class ids are not reused in a push)."""
        eg = self.eg
        known = eg._node_shapes
        shapes = self._shape

        def put(c, shp, nd) -> bool:
            old = shapes.get(c)
            if old is None:
                shapes[c] = shp
                return True
            if old != shp and (len(old) != len(shp) or any(S.norm(a) != S.norm(b) for a, b in zip(old, shp))):
                raise UnsoundLemmaError(
                    f"e-class merged tensors of shapes {fmt_shape(old)} and {fmt_shape(shp)} "
                    f"({self.repr(c) if c in self._repr else nd.op}); a lemma is unsound")
            return False

        items = []
        for c, nodes in self.classes.items():
            for nd in nodes:
                shp = known.get((nd.op, nd.children, nd.attrs))
                if shp is None:
                    items.append((c, nd))
                else:
                    put(c, shp, nd)
        waiting: dict[Any, list[int]] = {}
        missing = [0] * len(items)
        work = []
        for i, (_, nd) in enumerate(items):
            kids = {ch for ch in nd.children if ch not in shapes}
            missing[i] = len(kids)
            for ch in kids:
                waiting.setdefault(ch, []).append(i)
            if not kids:
                work.append(i)
        while work:
            i = work.pop()
            c, nd = items[i]
            if nd.op == "T":
                shp = tuple(eg.leaf_shape(nd.attrs))
            else:
                ins = tuple(shapes[ch] for ch in nd.children)
                key = (nd.op, ins, nd.attrs)  # shape functions are pure: one call per distinct e-node type
                shp = eg._shape_cache.get(key)
                if shp is None:
                    try:
                        shp = tuple(eg.reg.get(nd.op).shape(list(ins), dict(nd.attrs), eg.cx))
                    except (ShapeError, ValueError, IndexError, KeyError, TypeError) as e:
                        raise UnsoundLemmaError(f"ill-shaped e-node {nd.op} in the e-graph: {e}") from None
                    eg._shape_cache[key] = shp
            known[(nd.op, nd.children, nd.attrs)] = shp
            if put(c, shp, nd):
                for j in waiting.get(c, ()):
                    missing[j] -= 1
                    if not missing[j]:
                        work.append(j)

    def dtype(self, c, _busy: set | None = None) -> str | None:
        """The dtype of e-class ``c``: its tensor's when it holds one, else what the dtype rules of its e-nodes
        say if they agree; None where unknown (conditions reading it then do not hold)."""
        memo = self._dtype
        if c in memo:
            return memo[c]
        nodes = self.classes.get(c, ())
        leaf = next((nd.attrs for nd in nodes if nd.op == "T"), None)
        if leaf is not None:
            memo[c] = self.eg.leaf_dtype(leaf) if self.eg.leaf_dtype is not None else None
            return memo[c]
        busy = set() if _busy is None else _busy
        if ("unknown", c) in busy:  # (undecided earlier in this walk: not walked again -- walks stay linear)
            return None
        busy.add(c)
        found = set()
        for nd in nodes:
            if any(ch in busy for ch in nd.children):
                continue
            ins = [self.dtype(ch, busy) for ch in nd.children]
            if None in ins:
                found.add(None)
                continue
            op = self.eg.reg.get(nd.op)
            try:
                found.add(op.dtype(ins, dict(nd.attrs)) if op.dtype is not None else (ins[0] if ins else "float32"))
            except (KeyError, ValueError, TypeError, ShapeError):
                found.add(None)
        busy.discard(c)
        found.discard(None)  # an e-node over a class of unknown dtype tells nothing; the others decide
        if len(found) > 1 and all(d.startswith(("float", "bfloat")) for d in found):
            found = {min(found)}  # float widths: the dtype rules approximate torch's promotion, and no
            # reference tells widths apart (a condition asks floating(), not which width)
        out = found.pop() if len(found) == 1 else None
        if _busy is None or out is not None:
            memo[c] = out
        else:
            busy.add(("unknown", c))
        return out

    def vrange(self, c, _busy: set | None = None) -> tuple[int, int] | None:
        """[lo, hi) holding every value of e-class ``c``: the intersection of its tensors' stated ranges, or
        what its data movement e-nodes carry over from their input (every entry is a copy of one of it; a
        concat's entries are its parts'); None where unknown (conditions reading it then do not hold)."""
        memo = self._range
        if c in memo:
            return memo[c]
        nodes = self.classes.get(c, ())
        found = []
        lr = self.eg.leaf_range
        for nd in nodes:
            if nd.op == "T":
                r = lr(nd.attrs) if lr is not None else None
                if r is not None:
                    found.append(r)
        busy = set() if _busy is None else _busy
        busy.add(c)
        for nd in nodes:
            if nd.op == "T" or any(ch in busy for ch in nd.children):
                continue
            op = self.eg.reg.get(nd.op)
            if op.data_movement:
                ins = [self.vrange(nd.children[0], busy)]
            elif nd.op in ("core.concat", "core.identity"):
                ins = [self.vrange(ch, busy) for ch in nd.children]
            else:
                continue
            if ins and None not in ins:
                found.append((min(r[0] for r in ins), max(r[1] for r in ins)))
        busy.discard(c)
        out = (max(r[0] for r in found), min(r[1] for r in found)) if found else None
        if _busy is None or out is not None:
            memo[c] = out
        return out

    def constant_term(self, c) -> Term | None:
        """The smallest term of class ``c`` that holds no tensor (a constant computed from constants), or None."""
        table: dict[Any, tuple[int, Term]] = {}

        def cost(nd: ENode):
            if nd.op == "T" or not all(ch in table for ch in nd.children):
                return None
            return (1 + sum(table[ch][0] for ch in nd.children),
                    App(nd.op, tuple(table[ch][1] for ch in nd.children), nd.attrs))

        self._fix(table, cost)
        hit = table.get(c)
        return hit[1] if hit is not None else None

    def has_leaf(self, c) -> bool:
        return any(nd.op == "T" for nd in self.classes.get(c, ()))

    def shape(self, c) -> tuple:
        return self._shape[c]

    # -- representatives (smallest terms) ---------------------------------------------------------
    def _fix(self, table: dict, cost_of: Callable, extra: dict | None = None) -> None:
        """Best (cost, term, ...) per e-class by ``cost_of`` its e-nodes, to a fixpoint: a worklist that
        revisits the e-nodes above a class whenever that class improves."""
        items = [(c, nd) for c, nodes in self.classes.items()
                 for nd in (nodes + extra.get(c, []) if extra else nodes)]
        parents: dict[Any, list[int]] = {}
        for i, (_, nd) in enumerate(items):
            for ch in nd.children:
                parents.setdefault(ch, []).append(i)
        work = deque(range(len(items)))
        queued = [True] * len(items)
        while work:
            i = work.popleft()
            queued[i] = False
            c, nd = items[i]
            r = cost_of(nd)
            if r is None:
                continue
            old = table.get(c)
            # smaller first; ties broken by text so results do not depend on e-graph order
            if old is None or r[0] < old[0] or (r[0] == old[0] and r[1] != old[1]
                                                and to_text(r[1]) < to_text(old[1])):
                table[c] = r
                for j in parents.get(c, ()):
                    if not queued[j]:
                        queued[j] = True
                        work.append(j)

    def _build_reprs(self) -> None:
        table: dict[Any, tuple[int, Term]] = {}

        def cost(nd: ENode):
            if nd.op == "T":
                return (1, Leaf(nd.attrs))
            if not all(ch in table for ch in nd.children):
                return None
            return (1 + sum(table[ch][0] for ch in nd.children),
                    App(nd.op, tuple(table[ch][1] for ch in nd.children), nd.attrs))

        self._fix(table, cost)
        self._repr = {c: t for c, (_, t) in table.items()}

    def repr(self, c) -> Term:
        if not self._repr:
            self._build_reprs()
        return self._repr[c]

    # -- clean extraction -----------------------------------------------------------------------
    def _clean_node(self, nd: ENode, table: dict, allowed: frozenset | None = None):
        """(cost, term, summands) of the best clean term through e-node ``nd``; ``summands``: for a sum/max,
        the e-classes of its operands (flattened), which must be pairwise distinct -- a clean reduction
        combines different values (ranks' partials, micro-batches), never a value with itself (that
        would be a scaling: exactly the bug class of a missing 1/TP or 1/micro-batch factor) -- except
        shares: x is the sum of n different tensors holding x/n (n ranks' part of a replicated loss
        divided by the world size, the fix of that bug)."""
        eg = self.eg
        if nd.op == "T":
            if allowed is not None and nd.attrs not in allowed:
                return None
            return (1, Leaf(nd.attrs), None)
        if nd.op == SHARES:
            names = sorted(x.attrs for x in self.classes[nd.children[0]]
                           if x.op == "T" and (allowed is None or x.attrs in allowed))[:nd.attrs]
            if len(names) < nd.attrs:
                return None
            return (1 + len(names), app("core.sum", *map(Leaf, names)), frozenset(("share", x) for x in names))
        op = eg.reg.get(nd.op)
        if op.arity == 0:
            # a constant (the zeros of a padding) may stand in an intermediate relation as data; never in
            # R_o (G_d must compute its outputs) and never as a summand (x + c is not a reduction)
            return None if allowed is not None else (1, App(nd.op, (), nd.attrs), CONSTANT)
        if not op.clean or not all(ch in table for ch in nd.children):
            return None
        kids = [table[ch] for ch in nd.children]
        summands = None
        if op.name in ("core.sum", "core.max"):
            summands = frozenset()
            for ch, k in zip(nd.children, kids):
                if k[2] is CONSTANT:
                    return None
                part = k[2] if (k[2] is not None and isinstance(k[1], App) and k[1].op == op.name) else frozenset([ch])
                if summands & part:
                    return None
                summands = summands | part
        return (1 + sum(k[0] for k in kids), App(nd.op, tuple(k[1] for k in kids), nd.attrs), summands)

    def clean_table(self, allowed: frozenset | None = None) -> dict:
        table = self._clean.get(allowed)
        if table is None:
            table = {}
            self._fix(table, lambda nd: self._clean_node(nd, table, allowed))
            # shares only where nothing else is clean (a replicated x never becomes a sum of its shares)
            shares = {c: nodes for c, nodes in self._shares.items() if c not in table}
            if shares:
                self._fix(table, lambda nd: self._clean_node(nd, table, allowed), shares)
            self._clean[allowed], self._shared[allowed] = table, shares
        return table

    def clean_variants(self, c, allowed: frozenset | None = None) -> list[Term]:
        """Distinct clean expressions of class ``c``: the best one through each of its e-nodes
        (only over the leaves in ``allowed`` when given); one per order of summands."""
        table = self.clean_table(allowed)
        out: dict[str, tuple[int, Term]] = {}
        for nd in self.classes.get(c, []) + self._shared[allowed].get(c, []):
            r = self._clean_node(nd, table, allowed)
            if r is not None:
                key = ac_text(r[1])
                if key not in out or (r[0], to_text(r[1])) < (out[key][0], to_text(out[key][1])):
                    out[key] = (r[0], r[1])
        return [t for _, t in sorted(out.values(), key=lambda x: (x[0], str(x[1])))]

    def scaled_variants(self, c, allowed: frozenset | None = None) -> list[Term]:
        """``scale(E, factor=f)`` with E clean: class ``c`` known only up to a constant factor (asked only where
        nothing clean exists). Such a relation is exact, so later operators may use it; it is never part of R_o."""
        out: dict[str, Term] = {}
        for nd in self.classes.get(c, []):
            if nd.op == "core.scale":
                for e in self.clean_variants(nd.children[0], allowed):
                    t = App("core.scale", (e,), nd.attrs)
                    out.setdefault(to_text(t), t)
        return sorted(out.values(), key=lambda t: (size(t), to_text(t)))

    def leaves_below(self, classes, invertible: frozenset = frozenset()) -> set[str]:
        """Tensor names in the given e-classes and every e-class below them, and in the classes reached
        from those through ``invertible`` ops (an e-node ``reshape(c)`` holds the same data as ``c``)."""
        if invertible and self._inv_parents is None:
            self._inv_parents = {}
            for pc, nodes in self.classes.items():
                for nd in nodes:
                    if nd.op in invertible and len(nd.children) == 1:
                        self._inv_parents.setdefault(nd.children[0], []).append(pc)
        seen, stack, out = set(), [c for c in classes if c is not None], set()
        up: list = []
        while stack:
            c = stack.pop()
            if c in seen:
                continue
            seen.add(c)
            up.append(c)
            for nd in self.classes.get(c, ()):
                if nd.op == "T":
                    out.add(nd.attrs)
                else:
                    stack.extend(nd.children)
        while up:
            c = up.pop()
            for pc in (self._inv_parents or {}).get(c, ()):
                if pc not in seen:
                    seen.add(pc)
                    up.append(pc)
                    out.update(nd.attrs for nd in self.classes[pc] if nd.op == "T")
        return out

    # -- lookups ---------------------------------------------------------------------------------
    def find(self, t: Term):
        """The e-class of term ``t`` if every node of it exists, else None."""
        if isinstance(t, Hole):
            return t.cls
        if isinstance(t, Leaf):
            return self.hashcons.get(("T", (), t.name))
        assert isinstance(t, App)
        ch = []
        for a in t.args:
            c = self.find(a)
            if c is None:
                return None
            ch.append(c)
        return self.hashcons.get((t.op, tuple(ch), t.attrs))
