"""Scalars: tensor dimensions, slice bounds and other integer attributes.

A scalar is either a Python ``int`` or a ``sympy`` expression over integer symbols. sympy keeps every
expression in a canonical expanded form, so two scalars are *structurally* equal exactly when they are
equal as polynomials; that canonical text is what the e-graph sees. Questions that structure cannot
answer (``a <= b`` under the user's constraints ``S >= 2``, divisibility, ...) go to z3 through
:class:`Constraints`. An undecided question is answered "no": a lemma whose side condition cannot be
proved is simply not applied, which is always sound.

Scalar text (``"K/2"`` in a graph file) is read by :func:`parse`, a small grammar that builds sympy objects
directly: text from an input is never handed to sympy's parser or to Python.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Union

import math
import re

import sympy as sp
import z3

Scalar = Union[int, sp.Expr]

_SYMBOLS: dict[str, sp.Symbol] = {}


def symbol(name: str) -> sp.Symbol:
    """The integer symbol called ``name`` (one object per name)."""
    s = _SYMBOLS.get(name)
    if s is None:
        s = _SYMBOLS[name] = sp.Symbol(name, integer=True)
    return s


def norm(x) -> Scalar:
    """Canonical form: ints stay ints, sympy expressions are expanded, integral constants become ints."""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, Fraction):
        x = sp.Rational(x.numerator, x.denominator)
    if isinstance(x, sp.Basic):
        x = sp.expand(x)
        if x.is_Integer:
            return int(x)
        return x
    raise TypeError(f"not a scalar: {x!r}")


def sym(x) -> sp.Expr:
    """A scalar (or a Fraction) as a sympy object, for arithmetic. Numbers and sympy objects only: text is
    read by :func:`parse`, never by sympy."""
    if isinstance(x, sp.Basic):
        return x
    if isinstance(x, int):
        return sp.Integer(int(x))
    if isinstance(x, Fraction):
        return sp.Rational(x.numerator, x.denominator)
    raise TypeError(f"not a scalar: {x!r}")


def is_concrete(x: Scalar) -> bool:
    return isinstance(x, int)


def text(x: Scalar) -> str:
    """Canonical text of a scalar (also its e-graph spelling)."""
    x = norm(x)
    if isinstance(x, int):
        return str(x)
    return sp.sstr(x, order="lex").replace(" ", "")


def free_symbols(x: Scalar) -> set[str]:
    return set() if isinstance(x, int) else {s.name for s in x.free_symbols}


# -- scalar text -----------------------------------------------------------------------------------
#
# Scalar text is data: it is read by the grammar below into sympy objects, never handed to Python or to
# sympy's own parser (which evaluates Python). The grammar is Python's arithmetic, as ``text`` prints it:
#
#     expr   := term (("+" | "-") term)*
#     term   := unary (("*" | "/" | "//" | "%") unary)*
#     unary  := ("-" | "+") unary | power
#     power  := atom ("**" unary)?                 exponent: an integer constant
#     atom   := INT | NAME | FUNC "(" expr ("," expr)* ")" | "(" expr ")"
#
# NAME is an integer symbol ([A-Za-z_][A-Za-z0-9_]*, not starting with "__"), FUNC one of floor, ceiling
# (one argument) and Mod (two; ``a % b`` is Mod(a, b), ``a // b`` is floor(a/b)). Sizes are bounded before
# anything is computed: the text's length, its nesting, integer literals, the bits of a constant power,
# and the degree and (expanded) number of terms of every subexpression -- ``9**9**9`` is refused, not
# evaluated.

MAX_TEXT = 2000
MAX_DEPTH = 32
MAX_DIGITS = 100
MAX_NAME = 200
MAX_DEGREE = 64
MAX_TERMS = 1000
MAX_POW_BITS = 4096

_FUNCS = {"floor": (1, sp.floor), "ceiling": (1, sp.ceiling), "Mod": (2, sp.Mod)}
_TOKEN = re.compile(r"[ \t]*(?:(?P<int>[0-9]+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>\*\*|//|[-+*/%(),]))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def valid_name(name: str) -> bool:
    """Can ``name`` be a symbol of scalar text (an ASCII identifier, not a dunder, not a function)?"""
    return (isinstance(name, str) and _NAME.fullmatch(name) is not None and not name.startswith("__")
            and name not in _FUNCS and len(name) <= MAX_NAME)


class _Val:
    """A parsed subexpression with bounds on its size once expanded (degree, number of terms)."""
    __slots__ = ("expr", "terms", "degree")

    def __init__(self, expr, terms: int, degree: int):
        self.expr, self.terms, self.degree = expr, terms, degree


class _ScalarParser:
    def __init__(self, text: str):
        self.text = text
        self.toks: list[tuple[str, str, int]] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                rest = text[pos:].lstrip(" \t")
                if not rest:
                    break
                self.fail(f"unexpected character {rest[0]!r}")
            kind = m.lastgroup
            self.toks.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()
        self.i = 0
        self.depth = 0

    def fail(self, why: str):
        shown = self.text if len(self.text) <= 80 else self.text[:77] + "..."
        raise ValueError(f"bad scalar expression {shown!r}: {why}")

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str, int]:
        if self.i >= len(self.toks):
            self.fail("unexpected end")
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, tok: str) -> None:
        kind, val, _ = self.take()
        if kind != "op" or val != tok:
            self.fail(f"expected {tok!r}, got {val!r}")

    def nest(self, d: int) -> None:
        self.depth += d
        if self.depth > MAX_DEPTH:
            self.fail(f"nested more than {MAX_DEPTH} deep")

    def bounded(self, expr, terms: int, degree: int) -> _Val:
        if degree > MAX_DEGREE:
            self.fail(f"degree over {MAX_DEGREE}")
        if terms > MAX_TERMS:
            self.fail(f"more than {MAX_TERMS} terms once expanded")
        return _Val(expr, terms, degree)

    # -- grammar --------------------------------------------------------------------------------
    def parse(self) -> sp.Expr:
        v = self.expr()
        if self.i != len(self.toks):
            self.fail(f"unexpected {self.toks[self.i][1]!r}")
        return v.expr

    def expr(self) -> _Val:
        v = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            w = self.term()
            v = self.bounded(v.expr + w.expr if op == "+" else v.expr - w.expr, v.terms + w.terms,
                             max(v.degree, w.degree))
        return v

    def term(self) -> _Val:
        v = self.unary()
        while self.peek() in ("*", "/", "//", "%"):
            op = self.take()[1]
            w = self.unary()
            terms, degree = v.terms * w.terms, v.degree + w.degree
            if op == "*":
                v = self.bounded(v.expr * w.expr, terms, degree)
                continue
            if w.expr == 0:
                self.fail("division by zero")
            e = v.expr / w.expr if op == "/" else sp.floor(v.expr / w.expr) if op == "//" else sp.Mod(v.expr, w.expr)
            v = self.bounded(e, terms, degree)
        return v

    def unary(self) -> _Val:
        if self.peek() in ("-", "+"):
            op = self.take()[1]
            self.nest(1)
            v = self.unary()
            self.nest(-1)
            return v if op == "+" else _Val(-v.expr, v.terms, v.degree)
        return self.power()

    def power(self) -> _Val:
        base = self.atom()
        if self.peek() != "**":
            return base
        self.take()
        self.nest(1)
        exp = self.unary()
        self.nest(-1)
        if not exp.expr.is_Integer:
            self.fail("an exponent must be an integer constant")
        n = abs(int(exp.expr))
        if base.expr.is_Rational:
            if base.expr == 0 and exp.expr < 0:
                self.fail("division by zero")
            bits = max(int(base.expr.p).bit_length(), int(base.expr.q).bit_length(), 1)
            if bits * n > MAX_POW_BITS:
                self.fail(f"constant power over {MAX_POW_BITS} bits")
            return _Val(base.expr ** exp.expr, 1, 0)
        if base.degree * n > MAX_DEGREE:
            self.fail(f"degree over {MAX_DEGREE}")
        # (t terms)**n has at most comb(n + t - 1, t - 1) monomials; n <= MAX_DEGREE keeps this cheap
        return self.bounded(base.expr ** exp.expr, math.comb(n + base.terms - 1, base.terms - 1), base.degree * n)

    def atom(self) -> _Val:
        kind, val, _ = self.take()
        if kind == "int":
            if len(val) > MAX_DIGITS:
                self.fail(f"integer literal over {MAX_DIGITS} digits")
            return _Val(sp.Integer(int(val)), 1, 0)
        if kind == "name":
            if val in _FUNCS:
                arity, fn = _FUNCS[val]
                self.expect("(")
                self.nest(1)
                args = [self.expr()]
                while self.peek() == ",":
                    self.take()
                    args.append(self.expr())
                self.nest(-1)
                self.expect(")")
                if len(args) != arity:
                    self.fail(f"{val} takes {arity} argument(s), got {len(args)}")
                if val == "Mod" and args[1].expr == 0:
                    self.fail("division by zero")
                terms = 1
                for a in args:
                    terms *= a.terms
                return self.bounded(fn(*(a.expr for a in args)), terms, sum(a.degree for a in args))
            if not valid_name(val):
                self.fail(f"{val!r} cannot name a symbol")
            return _Val(symbol(val), 1, 1)
        if val == "(":
            self.nest(1)
            v = self.expr()
            self.nest(-1)
            self.expect(")")
            return v
        self.fail(f"unexpected {val!r}")


def parse(s: str) -> Scalar:
    """Parse scalar text such as ``"2*K + 1"`` or ``"K/2"`` (symbols are integers); everything
    :func:`text` prints reads back. Raises ValueError, naming the text, on anything else."""
    if not isinstance(s, str):
        raise ValueError(f"bad scalar expression {s!r}: not text")
    if len(s) > MAX_TEXT:
        raise ValueError(f"bad scalar expression {s[:40]!r}...: longer than {MAX_TEXT} characters")
    p = _ScalarParser(s)
    if not p.toks:
        p.fail("empty")
    expr = p.parse()
    if not isinstance(expr, sp.Expr) or any(a.is_Atom and not (a.is_Symbol or a.is_Rational)
                                            for a in sp.preorder_traversal(expr)):
        p.fail("not a finite rational expression")
    return norm(expr)


def parse_list(s: str) -> tuple:
    """Parse ``"[K, Mod(K,2), 4]"`` (a list as attribute text prints it) item by item."""
    inner = s.strip()
    if not (inner.startswith("[") and inner.endswith("]")):
        raise ValueError(f"bad scalar list {s[:80]!r}: expected [...]")
    inner = inner[1:-1]
    if not inner.strip():
        return ()
    items, depth, start = [], 0, 0
    for i, c in enumerate(inner):
        depth += (c == "(") - (c == ")")
        if c == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    items.append(inner[start:])
    return tuple(parse(x) for x in items)


def floordiv(a: Scalar, b: Scalar) -> Scalar:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return norm(sp.floor(sym(a) / sym(b)))


def exact_div(a: Scalar, b: Scalar) -> Scalar:
    """a / b for a known multiple; the result keeps a rational coefficient (``K/2``)."""
    if isinstance(a, int) and isinstance(b, int):
        if a % b:
            raise ValueError(f"{a} is not divisible by {b}")
        return a // b
    return norm(sym(a) / sym(b))


@dataclass
class SymbolInfo:
    """What the user declared about a symbolic dimension."""
    name: str
    min: int | None = 1
    max: int | None = None
    multiple_of: int | None = None


@dataclass
class Constraints:
    """User constraints on symbols; decides scalar predicates with z3 (sympy settles the easy ones).

    Every symbol is a positive integer unless declared otherwise (``min``)."""
    symbols: dict[str, SymbolInfo] = field(default_factory=dict)
    queries: int = 0
    z3_queries: int = 0

    def __post_init__(self):
        self._solver: z3.Solver | None = None
        self._cache: dict[str, bool] = {}
        self._z3vars: dict[str, z3.ArithRef] = {}

    def declare(self, info: SymbolInfo) -> None:
        self.symbols[info.name] = info
        self._solver = None
        self._cache.clear()

    # -- translation --------------------------------------------------------------------------
    def _var(self, name: str) -> z3.ArithRef:
        v = self._z3vars.get(name)
        if v is None:
            v = self._z3vars[name] = z3.Int(name)
        return v

    def _int_poly(self, e) -> tuple[z3.ArithRef, int]:
        """Write ``e`` as P/q: P an integer z3 polynomial, q a positive integer (integer arithmetic only).
        ``floor(...)`` terms become fresh integers: less is known about them, never more."""
        e = sym(e)
        floors = {f: sp.Symbol(f"__floor{i}", integer=True) for i, f in enumerate(e.atoms(sp.floor))}
        num, den = sp.fraction(sp.together(e.xreplace(floors)))
        den = sp.expand(den)
        if not den.is_Integer:
            raise ValueError(f"cannot decide {e}: symbolic denominator")
        q = int(den)
        if q < 0:
            num, q = -num, -q

        def go(x) -> z3.ArithRef:
            if x.is_Integer:
                return z3.IntVal(int(x))
            if x.is_Symbol:
                return self._var(x.name)
            if x.is_Add:
                return z3.Sum([go(a) for a in x.args])
            if x.is_Mul:
                out = go(x.args[0])
                for a in x.args[1:]:
                    out = out * go(a)
                return out
            if x.is_Pow and x.exp.is_Integer and int(x.exp) > 0:
                out = go(x.base)
                for _ in range(int(x.exp) - 1):
                    out = out * go(x.base)
                return out
            raise ValueError(f"cannot translate scalar {x} for z3")
        return go(sp.expand(num)), q

    def _declared(self) -> list:
        """The user's constraints as z3 facts."""
        facts = []
        for info in self.symbols.values():
            v = self._var(info.name)
            if info.min is not None:
                facts.append(v >= info.min)
            if info.max is not None:
                facts.append(v <= info.max)
            if info.multiple_of:
                facts.append(v % info.multiple_of == 0)
        return facts

    def _solver_with_constraints(self) -> z3.Solver:
        if self._solver is None:
            s = z3.Solver()
            s.set("timeout", 2000)
            s.add(*self._declared())
            self._solver = s
        return self._solver

    def _undeclared_positive(self, exprs) -> list:
        extra = []
        for e in exprs:
            for name in free_symbols(e):
                if name not in self.symbols:
                    extra.append(self._var(name) >= 1)
        return extra

    # -- predicates --------------------------------------------------------------------------
    def prove(self, op: str, a: Scalar, b: Scalar) -> bool:
        """Is ``a op b`` true for every value of the symbols allowed by the constraints?"""
        self.queries += 1
        a, b = norm(a), norm(b)
        diff = norm(sym(a) - sym(b)) if not (isinstance(a, int) and isinstance(b, int)) else a - b
        if isinstance(diff, int):  # fast path: settled structurally
            return {"==": diff == 0, "!=": diff != 0, "<=": diff <= 0, "<": diff < 0,
                    ">=": diff >= 0, ">": diff > 0}[op]
        if op == "==":
            return False  # canonical forms differ: equal only for some values, never for all
        key = f"{op}|{text(diff)}"
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        self.z3_queries += 1
        try:
            p, _q = self._int_poly(diff)  # q > 0: the sign of diff is the sign of p
        except ValueError:
            self._cache[key] = False
            return False
        goal = {"!=": p != 0, "<=": p <= 0, "<": p < 0, ">=": p >= 0, ">": p > 0}[op]
        s = self._solver_with_constraints()
        s.push()
        for c in self._undeclared_positive([diff]):
            s.add(c)
        s.add(z3.Not(goal))
        res = s.check()
        s.pop()
        ok = res == z3.unsat
        self._cache[key] = ok
        return ok

    def integral(self, a: Scalar) -> bool:
        """Is ``a`` an integer for every allowed value of the symbols (``K/2`` needs K even)?"""
        a = norm(a)
        if isinstance(a, int):
            return True
        key = f"int|{text(a)}"
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        self.z3_queries += 1
        s = self._solver_with_constraints()
        s.push()
        for c in self._undeclared_positive([a]):
            s.add(c)
        try:
            p, q = self._int_poly(a)
        except ValueError:
            s.pop()
            self._cache[key] = False
            return False
        s.add(p % q != 0)
        ok = s.check() == z3.unsat
        s.pop()
        self._cache[key] = ok
        return ok

    def model(self) -> dict[str, int]:
        """Small concrete values for every declared symbol satisfying the constraints (for replay)."""
        s = z3.Optimize()
        s.add(*self._declared())
        for info in self.symbols.values():
            v = self._var(info.name)
            s.add(v >= 1)
            s.minimize(v)
        if s.check() != z3.sat:
            raise ValueError("the symbol constraints cannot be satisfied")
        m = s.model()
        return {name: m.eval(self._var(name)).as_long() for name in self.symbols}


def rename(x, names: dict[str, str]):
    """``x`` (a scalar, or a tuple of them; anything else is returned as it is) with symbols renamed."""
    if isinstance(x, tuple):
        return tuple(rename(v, names) for v in x)
    if isinstance(x, sp.Expr) and not isinstance(x, bool) and x.free_symbols & {symbol(k) for k in names}:
        return norm(x.xreplace({symbol(k): symbol(v) for k, v in names.items()}))
    return x


def substitute(x: Scalar, values: dict[str, int]) -> int:
    if isinstance(x, int):
        return x
    v = x.subs({symbol(k): val for k, val in values.items()})
    v = sp.nsimplify(v)
    if not v.is_Integer:
        raise ValueError(f"scalar {x} is not an integer for {values}")
    return int(v)
