"""The e-graph: egglog, driven through its command language.

egglog stores the terms, does e-matching, union-find and congruence. Every operator becomes an egglog
constructor over ``Term`` (tensor operands) and ``String`` (attributes, in canonical text). A tensor leaf
is ``(T "A@0")``. Each lemma direction compiles to one egglog rule:

* unconditional lemmas whose right side needs no computation become native ``rewrite`` s;
* the others become a rule that records each match of the left side in a relation ``M_<id>``; the
  engine reads those rows from a frozen snapshot, decides the side condition (z3 for symbolic scalars),
  builds the right side and merges it with ``union``.

Python never stores e-class ids across snapshots: it re-reads the e-graph with ``freeze()`` and refers
to e-classes through representative terms.
"""
from __future__ import annotations

import weakref

import re
import time
from dataclasses import dataclass
from typing import Any, Callable

import egglog.bindings as eb

from ..errors import ShapeError
from ..ir import scalar as S
from ..ir.expr import VARIADIC, App, Leaf, PVar, Term, attr_text
from ..ir.ops import OpDef, Registry, parse_number
from .lemma import EvalContext, Rule, check_condition, condition_holds, instantiate, range_relaxed, range_vars, term_ops
from .snapshot import HANDLE, Hole, Snapshot


class BudgetExceeded(Exception):
    """A search ran out of budget. ``snapshot``: the e-graph as it stood then (every equality in it is
    proven; it is only not saturated), for a caller that can use what was found so far."""

    def __init__(self, what: str, snapshot: "Snapshot | None" = None):
        super().__init__(what)
        self.what = what
        self.snapshot = snapshot


GOAL_FROM = 8  # a search with a goal asks it once the e-graph holds 1/GOAL_FROM of its e-node budget


@dataclass
class Budget:
    """Per-operator search budget; running out makes the verdict inconclusive at that operator. (60 iterations:
    the n-way partial sums of RoPE's backward at TP 4 in HF's MLA models -- MiniCPM3, DeepSeek-V3.2, GLM-4-MoE-Lite
    -- reach their fixpoint after 41-60.)"""
    iterations: int = 60
    enodes: int = 20000
    seconds: float = 60.0


MAX_OPTIONAL_ARITY = 6  # ops with a variable number of tensor inputs get one constructor per count


def _cname(op: str, n: int | None = None) -> str:
    base = "C_" + re.sub(r"[^A-Za-z0-9]", "_", op)
    return base if n is None else f"{base}__{n}"


NONE = "#none"  # an absent optional attribute, inside the e-graph (never a legal string attribute)


