"""Lemmas compiled into rules: :class:`Rule` (one direction of a lemma, for the e-graph and the fuzzer), the
functions conditions call (``FUNCTIONS``) and their evaluation. The lemmas themselves are data, declared with
:func:`graphguard.ir.lemma.L` (packs import it from there, not from the engine).

A lemma is one line -- a numeric reference, a name, ``lhs => rhs`` (or ``lhs <=> rhs`` for both
directions), an optional side condition, and where the left side must exist. Its identity is
``pack:number`` (``core:104``: the pack's entry-point name, a number unique within that pack)::

    L(104, "slice-of-concat-left",
      "slice(concat(?p, ?q, dim=?d), dim=?d, start=?s, end=?e) => slice(?p, dim=?d, start=?s, end=?e)",
      "?e <= size(?p, ?d)")

Patterns use the relation syntax with ``?x`` variables; right-hand attributes may compute
(``start=?s - size(?p, ?d)``). Conditions are decided by :class:`graphguard.ir.scalar.Constraints`
(integers directly, symbolic scalars by z3) in three-valued logic: a lemma fires only when its
condition is *proved*. ``exists="args"`` makes a *constrained* lemma (paper §4.3): only the arguments of
the left side must already be e-nodes; both sides are then built and merged -- how
``X -> concat(X[a:b], X[b:c])`` is allowed without inventing every split point. ``exists="tensor"``: the left
side must exist in an e-class that holds a tensor (a leaf: in a verification, a G_d tensor) -- a rewrite
worth making only where a rank computes the value (each part of a rank's concatenation is a slice of it).

Lemmas are checked when built (unknown op, unbound variable, malformed pattern: an error naming the
lemma and its file:line) and each remembers where it was written.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, fields, is_dataclass
from fractions import Fraction
from typing import Any, Callable

import sympy as sp

from ..errors import GraphGuardError, ShapeError
from ..ir import scalar as S
from ..ir.dtypes import rounded
from ..ir.expr import VARIADIC, ABin, ACall, AConst, AExpr, AList, App, AVar, Leaf, PVar, Term, attr_text
from ..ir.lemma import Lemma
from ..ir.ops import OpDef, Registry, coerce_attr, normalize_dims
from ..ir.relation import ALIASES, RawCall, parse_cond, parse_raw


class LemmaError(GraphGuardError):
    pass


@dataclass
class Rule:
    """One direction of a lemma, ready for the e-graph and the fuzzer."""
    lemma: Lemma
    id: str
    lhs: App
    rhs: Term
    cond: AExpr | None
    exists: str
    tvars: list[str]
    avars: dict[str, tuple[OpDef, str]]  # attr var -> (op, attr name) where it is bound
    native: bool = False
    hits: int = 0
    when: App | None = None
    index: dict = None  # index tensor variable -> the bound of its values (an attribute expression)
    cond_vars: tuple = ()  # (tensor vars, attr vars) the condition reads: its value depends on their shapes/values only
    reads_dtype: bool = False  # the condition or the right side calls dtype(): it depends on dtypes too
    reads_range: bool = False  # ... calls vmin()/vend(): it depends on the stated value ranges too

    @property
    def ref(self) -> int:
        return self.lemma.ref


# -- building -----------------------------------------------------------------------------------

def _lower_pattern(raw, reg: Registry, lem: Lemma) -> Term:
    if isinstance(raw, PVar):
        return raw
    if isinstance(raw, Leaf):
        raise LemmaError(f"lemma {lem.label} ({lem.where}): a pattern cannot name tensor '{raw.name}' "
                         f"(use a ?variable)")
    assert isinstance(raw, RawCall)
    op = reg.get(ALIASES.get(raw.name, raw.name))
    if op is None:
        raise LemmaError(f"lemma {lem.label} ({lem.where}): unknown operator '{raw.name}'")
    if op.meaning is not None:
        raise LemmaError(f"lemma {lem.label} ({lem.where}): {op.name} cannot appear in a pattern")
    args = tuple(_lower_pattern(a, reg, lem) for a in raw.args)
    if op.arity is not None and len(args) != op.arity:
        raise LemmaError(f"lemma {lem.label} ({lem.where}): {op.name} takes {op.arity} argument(s)")
    if op.arity is None and op.name in VARIADIC and len(args) != 2:
        raise LemmaError(f"lemma {lem.label} ({lem.where}): variadic {op.name} is binary inside patterns")
    given = dict(raw.kwargs)
    unknown = set(given) - {a.name for a in op.attrs}
    if unknown:
        raise LemmaError(f"lemma {lem.label} ({lem.where}): unknown attribute(s) {sorted(unknown)} of {op.name}")
    attrs = []
    for spec in op.attrs:
        if spec.name in given:
            v = _negated(given[spec.name])
            if isinstance(v, AList):
                v = AList(tuple(_negated(x) for x in v.items))
            if isinstance(v, AConst):
                c = v.value
                if isinstance(c, tuple) and c[0] == "sym":
                    c = c[1] if spec.kind == "str" else S.symbol(c[1])
                v = AConst(coerce_attr(op, spec, c, f"lemma {lem.label}"))
            elif isinstance(v, AList) and all(isinstance(x, AConst) for x in v.items):
                v = AConst(coerce_attr(op, spec, [x.value for x in v.items], f"lemma {lem.label}"))
            attrs.append((spec.name, v))
        elif spec.required:
            raise LemmaError(f"lemma {lem.label} ({lem.where}): {op.name} needs attribute {spec.name}=")
        else:
            attrs.append((spec.name, AConst(coerce_attr(op, spec, spec.default, f"lemma {lem.label}"))))
    return App(op.name, args, tuple(attrs))


def _negated(v):
    """``-1`` as written in a pattern (parsed as ``0 - 1``): the constant -1."""
    if (isinstance(v, ABin) and v.op == "-" and isinstance(v.left, AConst) and v.left.value == 0
            and isinstance(v.right, AConst) and isinstance(v.right.value, (int, Fraction))
            and not isinstance(v.right.value, bool)):
        return AConst(-v.right.value)
    return v


def _vars(p: Term, tv: list, av: dict, lem: Lemma, lhs: bool) -> None:
    if isinstance(p, PVar):
        if p.name not in tv:
            tv.append(p.name)
        return
    assert isinstance(p, App)
    for a in p.args:
        _vars(a, tv, av, lem, lhs)
    for name, v in p.attrs:
        if isinstance(v, PVar):
            if lhs:
                av.setdefault(v.name, (p.op, name))
        elif lhs and not isinstance(v, AConst):
            raise LemmaError(f"lemma {lem.label} ({lem.where}): left-hand attributes must be ?variables or "
                             f"constants, not expressions")


def _expr_vars(e, out: set) -> None:
    if isinstance(e, PVar):
        out.add(e.name)
    elif isinstance(e, ABin):
        _expr_vars(e.left, out)
        _expr_vars(e.right, out)
    elif isinstance(e, ACall):
        for a in e.args:
            _expr_vars(a, out)
    elif isinstance(e, AList):
        for a in e.items:
            _expr_vars(a, out)
    elif isinstance(e, App):
        for a in e.args:
            _expr_vars(a, out)
        for _, v in e.attrs:
            _expr_vars(v, out)


def _expr_calls(e, out: set) -> None:
    """Names of the functions an attribute expression (or a pattern's attributes) calls."""
    if isinstance(e, ACall):
        out.add(e.fn)
    for sub in (e.args if isinstance(e, (ACall, App)) else e.items if isinstance(e, AList)
                else (e.left, e.right) if isinstance(e, ABin) else ()):
        _expr_calls(sub, out)
    if isinstance(e, App):
        for _, v in e.attrs:
            _expr_calls(v, out)


def _is_plain(p: Term) -> bool:
    if isinstance(p, PVar):
        return True
    return all(_is_plain(a) for a in p.args) and all(isinstance(v, (PVar, AConst)) for _, v in p.attrs)


def _negative_dims(p: Term, reg: Registry):
    """(App, attr spec, operand) for every literal negative dim attribute (``dim=-1``) in pattern ``p``."""
    if not isinstance(p, App):
        return
    for a in p.args:
        yield from _negative_dims(a, reg)
    op = reg.get(p.op)
    for name, v in p.attrs:
        spec = op.attr_spec(name)
        if spec.dim_of is None or not isinstance(v, AConst) or spec.dim_of >= len(p.args):
            continue
        vals = v.value if isinstance(v.value, tuple) else (v.value,)
        if any(isinstance(x, int) and not isinstance(x, bool) and x < 0 for x in vals):
            yield p, spec, p.args[spec.dim_of]


def _lift_negative_dims(p: Term, reg: Registry, lem: Lemma, conds: list) -> Term:
    """A left side matches normalised terms only, so a literal ``dim=-1`` becomes a fresh variable with the
    condition ``?v == rank(?x) - 1`` (``?x`` the operand it counts from, which must be a ?variable)."""
    if not isinstance(p, App):
        return p
    args = tuple(_lift_negative_dims(a, reg, lem, conds) for a in p.args)
    op = reg.get(p.op)
    attrs = []
    for name, v in p.attrs:
        spec = op.attr_spec(name)
        neg = (spec.dim_of is not None and isinstance(v, AConst) and spec.dim_of < len(p.args)
               and any(isinstance(x, int) and not isinstance(x, bool) and x < 0
                       for x in (v.value if isinstance(v.value, tuple) else (v.value,))))
        if neg:
            x = p.args[spec.dim_of]
            if not isinstance(x, PVar):
                raise LemmaError(f"lemma {lem.label} ({lem.where}): a negative dim {name}={attr_text(v.value)} of "
                                 f"{p.op} needs a ?variable operand (or write it non-negative)")
            fresh = PVar(f"__dim{len(conds)}")
            rank = ACall("rank", (x,))
            want = (AList(tuple(ABin("+", rank, AConst(d)) if d < 0 else AConst(d) for d in v.value))
                    if isinstance(v.value, tuple) else ABin("+", rank, AConst(v.value)))
            conds.append(ABin("==", fresh, want))
            v = fresh
        attrs.append((name, v))
    return App(p.op, args, tuple(attrs))


def build_rules(lem: Lemma, reg: Registry) -> list[Rule]:
    for sep in ("<=>", "=>"):
        if sep in lem.rule:
            left, right = lem.rule.split(sep, 1)
            both = sep == "<=>"
            break
    else:
        raise LemmaError(f"lemma {lem.label} ({lem.where}): rule must be 'lhs => rhs' or 'lhs <=> rhs'")
    if lem.exists not in ("root", "args", "tensor"):
        raise LemmaError(f"lemma {lem.label} ({lem.where}): exists must be 'root', 'args' or 'tensor'")
    try:
        lp = _lower_pattern(parse_raw(left.strip(), f"lemma {lem.label}"), reg, lem)
        rp = _lower_pattern(parse_raw(right.strip(), f"lemma {lem.label}"), reg, lem)
        cond = parse_cond(lem.cond, f"lemma {lem.label}") if lem.cond.strip() else None
        when = _lower_pattern(parse_raw(lem.when.strip(), f"lemma {lem.label}"), reg, lem) if lem.when.strip() else None
    except LemmaError:
        raise
    except GraphGuardError as e:
        raise LemmaError(f"lemma {lem.label} ({lem.where}): {e}") from None
    calls: set[str] = set()
    for e in (lp, rp, cond):
        _expr_calls(e, calls)
    unknown = sorted(calls - FUNCTIONS.keys() - reg.functions.keys())
    if unknown:
        raise LemmaError(f"lemma {lem.label} ({lem.where}): unknown function(s) {', '.join(f + '()' for f in unknown)} "
                         f"(built-in, or a plugin's graphguard_lemma_functions)")
    pairs = [(lp, rp, "")] + ([(rp, lp, "r")] if both else [])
    rules = []
    base_cond, base_when = cond, when
    for lhs, rhs, suffix in pairs:
        if not isinstance(lhs, App):
            raise LemmaError(f"lemma {lem.label} ({lem.where}): the left side must be an operator pattern")
        lifted: list = []
        lhs = _lift_negative_dims(lhs, reg, lem, lifted)
        when = _lift_negative_dims(base_when, reg, lem, lifted) if base_when is not None else None
        cond = base_cond
        for c in lifted:
            cond = c if cond is None else ABin("and", c, cond)
        tv: list[str] = []
        av: dict[str, tuple] = {}
        _vars(lhs, tv, av, lem, True)
        if when is not None:
            if both:
                raise LemmaError(f"lemma {lem.label} ({lem.where}): 'when' needs a one-way rule (=>)")
            _vars(when, tv, av, lem, True)
        bound = set(tv) | set(av)
        used: set[str] = set()
        _expr_vars(rhs, used)
        if cond is not None:
            _expr_vars(cond, used)
        if used - bound:
            raise LemmaError(f"lemma {lem.label} ({lem.where}): unbound variable(s) "
                             f"{', '.join('?' + v for v in sorted(used - bound))}")
        if set(tv) & set(av):
            raise LemmaError(f"lemma {lem.label} ({lem.where}): a variable is used both as tensor and attribute")
        if lem.exists == "args":
            arg_vars: list[str] = []
            for a in lhs.args:
                if isinstance(a, App):
                    _vars(a, arg_vars, {}, lem, True)
            loose = [a.name for a in lhs.args if isinstance(a, PVar) and a.name not in arg_vars]
            if loose:
                raise LemmaError(f"lemma {lem.label} ({lem.where}): with exists='args' every top-level "
                                 f"?variable must occur inside another argument ({loose})")
        avars = {k: (reg.get(op), name) for k, (op, name) in av.items()}
        native = (cond is None and when is None and lem.exists == "root" and not lem.late and not lem.tensors
                  and _is_plain(rhs)
                  and not any(True for _ in _negative_dims(rhs, reg)))  # (those are normalised when built)
        index = {}
        for v, limit in lem.index:
            try:
                index[v] = parse_cond(limit, f"lemma {lem.label}")
            except GraphGuardError as e:
                raise LemmaError(f"lemma {lem.label} ({lem.where}): {e}") from None
            used = set()
            _expr_vars(index[v], used)
            if v not in tv or used - bound:
                raise LemmaError(f"lemma {lem.label} ({lem.where}): index variable ?{v} or its bound is not bound "
                                 f"by the left side")
        cv: set[str] = set()
        if cond is not None:
            _expr_vars(cond, cv)
        rcalls: set[str] = set()
        for e in (rhs, cond):
            _expr_calls(e, rcalls)
        rid = f"{lem.label}{'.' + lem.variant if lem.variant else ''}{suffix}"  # unique: (pack, number, op, way)
        rules.append(Rule(lem, rid, lhs, rhs, cond, lem.exists, tv, avars, native, when=when,
                          index=index, cond_vars=(tuple(v for v in tv if v in cv), tuple(v for v in avars if v in cv)),
                          reads_dtype="dtype" in rcalls, reads_range=bool(rcalls & RANGE_FUNCTIONS)))
    return rules


def term_ops(t, out: set) -> set:
    if isinstance(t, App):
        out.add(t.op)
        for a in t.args:
            term_ops(a, out)
    return out


def relevant_rules(rules: list[Rule], ops: set[str]) -> list[Rule]:
    """The rules that can ever match terms built from ``ops``: those whose left side (and ``when``) use only
    ops present or produced by another such rule's right side. The others could never fire, so leaving
    them out of the e-graph changes no result; it saves e-matching every loaded pack's rules."""
    ops, keep, changed = set(ops), set(), True
    need = [term_ops(r.lhs, set()) | (term_ops(r.when, set()) if r.when is not None else set()) for r in rules]
    while changed:
        changed = False
        for i, r in enumerate(rules):
            if i not in keep and need[i] <= ops:
                keep.add(i)
                new = term_ops(r.rhs, set()) - ops
                changed = changed or bool(new)
                ops |= new
    return [r for i, r in enumerate(rules) if i in keep]


def compile_lemmas(lemmas: list[Lemma], reg: Registry) -> list[Rule]:
    out = []
    for lem in lemmas:
        out.extend(build_rules(lem, reg))
    return out



# -- one fact, written once: rules equal up to the names of their variables ----------------------------

def _renamed(x, names: dict):
    """``x`` with its pattern variables renamed ``v0, v1, ...`` in order of first occurrence (``names``: the
    renaming so far, extended)."""
    if isinstance(x, (PVar, AVar)):
        return type(x)(names.setdefault(x.name, f"v{len(names)}"))
    if isinstance(x, tuple):
        return tuple(_renamed(i, names) for i in x)
    if is_dataclass(x) and not isinstance(x, type):
        return type(x)(*(_renamed(getattr(x, f.name), names) for f in fields(x)))
    return x


def _conjuncts(c) -> list:
    if c is None:
        return []
    if isinstance(c, ABin) and c.op == "and":
        return _conjuncts(c.left) + _conjuncts(c.right)
    return [c]


def normal_form(rule: Rule) -> tuple[tuple, frozenset]:
    """(the rule's (lhs, rhs) with its variables renamed in order of first occurrence, its guards): every
    condition a rule must meet to fire -- the conjuncts of its condition, the pattern that must exist (``when``),
    ``exists``, ``late`` and ``tensors`` -- in the same renaming."""
    names: dict = {}
    key = (_renamed(rule.lhs, names), _renamed(rule.rhs, names))
    guards = set()
    if rule.when is not None:
        guards.add(("when", _renamed(rule.when, names)))
    guards.update(("if", _renamed(c, names)) for c in _conjuncts(rule.cond))
    if rule.exists in ("root", "tensor"):  # (exists="args" builds the left side: no guard)
        guards.add(("exists", "root"))
    if rule.exists == "tensor":
        guards.add(("exists", "tensor"))
    if rule.lemma.late:
        guards.add(("late",))
    guards.update(("tensor", names.get(v, v)) for v in rule.lemma.tensors)
    return key, frozenset(guards)


def _guard_text(g: tuple) -> str:
    if g[0] == "when":
        return "a 'when' pattern that must exist"
    if g[0] == "if":
        return "a condition"
    if g[0] == "exists":
        return f"exists='{g[1]}'"
    return {"late": "late=True", "tensor": "tensors="}[g[0]]


def duplicate_problems(rules: list[Rule]) -> list[str]:
    """Pack lemmas (hand-written) with a rule equal, up to the names of its variables, to a family's derived rule
    (engine/families.py) or to another pack lemma's rule: one line each. Refused: such a lemma without a stated
    reason (``L(..., duplicates="...")``) -- also where it drops a guard of the derived rule it restates (a
    condition, a ``when`` pattern, ``late``...), so that it fires where the family's rule does not: the reason then
    says why it must (the searches that need it; its soundness is the lemma fuzzer's, as every lemma's)."""
    derived: dict = {}
    hand: dict = {}
    forms = []
    for r in rules:
        key, guards = normal_form(r)
        forms.append((r, key, guards))
        if r.lemma.variant:
            derived.setdefault(key, []).append((r, guards))
    out = []
    for r, key, guards in forms:
        if r.lemma.variant:
            continue
        lem = r.lemma
        ds = derived.get(key)
        if ds is not None:  # (the derived rule it restates with the fewest guards it drops)
            dr, dguards = min(ds, key=lambda d: len(d[1] - guards))
            missing = sorted({_guard_text(g) for g in dguards - guards})
            if missing and not lem.duplicates:
                out.append(f"lemma {lem.label} {lem.name} ({lem.where}): rule {r.id} restates {dr.id} "
                           f"{dr.lemma.name} (derived: {dr.lemma.where}) without its guards ({', '.join(missing)}), "
                           f"so it fires where the family's rule does not; remove it, or state why it must "
                           f"(L(..., duplicates=\"...\"))")
            elif not missing and not lem.duplicates:
                out.append(f"lemma {lem.label} {lem.name} ({lem.where}): rule {r.id} equals {dr.id} "
                           f"{dr.lemma.name} (derived: {dr.lemma.where}) up to variable names; remove it, or state "
                           f"why it must exist (L(..., duplicates=\"...\"))")
            continue
        first = hand.setdefault(key, r)
        if first is not r and not (lem.duplicates or first.lemma.duplicates):
            out.append(f"lemma {lem.label} {lem.name} ({lem.where}): rule {r.id} equals {first.id} "
                       f"{first.lemma.name} ({first.lemma.where}) up to variable names; remove one, or state why "
                       f"it must exist (L(..., duplicates=\"...\"))")
    return out


# -- evaluating attribute expressions and conditions ------------------------------------------------

class EvalContext:
    """How to read a bound tensor variable's shape; the constraint oracle."""

    def __init__(self, shape_of: Callable[[Any], tuple], cx: S.Constraints, functions: dict | None = None,
                 dtype_of: Callable[[Any], str | None] | None = None,
                 range_of: Callable[[Any], tuple[int, int] | None] | None = None):
        self.shape_of = shape_of
        self.cx = cx
        self.functions = {**FUNCTIONS, **functions} if functions else FUNCTIONS  # + plugins' (Registry.functions)
        self.dtype_of = dtype_of  # a binding's dtype; None (or a None answer): unknown, dtype() does not decide
        self.range_of = range_of  # a binding's [lo, hi) of values (relation files' ranges:); None: unknown

    def vrange(self, t) -> tuple[int, int]:
        r = self.range_of(t) if self.range_of is not None else None
        if r is None:
            raise ValueError("value range unknown")
        return r

    def dtype(self, t) -> str:
        d = self.dtype_of(t) if self.dtype_of is not None else None
        if d is None:
            raise ValueError("dtype unknown")
        return d


def _perm(v) -> tuple:
    return tuple(int(x) for x in v)


FUNCTIONS: dict[str, Callable] = {
    # name: f(ctx, *args) -- tensor arguments arrive as their binding; the ctx reads shapes
    "size": lambda ctx, t, d: ctx.shape_of(t)[int(d)],
    "rank": lambda ctx, t: len(ctx.shape_of(t)),
    "shape": lambda ctx, t: tuple(ctx.shape_of(t)),
    "numel": lambda ctx, t: S.norm(sp.Mul(*[S.sym(x) for x in ctx.shape_of(t)])),
    "compose": lambda ctx, p, q: tuple(_perm(p)[i] for i in _perm(q)),  # permute(permute(x,p),q)
    "inverse": lambda ctx, p: tuple(_perm(p).index(i) for i in range(len(p))),
    "index": lambda ctx, p, v: _perm(p).index(int(v)),
    "is_identity": lambda ctx, p: _perm(p) == tuple(range(len(p))),
    "len": lambda ctx, p: len(p),
    "reshape_concat_ok": lambda ctx, a, b, d, t: _reshape_concat_ok(ctx, ctx.shape_of(a), ctx.shape_of(b), int(d),
                                                                    tuple(t)),
    "reshape_part": lambda ctx, a, d, t: _reshape_part(ctx, ctx.shape_of(a), int(d), tuple(t))[1],
    "reshape_dim": lambda ctx, a, d, t: _reshape_part(ctx, ctx.shape_of(a), int(d), tuple(t))[0],
    # slice(reshape(x, s), dim=d) is a slice of x along reshape_src_dim, from reshape_src_index of its bounds
    "reshape_src_dim": lambda ctx, x, s, d: _reshape_src(ctx, ctx.shape_of(x), tuple(s), int(d))[0],
    "reshape_src_index": lambda ctx, x, s, d, i: _reshape_src_index(ctx, ctx.shape_of(x), tuple(s), int(d), i),
    # bmm(reshape(x, s), reshape(y, t)) is a reshape of x @ y when s, t only merge the batch dims
    "bmm_view_ok": lambda ctx, x, y, s, t: _bmm_view_ok(ctx, ctx.shape_of(x), ctx.shape_of(y), tuple(s), tuple(t)),
    # permute(reshape(x, [prod(batch), m, n]), [0, i, j]) permutes only x's last two dims
    "batch_perm_ok": lambda ctx, x, s, p: _batch_perm_ok(ctx, ctx.shape_of(x), tuple(s), tuple(int(v) for v in p)),
    "batch_perm": lambda ctx, x, p: tuple(range(len(ctx.shape_of(x)) - 2))
    + tuple(len(ctx.shape_of(x)) - 3 + int(v) for v in tuple(p)[1:]),
    "contains": lambda ctx, p, v: int(v) in tuple(int(x) for x in p),
    # where output dim d of a reduction over dims p (keepdim k) lands
    "reduced_dim": lambda ctx, d, p, k: int(d) if k else int(d) - sum(1 for x in _dimset(p) if x < int(d)),
    # does a reduction over dims p (an int, ints; None or none: every dim) reduce dim d?
    "reduces": lambda ctx, p, d: not _dimset(p) or int(d) in _dimset(p),
    # the rank of the broadcast of tensors
    "brank": lambda ctx, *ts: max(len(ctx.shape_of(t)) for t in ts),
    # broadcasting: does tensor c (broadcast against an output of rank r) stay constant along output dim d?
    "const_along": lambda ctx, c, r, d: _const_along(ctx.shape_of(c), int(r), int(d)),
    # the dim of broadcast operand c that lines up with output dim d of rank r (-1: none)
    "bdim": lambda ctx, c, r, d: int(d) - (int(r) - len(ctx.shape_of(c))),
    "at": lambda ctx, p, i: p[int(i)],
    # a floating-point dtype attribute (a fill of dtype None takes its value's type: 0 is an integer)
    "floating": lambda ctx, t: isinstance(t, str) and t.startswith(("float", "bfloat")),
    # the one dim where expand(x, t) is a narrower copy of expand(x, s) (x has size 1 there)
    "narrower_dim": lambda ctx, s, t: _narrower_dim(ctx, tuple(s), tuple(t)),
    "expand_split_dim": lambda ctx, x, s, t: _expand_split_dim(ctx, ctx.shape_of(x), tuple(s), tuple(t)),
    "set_at": lambda ctx, p, i, v: tuple(v if k == int(i) else x for k, x in enumerate(p)),
    # a tensor's dtype name ("float32", "int64", "bool"...); undecided (the condition fails) where not known
    "dtype": lambda ctx, t: ctx.dtype(t),
    # a finite number attribute (factors may be inf/nan: distributing those is not exact)
    "finite": lambda ctx, v: isinstance(v, (int, Fraction)),
    # elements a reduction over dims p (None or []: all) folds into one
    "numel_at": lambda ctx, t, p: _prod([ctx.shape_of(t)[int(d)] for d in p] if p else ctx.shape_of(t)),
    # the size expand(x, size) takes where x.repeat(r) repeats only dims of size 1 (() where it does more)
    "repeat_size": lambda ctx, x, r: _repeat_size(tuple(ctx.shape_of(x)), tuple(r)),
    "drop_at": lambda ctx, p, i: tuple(x for k, x in enumerate(p) if k != int(i)),
    # the product of a tuple of sizes (1 for ())
    "prod": lambda ctx, p: _prod(tuple(p)),
    # every value of integer tensor t lies in [vmin(t), vend(t)): a relation file's ranges: (undecided, so the
    # condition fails, where none is stated)
    # NumPy broadcasting made explicit: the shape tensors broadcast to, and the output dims that tensor t's dims
    # become in a broadcast to rank r (its trailing ones)
    "bcast_shape": lambda ctx, *ts: _bshape(ctx, [tuple(ctx.shape_of(t)) for t in ts]),
    "bcast_dims": lambda ctx, t, r: tuple(range(int(r) - len(ctx.shape_of(t)), int(r))),
    # the dtypes given agree, booleans aside (a select's condition beside its values)
    "is_dtype": lambda ctx, t: isinstance(t, str),
    "same_values": lambda ctx, *ds: len({d for d in ds if d != "bool"}) <= 1,
    # number v as a tensor of floating dtype d holds it (a kernel's eps, a fill): v rounded to nearest, exact
    "rounded": lambda ctx, v, d: _rounded(v, d),
    # shape s broadcast against tensor t's shape gives t's shape (s has no more dims; each is 1 or t's there)
    "broadcasts_to": lambda ctx, s, t: _broadcasts_to(ctx, tuple(s), tuple(ctx.shape_of(t))),
    "vmin": lambda ctx, t: ctx.vrange(t)[0],
    "vend": lambda ctx, t: ctx.vrange(t)[1],
}
RANGE_FUNCTIONS = frozenset({"vmin", "vend"})


def _dimset(p) -> tuple[int, ...]:
    """Dims named by an attribute: an int, ints, or None (none named)."""
    if p is None:
        return ()
    if isinstance(p, int) and not isinstance(p, bool):
        return (p,)
    return tuple(int(x) for x in p)


def _repeat_size(x: tuple, r: tuple) -> tuple:
    if len(r) != len(x) or any(S.norm(k) != 1 and S.norm(d) != 1 for d, k in zip(x, r)):
        return ()
    return tuple(S.norm(S.sym(d) * S.sym(k)) for d, k in zip(x, r))


def _rounded(v, dtype: str) -> Fraction:
    """``v`` as a ``dtype`` tensor holds it (:func:`graphguard.ir.dtypes.rounded`); ValueError (the condition or
    instantiation fails) where that is no finite number."""
    out = rounded(v, dtype)
    if out is None:
        raise ValueError(f"rounded({v!r}, {dtype!r})")
    return out


def _prod(xs) -> S.Scalar:
    return S.norm(sp.Mul(*[S.sym(x) for x in xs])) if xs else 1


def _reshape_part(ctx, part: tuple, d: int, target: tuple) -> tuple[int, tuple]:
    """reshape(concat(parts, dim=d), target) == concat(reshape(part_i, new_i), dim=k) when the dims
    before d keep their product (they become target[:k]) and each part is whole slices of target dim k.
    Returns (k, new shape of this part); raises ValueError otherwise."""
    lead, inner = _prod(part[:d]), _prod(part[d + 1:])
    ks = [k for k in range(len(target) + 1) if ctx.cx.prove("==", _prod(target[:k]), lead)]
    if not ks:
        raise ValueError("leading dims do not line up")
    k = ks[-1]  # past size-1 target dims: two parts never fit in one of those
    if k >= len(target):
        raise ValueError("no target dim for the concatenated one")
    rows = S.exact_div(S.norm(S.sym(part[d]) * S.sym(inner)), _prod(target[k + 1:]))
    if not ctx.cx.integral(rows):
        raise ValueError("a part is not whole slices of the target dim")
    return k, tuple(target[:k]) + (rows,) + tuple(target[k + 1:])


def _reshape_src(ctx, x: tuple, s: tuple, d: int) -> tuple[int, Any]:
    """(k, m): reshape(x, s) lays its dim d over x's dim k, index i of it starting at row i*m of x's dim k --
    when the dims before line up (same product) and m (a whole number: dim k is split, or the inverse of
    one: dim d merges k with the dims after it) exists. Raises ValueError otherwise. So
    slice(reshape(x, s), d, a, b) == reshape(slice(x, k, a*m, b*m), s with s[d] = b - a) when a*m, b*m
    are whole."""
    before, after = _prod(s[:d]), _prod(s[d + 1:])
    for k in range(len(x)):
        if ctx.cx.prove("==", _prod(x[:k]), before):
            m = S.norm(S.sym(after) / S.sym(_prod(x[k + 1:])))
            if ctx.cx.integral(m) or ctx.cx.integral(S.norm(1 / S.sym(m))):
                return k, m
    raise ValueError("the reshape does not keep that dim as whole rows of one input dim")


def _reshape_src_index(ctx, x: tuple, s: tuple, d: int, i) -> S.Scalar:
    k, m = _reshape_src(ctx, x, s, d)
    j = S.norm(S.sym(i) * S.sym(m))
    if not ctx.cx.integral(j):
        raise ValueError("the slice bound falls inside a merged block")
    return j


def _broadcasts_to(ctx, s: tuple, x: tuple) -> bool:
    return len(s) <= len(x) and all(d == 1 or d == w or ctx.cx.prove("==", d, w)
                                    for d, w in zip(s, x[len(x) - len(s):]))


def _narrower_dim(ctx, s: tuple, t: tuple) -> int:
    """The one dim k where shape t is narrower than shape s (0 < t[k] < s[k], equal elsewhere)."""
    eq = lambda a, b: ctx.cx.prove("==", a, b)  # noqa: E731
    diff = [k for k in range(len(s)) if not eq(s[k], t[k])] if len(s) == len(t) else []
    if len(diff) != 1 or not (ctx.cx.prove("<", 0, t[diff[0]]) and ctx.cx.prove("<", t[diff[0]], s[diff[0]])):
        raise ValueError("not narrower along exactly one dim")
    return diff[0]


def _expand_split_dim(ctx, x: tuple, s: tuple, t: tuple) -> int:
    k = _narrower_dim(ctx, s, t)
    lead = len(s) - len(x)
    if k < lead or not ctx.cx.prove("==", x[k - lead], 1):
        raise ValueError("not a broadcast dim of x")
    return k


def _reshape_concat_ok(ctx, a: tuple, b: tuple, d: int, target: tuple) -> bool:
    ka, sa = _reshape_part(ctx, a, d, target)
    kb, sb = _reshape_part(ctx, b, d, target)
    return ka == kb and ctx.cx.prove("==", S.norm(S.sym(sa[ka]) + S.sym(sb[kb])), target[ka])


def _bmm_view_ok(ctx, x: tuple, y: tuple, s: tuple, t: tuple) -> bool:
    eq = lambda a, b: ctx.cx.prove("==", a, b)  # noqa: E731
    return (len(x) == len(y) >= 3 and len(s) == len(t) == 3
            and all(eq(a, b) for a, b in zip(x[:-2], y[:-2]))
            and eq(s[0], _prod(x[:-2])) and eq(s[1], x[-2]) and eq(s[2], x[-1])
            and eq(t[0], _prod(y[:-2])) and eq(t[1], y[-2]) and eq(t[2], y[-1]))


def _batch_perm_ok(ctx, x: tuple, s: tuple, p: tuple) -> bool:
    eq = lambda a, b: ctx.cx.prove("==", a, b)  # noqa: E731
    return (len(s) == 3 and len(p) == 3 and p[0] == 0 and len(x) >= 3 and eq(s[0], _prod(x[:-2]))
            and eq(s[1], x[-2]) and eq(s[2], x[-1]))


def _bshape(ctx, shapes: list[tuple]) -> tuple:
    """NumPy's broadcast of ``shapes`` (sizes 1 stretch); ValueError where two sizes differ and neither is 1."""
    r = max(len(x) for x in shapes)
    out = []
    for k in range(r):
        sizes = {S.norm(x[k - (r - len(x))]) for x in shapes if k - (r - len(x)) >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError("shapes do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _const_along(shape: tuple, r: int, d: int) -> bool:
    k = d - (r - len(shape))
    return k < 0 or S.norm(shape[k]) == 1


_NEG = {"==": "!=", "!=": "==", "<=": ">", "<": ">=", ">=": "<", ">": "<="}


def _cmp(ctx: EvalContext, op: str, a, b) -> bool | None:
    """Three-valued comparison: True if proved, False if its negation is proved, None otherwise."""
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        if op not in ("==", "!="):
            raise TypeError("lists only compare with == and !=")
        if not isinstance(a, (tuple, list)) or not isinstance(b, (tuple, list)) or len(a) != len(b):
            eq: bool | None = False
        else:
            res = [_cmp(ctx, "==", x, y) for x, y in zip(a, b)]
            eq = True if all(r is True for r in res) else False if any(r is False for r in res) else None
        return eq if op == "==" or eq is None else not eq
    if a is None or b is None:  # an absent optional attribute (dtype=None) equals only None
        if op not in ("==", "!="):
            raise TypeError("None only compares with == and !=")
        return (a is b) if op == "==" else (a is not b)
    if isinstance(a, (str, bool)) or isinstance(b, (str, bool)):
        if op not in ("==", "!="):
            raise TypeError("strings only compare with == and !=")
        return (a == b) if op == "==" else (a != b)
    if isinstance(a, Fraction) or isinstance(b, Fraction):
        a, b = Fraction(a), Fraction(b)
        return {"==": a == b, "!=": a != b, "<=": a <= b, "<": a < b, ">=": a >= b, ">": a > b}[op]
    if ctx.cx.prove(op, a, b):
        return True
    if ctx.cx.prove(_NEG[op], a, b):
        return False
    return None


def evaluate(e, env: dict[str, Any], ctx: EvalContext):
    """Value of an attribute expression; booleans are three-valued (None: not decided)."""
    if isinstance(e, PVar):
        return env[e.name]
    if isinstance(e, AConst):
        v = e.value
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "sym":
            return S.symbol(v[1])
        return v
    if isinstance(e, AList):
        return tuple(evaluate(x, env, ctx) for x in e.items)
    if isinstance(e, ACall):
        fn = ctx.functions.get(e.fn)
        if fn is None:
            raise LemmaError(f"unknown function {e.fn}() in a lemma")
        return fn(ctx, *[evaluate(a, env, ctx) for a in e.args])
    if isinstance(e, ABin):
        if e.op == "not":
            v = evaluate(e.left, env, ctx)
            return None if v is None else not v
        if e.op == "and":
            a = evaluate(e.left, env, ctx)
            if a is False:
                return False
            b = evaluate(e.right, env, ctx)
            if a is True and b is True:
                return True
            return False if b is False else None
        if e.op == "or":
            a = evaluate(e.left, env, ctx)
            if a is True:
                return True
            b = evaluate(e.right, env, ctx)
            if b is True:
                return True
            return False if (a is False and b is False) else None
        a, b = evaluate(e.left, env, ctx), evaluate(e.right, env, ctx)
        if e.op in _NEG:
            return _cmp(ctx, e.op, a, b)
        if isinstance(a, Fraction) or isinstance(b, Fraction):
            a, b = Fraction(a), Fraction(b)
            return {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
                    "//": operator.floordiv}[e.op](a, b)  # only the one asked for: b may be 0
        if e.op == "+":
            return S.norm(S.sym(a) + S.sym(b))
        if e.op == "-":
            return S.norm(S.sym(a) - S.sym(b))
        if e.op == "*":
            return S.norm(S.sym(a) * S.sym(b))
        if e.op == "//":
            return S.floordiv(a, b)
        if e.op == "/":
            return S.exact_div(a, b)
    raise LemmaError(f"cannot evaluate {e!r}")


_COMPARE = frozenset({"<", "<=", ">", ">=", "==", "!="})


def _reads_range(e) -> bool:
    calls: set[str] = set()
    _expr_calls(e, calls)
    return bool(calls & RANGE_FUNCTIONS)


def range_relaxed(cond):
    """``cond`` with every comparison that reads a value range (vmin/vend) taken as true: where a condition
    fails and this holds, a stated range would have made it hold (the hint that names ``ranges:``)."""
    if isinstance(cond, ABin):
        if cond.op in _COMPARE and _reads_range(cond):
            return AConst(True)
        if cond.op in ("and", "or", "not"):
            return ABin(cond.op, range_relaxed(cond.left), range_relaxed(cond.right))
    return cond


def range_vars(cond) -> set[str]:
    """The tensor variables whose value range ``cond`` reads."""
    out: set[str] = set()
    if isinstance(cond, ACall) and cond.fn in RANGE_FUNCTIONS:
        _expr_vars(cond, out)
    for sub in (cond.args if isinstance(cond, ACall) else cond.items if isinstance(cond, AList)
                else (cond.left, cond.right) if isinstance(cond, ABin) else ()):
        out |= range_vars(sub)
    return out


def check_condition(rule: Rule, env: dict, ctx: EvalContext) -> bool:
    return condition_holds(rule.cond, env, ctx)


def condition_holds(cond, env: dict, ctx: EvalContext) -> bool:
    if cond is None:
        return True
    try:
        return evaluate(cond, env, ctx) is True
    except (ZeroDivisionError, ValueError, IndexError, TypeError, OverflowError, ShapeError):
        return False


def instantiate(p: Term, env: dict, ctx: EvalContext, reg: Registry) -> Term:
    """Build the term for a pattern under ``env``; tensor variables map to terms."""
    if isinstance(p, PVar):
        return env[p.name]
    assert isinstance(p, App)
    op = reg.get(p.op)
    attrs = []
    for name, v in p.attrs:
        val = v.value if isinstance(v, AConst) else evaluate(v, env, ctx)
        attrs.append((name, coerce_attr(op, op.attr_spec(name), val, f"lemma rhs {p.op}")))
    args = tuple(instantiate(a, env, ctx, reg) for a in p.args)
    d = dict(attrs)
    if any(s.dim_of is not None and s.dim_of < len(args) and _negative(d[s.name]) for s in op.attrs):
        # a literal dim=-1 (or one computed negative): made non-negative, as a loaded graph's would be
        d = normalize_dims(op, d, [len(_shape(a, ctx, reg)) for a in args])
        attrs = [(k, d[k]) for k, _ in attrs]
    return App(p.op, args, tuple(attrs))


def _negative(v) -> bool:
    vals = v if isinstance(v, tuple) else (v,)
    return any(isinstance(x, int) and not isinstance(x, bool) and x < 0 for x in vals)


def _shape(t, ctx: EvalContext, reg: Registry) -> tuple:
    """Shape of a term built by :func:`instantiate` (its leaves are bindings, shaped by the context)."""
    if isinstance(t, App):
        return tuple(reg.get(t.op).shape([_shape(a, ctx, reg) for a in t.args], t.attrd, ctx.cx))
    return tuple(ctx.shape_of(t))


def match(p: Term, t: Term, env: dict) -> bool:
    """Bind pattern ``p`` to the concrete term ``t`` (extending ``env``); False where it does not match."""
    if isinstance(p, PVar):
        if p.name in env:
            return env[p.name] == t
        env[p.name] = t
        return True
    if not isinstance(t, App) or t.op != p.op or len(t.args) != len(p.args) or not match_attrs(p, t, env):
        return False
    return all(match(a, b, env) for a, b in zip(p.args, t.args))


def match_attrs(p: App, t: App, env: dict) -> bool:
    """Bind the attributes of pattern ``p`` to those of term ``t`` (same op), extending ``env``."""
    got = t.attrd
    for name, v in p.attrs:
        if isinstance(v, PVar):
            if v.name in env and env[v.name] != got.get(name):
                return False
            env[v.name] = got.get(name)
        elif isinstance(v, AConst) and v.value != got.get(name):
            return False
    return True