def _enc(v) -> str:
    return NONE if v is None else attr_text(v)


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Compiling the declarations and rules costs up to a second or two (egglog plans every rule's query); a
# process that verifies again with the same rules (a sweep, a test session) reuses the compiled e-graph, each
# verification in a scope of its own pushed above it. An e-graph is handed to one EGraph at a time; once that
# one is gone (nothing holds it), its scopes are popped back to the compiled state -- the terms of a finished
# verification are not kept -- and the next user takes it.
_COMPILED: dict[str, tuple[Any, list]] = {}  # program -> (egglog e-graph, [weak ref. to its user, scopes open])
_COMPILED_MAX = 2  # (each may hold 250 MB and more: with 8, a test session held 2 GB of them; a sweep reuses one)


def _run_program(eg, text: str):
    """Run egglog program ``text``, one command at a time: egglog's cost per command grows with the length of
    the program it runs in (2000 unions: 54 s in one program, 0.5 s one by one)."""
    cmds = eg.parse_program(text)
    if len(cmds) == 1:
        return eg.run_program(*cmds)
    out = []
    for c in cmds:
        out.extend(eg.run_program(c))
    return out


def _release(eg, record: list) -> None:
    """Pop the scopes a gone user left open (its verification's terms)."""
    pop = eg.parse_program("(pop)")
    for _ in range(record[1]):
        eg.run_program(*pop)
    record[:] = [None, 0]


def _free(record: list) -> bool:
    return record[0] is None or record[0]() is None


def _compiled(user: "EGraph", program: str):
    """The compiled e-graph of ``program`` for ``user`` (at the compiled state) and its record."""
    hit = _COMPILED.get(program)
    if hit is not None and _free(hit[1]):
        eg, record = hit
        _release(eg, record)  # (normally done when the last user went)
    else:
        eg = eb.EGraph()
        _run_program(eg, program)
        record = [None, 0]
        if hit is None:
            if len(_COMPILED) >= _COMPILED_MAX:
                for k in [k for k, (_, r) in _COMPILED.items() if _free(r)][:1]:
                    del _COMPILED[k]
            if len(_COMPILED) < _COMPILED_MAX:
                _COMPILED[program] = (eg, record)
    record[:] = [weakref.ref(user), 0]
    weakref.finalize(user, _release, eg, record).atexit = False
    return eg, record


class EGraph:
    """One egglog e-graph with every op declared and every lemma compiled; ``push``/``pop`` per operator."""

    def __init__(self, reg: Registry, rules: list[Rule], cx: S.Constraints,
                 leaf_shape: Callable[[str], tuple], ops: set[str] | None = None,
                 leaf_dtype: Callable[[str], str] | None = None,
                 leaf_range: Callable[[str], tuple[int, int] | None] | None = None):
        """``ops``: the operators terms will use (besides the rules' own); only those are declared --
        every declared constructor is a table that each (push) copies. ``leaf_dtype``: the dtypes of the
        tensors (lemma conditions may read them; unknown without it)."""
        self.reg = reg
        self.rules = rules
        self.cx = cx
        self.leaf_shape = leaf_shape
        self.leaf_dtype = leaf_dtype
        self.leaf_range = leaf_range  # [lo, hi) of a tensor's integer values, where the relation states one
        self._ops_by_cname: dict[str, tuple[OpDef, int]] = {}
        self._match_rels: set[str] = set()  # relations collecting the matches of non-native rules
        self._decode_cache: dict[tuple, Any] = {}
        self._shape_cache: dict[tuple, tuple] = {}
        self._cond_cache: dict[tuple, bool] = {}  # (rule, shapes, attrs) -> condition proved
        self._side_cache: dict[tuple, Any] = {}  # (rule, shapes, attrs) -> its sides over slots (None: ill-formed)
        self.commands = 0
        self._fresh_scope()
        self._handles = 0  # handles given out (numbers are never reused, so (H k) names one class for ever)
        self._pending: list[str] = []  # (set (H k) term) commands to run before the next one that uses (H k)
        prog = ["(datatype Term)", "(constructor T (String) Term)", f"(function {HANDLE} (i64) Term :merge old)"]
        if ops is not None:
            ops = set(ops)
            for r in rules:
                for p in (r.lhs, r.rhs, r.when):
                    term_ops(p, ops)
        for op in reg:
            if op.meaning is not None or op.shape is None or (ops is not None and op.name not in ops):
                continue
            for k, cn in self._constructors(op):
                self._ops_by_cname[cn] = (op, k)
                sig = " ".join(["Term"] * k + ["String"] * len(op.attrs))
                prog.append(f"(constructor {cn} ({sig}) Term)")
        prog.append("(ruleset lemmas)")
        prog.append("(ruleset clear)")
        prog.append("(ruleset held)")  # exists="tensor" lemmas: run only while ``self.held`` (see saturate)
        prog.append("(ruleset late)")  # late=True lemmas: run only while ``self.late``
        self.held = False
        self.late = False
        self.has_late = any(r.lemma.late for r in rules)
        self.has_held = any(r.exists == "tensor" for r in rules)
        for r in rules:
            prog.extend(self._compile(r))
        self._eg, self._record = _compiled(self, "\n".join(prog))
        self._run("(push)")  # this verification's scope above the compiled rules (popped by the next user)
        self._record[1] += 1

    @staticmethod
    def _constructors(op: OpDef) -> list[tuple[int, str]]:
        if op.arity is not None:
            return [(op.arity, _cname(op.name))]
        if op.name in VARIADIC:
            return [(2, _cname(op.name))]  # left-nested binary
        return [(k, _cname(op.name, k)) for k in range(1, MAX_OPTIONAL_ARITY + 1)]

    def cname(self, op: OpDef, n: int) -> str:
        if op.arity is None and op.name not in VARIADIC:
            if n > MAX_OPTIONAL_ARITY:
                raise ShapeError(f"{op.name} with {n} inputs: at most {MAX_OPTIONAL_ARITY} supported")
            return _cname(op.name, n)
        return _cname(op.name)

    # -- low level ------------------------------------------------------------------------------
    def _run(self, text: str):
        self.commands += 1
        return _run_program(self._eg, text)

    def decode(self, spec, op: OpDef, text: str):
        key = (spec.kind, text)
        v = self._decode_cache.get(key)
        if v is None:
            v = self._decode_cache[key] = _decode(spec.kind, text)
        return v

    def emit(self, t: Term, snap: Snapshot | None = None) -> str:
        if isinstance(t, Leaf):
            return f"(T {_q(t.name)})"
        if isinstance(t, Hole):
            # an e-class, by its handle (H k): egglog's cost grows with the symbols of a command, and the
            # representative term of a class (an 8-way concatenation: 15 symbols) is spelled once per push
            # -- when the handle is set to it -- instead of once per use
            k = snap.handle.get(t.cls)
            if k is None:
                nodes = snap.classes.get(t.cls, ())
                for nd in nodes:
                    if nd.op == "T":
                        return f"(T {_q(nd.attrs)})"
                # the handle is set to an e-node of the class whose operands are named already (a few
                # symbols), else to the class's representative term
                body = None
                for nd in nodes:
                    if all(ch in snap.handle or snap.has_leaf(ch) for ch in nd.children):
                        body = self.emit(App(nd.op, tuple(Hole(ch) for ch in nd.children), nd.attrs), snap)
                        break
                if body is None:
                    body = self.emit(snap.repr(t.cls), snap)
                k = snap.handle[t.cls] = self._handles
                self._handles += 1
                self._pending.append(f"(set ({HANDLE} {k}) {body})")
            return f"({HANDLE} {k})"
        assert isinstance(t, App)
        op = self.reg.get(t.op)
        parts = [self.emit(a, snap) for a in t.args]
        parts += [_q(_enc(v)) for _, v in t.attrs]
        return f"({self.cname(op, len(t.args))} {' '.join(parts)})"

    # -- compiling rules ------------------------------------------------------------------------
    def _pat(self, p: Term, facts: list[str], fresh: list[int]) -> str:
        if isinstance(p, PVar):
            return "v_" + p.name
        assert isinstance(p, App)
        parts = [self._pat(a, facts, fresh) for a in p.args]
        for _, v in p.attrs:
            parts.append("v_" + v.name if isinstance(v, PVar) else _q(_enc(v.value)))
        return f"({self.cname(self.reg.get(p.op), len(p.args))} {' '.join(parts)})"

    def _query(self, p: App, root: str | None, facts: list[str], fresh: list[int], inner_sums: bool = False) -> None:
        """Facts that bind every node of pattern ``p`` (root bound to ``root`` when given). With
        ``inner_sums``: and that no ``sum`` node below the root is in the class of one of its summands --
        ``x = x + z`` (z is zero: a slice of a zero-padded partial sum is the slice itself) is never taken
        apart: regrouping ``y + x`` as ``(y + z) + x`` adds z again and again without end, and nothing clean
        comes of it (the root may be such a node: its rewrites stay in its class)."""
        def go(q: Term, name: str | None) -> str:
            if isinstance(q, PVar):
                return "v_" + q.name
            parts = [go(a, None) for a in q.args]
            for _, v in q.attrs:
                parts.append("v_" + v.name if isinstance(v, PVar) else _q(_enc(v.value)))
            fresh[0] += 1
            var = name or f"p{fresh[0]}"
            facts.append(f"(= {var} ({self.cname(self.reg.get(q.op), len(q.args))} {' '.join(parts)}))")
            if q.op == SUM and inner_sums and q is not p:
                facts.extend(f"(!= {var} {x})" for x in parts[:len(q.args)])
            return var
        if root is None:
            for a in p.args:
                if isinstance(a, App):
                    go(a, None)
        else:
            go(p, root)

    def _compile(self, r: Rule) -> list[str]:
        guards = list(dict.fromkeys(_two_values(r.lhs) + _two_values(r.rhs)
                                    + (_two_values(r.when) if r.when is not None else [])))
        if r.native and not any(_has_sum(a) for a in r.lhs.args):
            facts: list[str] = []
            when = f" :when ({' '.join(guards)})" if guards else ""
            return [f"(rewrite {self._pat(r.lhs, facts, [0])} {self._pat(r.rhs, facts, [0])}{when} :ruleset lemmas)"]
        if r.native:  # (a rewrite spelt as a rule: its sums' classes are bound, see _query)
            facts = []
            self._query(r.lhs, "root", facts, [0], inner_sums=True)
            return [f"(rule ({' '.join(facts + guards)}) ((union root {self._pat(r.rhs, [], [0])})) :ruleset lemmas)"]
        facts: list[str] = []
        root = "root" if r.exists in ("root", "tensor") else None
        self._query(r.lhs, root, facts, [0], inner_sums=True)
        if r.exists == "tensor":  # the root's e-class holds a tensor (a leaf)
            facts.append("(= root (T leaf_name))")
        for k, var in enumerate(r.lemma.tensors):  # ... and these variables' e-classes
            facts.append(f"(= v_{var} (T leaf_{k}))")
        if r.when is not None:
            self._query(r.when, "when", facts, [100])
            if root:  # the e-node a constrained lemma needs is another one than the term it rewrites
                facts.append("(!= root when)")
        facts += guards
        cols = (["root"] if root else []) + ["v_" + v for v in r.tvars] + ["v_" + v for v in r.avars]
        sorts = (["Term"] if root else []) + ["Term"] * len(r.tvars) + ["String"] * len(r.avars)
        # rules with the same columns share one relation (each declared table costs every push a copy)
        rel = "M_" + "".join(x[0] for x in sorts)
        decl = []
        if rel not in self._match_rels:
            # rows are read once (Snapshot) and then deleted by the ``clear`` rules before the next run, so a
            # snapshot holds only the matches found since the last one (a match found again is found anew)
            xs = " ".join(f"x{i}" for i in range(len(sorts) + 1))
            decl = [f"(relation {rel} (String {' '.join(sorts)}))",
                    f"(rule (({rel} {xs})) ((delete ({rel} {xs}))) :ruleset clear)"]
        self._match_rels.add(rel)
        rs = "held" if r.exists == "tensor" else "late" if r.lemma.late else "lemmas"
        return decl + [f"(rule ({' '.join(facts)}) (({rel} {_q(r.id)} {' '.join(cols)})) :ruleset {rs})"]

    # -- per-operator use -----------------------------------------------------------------------
    def push(self) -> None:
        self._run("(push)")
        self._record[1] += 1
        self._seen: set = set()
        self._fresh_scope()

    def pop(self) -> None:
        self._run("(pop)")
        self._record[1] -= 1
        self._fresh_scope()

    def push_nested(self) -> None:
        """A push inside an operator's push (a side question, answered and undone): the match rows already
        handled in the outer scope stay handled after :meth:`pop_nested`."""
        self._outer_seen = (getattr(self, "_seen", None), self._pending[:])
        self.push()

    def pop_nested(self) -> None:
        self.pop()
        self._seen, self._pending = self._outer_seen

    def _fresh_scope(self) -> None:
        """Caches keyed by egglog values (e-class ids, interned strings): valid until the next push or pop,
        which can hand the same value to something else."""
        self._node_shapes: dict[tuple, tuple] = {}  # (op, child e-classes, attributes) -> shape
        self._strings: dict[Any, str] = {}  # egglog string value -> text
        self._raw_attrs: dict[str, dict] = {}  # op -> raw attribute values -> decoded attributes

    def add(self, t: Term) -> None:
        self._run(self.emit(t))

    def union(self, a: Term, b: Term, snap: Snapshot | None = None) -> None:
        text = f"(union {self.emit(a, snap)} {self.emit(b, snap)})"
        if self._pending:
            for cmd in self._pending:
                self._run(cmd)
            self._pending.clear()
        self._run(text)

    def union_all(self, pairs) -> None:
        """Several unions in one egglog program (G_d facts: small terms)."""
        if pairs:
            self._run("\n".join(f"(union {self.emit(a)} {self.emit(b)})" for a, b in pairs))

    def snapshot(self) -> Snapshot:
        return Snapshot(self)

    def saturate(self, budget: Budget, deadline: float, stats: dict,
                 goal: Callable[[Snapshot], bool] | None = None) -> Snapshot:
        """Run the lemmas to a fixpoint (or raise BudgetExceeded); return the final snapshot. The lemmas
        constrained to e-classes that hold a tensor (``exists="tensor"``) run too while ``self.held`` is set:
        the engine sets it only where the others leave an operator's output without a clean expression."""
        extra = (" (run held)" if self.held else "") + (" (run late)" if self.late else "")
        schedule = f"(run-schedule (run clear) (run lemmas){extra})"
        check_at = budget.enodes // GOAL_FROM  # (``goal``: asked once the e-graph is this large, then at each doubling)
        for _ in range(budget.iterations):
            out = self._run(schedule)
            report = out[-1].report
            # no native rewrite matched: the run added match rows only; when none of them merges anything
            # either, the next run would find nothing new (no rule reads the match relations) -- saturated
            # (rules that mention a match relation M_...: the match rules and the clear rules)
            updated = report.updated and any(n for rule, n in report.num_matches_per_rule.items()
                                             if "(M_" not in rule)
            snap = self.snapshot()
            if snap.n_nodes > budget.enodes:
                raise BudgetExceeded(f"e-graph grew past {budget.enodes} e-nodes", snap)
            if time.monotonic() > deadline:
                raise BudgetExceeded(f"time budget of {budget.seconds:g} s ran out", snap)
            if goal is not None and snap.n_nodes >= check_at:
                if goal(snap):  # (a large search whose answer is there: stopped, as if its budget ran out)
                    raise BudgetExceeded(f"stopped at {snap.n_nodes} e-nodes, its outputs found", snap)
                check_at *= 2
            merged = self._apply_matches(snap, stats)
            stats["iterations"] = stats.get("iterations", 0) + 1
            if not updated and not merged:
                return snap
        raise BudgetExceeded(f"no fixpoint after {budget.iterations} iterations", self.snapshot())

    def _apply_matches(self, snap: Snapshot, stats: dict) -> int:
        merged = 0
        ctx = EvalContext(lambda h: snap.shape(h.cls), self.cx, self.reg.functions, lambda h: snap.dtype(h.cls),
                          lambda h: snap.vrange(h.cls))
        # sides over _Slot variables
        slot_ctx = EvalContext(lambda h: h.cls.shape, self.cx, self.reg.functions, lambda h: h.cls.dtype,
                               lambda h: h.cls.vrange)
        shape = snap._shape
        seen = self._seen
        values: dict[tuple, Any] = {}  # (attribute kind, egglog value) -> decoded attribute
        for r in self.rules:
            if r.native:
                continue
            keys = snap.matches.get(r.id)
            if not keys:
                continue
            rooted = r.exists != "args"
            first = 2 if rooted else 1  # key: (rule, [root], tensor variables..., attribute variables...)
            tvars = r.tvars
            nt = len(tvars)
            aspecs = [(v, op, op.attr_spec(attr)) for v, (op, attr) in r.avars.items()]
            tv, av = r.cond_vars
            for key in keys:  # rows not seen since the last push
                if key in seen:
                    continue
                seen.add(key)
                env: dict[str, Any] = {}
                for v, c in zip(tvars, key[first:first + nt]):
                    env[v] = Hole(c)
                for (v, op, spec), val in zip(aspecs, key[first + nt:]):
                    vk = (spec.kind, val)
                    x = values.get(vk, _MISSING)
                    if x is _MISSING:
                        x = values[vk] = self.decode(spec, op, snap._strings(val))
                    env[v] = x
                # the condition and every attribute of the sides read only shapes and attribute values
                # (FUNCTIONS): decided and built once per distinct set -- the sides over slots that stand for
                # the tensor variables, then filled with this match's e-classes
                tk = (r.id, tuple(shape[c] for c in key[first:first + nt]), tuple(env[v] for v, _, _ in aspecs))
                if r.reads_dtype:
                    tk += (tuple(snap.dtype(c) for c in key[first:first + nt]),)
                if r.reads_range:
                    tk += (tuple(snap.vrange(c) for c in key[first:first + nt]),)
                tmpl = self._side_cache.get(tk, _MISSING)
                if tmpl is _MISSING:
                    ck = (r.id, tuple(shape[env[v].cls] for v in tv), tuple(env[v] for v in av))
                    if r.reads_dtype:
                        ck += (tuple(snap.dtype(env[v].cls) for v in tv),)
                    if r.reads_range:
                        ck += (tuple(snap.vrange(env[v].cls) for v in tv),)
                    ok = self._cond_cache.get(ck)
                    if ok is None:
                        ok = self._cond_cache[ck] = check_condition(r, env, ctx)
                        if not ok and r.reads_range:
                            self._range_wanted(r, env, ctx, snap, stats)
                    tmpl = None
                    if ok:
                        slots = dict(env)
                        for v in tvars:
                            slots[v] = Hole(_Slot(v, shape[env[v].cls],
                                                  snap.dtype(env[v].cls) if r.reads_dtype else None,
                                                  snap.vrange(env[v].cls) if r.reads_range else None))
                        try:
                            tmpl = (instantiate(r.rhs, slots, slot_ctx, self.reg),
                                    None if rooted else instantiate(r.lhs, slots, slot_ctx, self.reg))
                        except (ShapeError, ValueError, ZeroDivisionError, IndexError, TypeError, OverflowError):
                            tmpl = None
                    self._side_cache[tk] = tmpl
                if tmpl is None:
                    continue
                rhs = _fill(tmpl[0], env)
                lhs = Hole(key[1]) if rooted else _fill(tmpl[1], env)
                a, b = snap.find(lhs), snap.find(rhs)
                if a is not None and a == b:
                    continue
                self.union(lhs, rhs, snap)  # (one program per union: egglog slows on long programs)
                r.hits += 1
                stats.setdefault("lemma_hits", {}).setdefault(r.lemma.label, 0)  # by pack:number
                stats["lemma_hits"][r.lemma.label] += 1
                merged += 1
        return merged


    @staticmethod
    def _range_wanted(r, env: dict, ctx, snap: Snapshot, stats: dict) -> None:
        """A condition that failed on value ranges alone (it holds with them relaxed): the lemma and the G_d
        tensors whose range it wanted, for the hint that names ``ranges:`` (``stats["range_wanted"]``)."""
        if not condition_holds(range_relaxed(r.cond), env, ctx):
            return
        names = set()
        for v in range_vars(r.cond):
            h = env.get(v)
            for nd in snap.classes.get(getattr(h, "cls", None), ()):
                if nd.op == "T" and isinstance(nd.attrs, str):
                    names.add(nd.attrs)
        if names:
            stats.setdefault("range_wanted", {}).setdefault(r.lemma.label, set()).update(names)


@dataclass(frozen=True)
class _Slot:
    """Stands for tensor variable ``name`` (of shape ``shape``) in a lemma side built once for many matches."""
    name: str
    shape: tuple
    dtype: str | None = None
    vrange: tuple | None = None


_MISSING = object()


def _fill(t: Term, env: dict) -> Term:
    """Side ``t`` with its slots replaced by the match's bindings."""
    if isinstance(t, Hole):
        return env[t.cls.name] if isinstance(t.cls, _Slot) else t
    if isinstance(t, App):
        return App(t.op, tuple(_fill(a, env) for a in t.args), t.attrs)
    return t


SUM = "core.sum"


def _has_sum(p: Term) -> bool:
    return isinstance(p, App) and (p.op == SUM or any(_has_sum(a) for a in p.args))


def _two_values(p: Term) -> list[str]:
    """``(!= a b)`` for every ``sum(?a, ?b)`` in a pattern: the algebra of partial sums (distributing,
    reassociating) is about two different values; no lemma makes or takes apart a value added to itself (a
    scaling). Distributing a share x/2 over x = sum(x/2, x/2) would never end (x/4, x/8, ...)."""
    if not isinstance(p, App):
        return []
    out = [g for a in p.args for g in _two_values(a)]
    if p.op == "core.sum" and all(isinstance(a, PVar) for a in p.args) and p.args[0].name != p.args[1].name:
        out.append(f"(!= v_{p.args[0].name} v_{p.args[1].name})")
    return out


def _decode(kind: str, text: str):
    if text == NONE:
        return None
    if kind == "bool":
        return text == "true"
    if kind == "int":
        return int(text)
    if kind == "scalar":
        return S.parse(text)
    if kind == "ints":
        inner = text.strip()[1:-1].strip()
        return tuple(int(x) for x in inner.split(",")) if inner else ()
    if kind == "scalars":
        return S.parse_list(text)
    if kind == "number":
        return parse_number(text)
    return text
