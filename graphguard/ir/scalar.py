"""Scalars: tensor dimensions, slice bounds and other integer attributes.

A scalar is either a Python ``int`` or a ``sympy`` expression over integer symbols. sympy keeps every
expression in a canonical expanded form, so two scalars are *structurally* equal exactly when they are
equal as polynomials; that canonical text is what the e-graph sees. Questions that structure cannot
answer (``a <= b`` under the user's constraints ``S >= 2``, divisibility, ...) go to z3 through
:class:`Constraints`. An undecided question is answered "no": a lemma whose side condition cannot be
proved is simply not applied, which is always sound.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Union

import re

import sympy as sp
import sympy.parsing.sympy_parser  # noqa: F401
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


def parse(s: str) -> Scalar:
    """Parse scalar text such as ``"2*K + 1"`` or ``"K/2"`` (symbols are integers)."""
    s = s.strip()
    try:
        return int(s)
    except ValueError:
        pass
    names = {n: (getattr(sp, n) if n in _FUNCS else symbol(n)) for n in _IDENT.findall(s)}
    try:
        expr = sp.parse_expr(s, local_dict=names, global_dict={"Integer": sp.Integer, "Rational": sp.Rational,
                                                               "Symbol": sp.Symbol, **{f: getattr(sp, f) for f in _FUNCS}},
                             transformations=sp.parsing.sympy_parser.standard_transformations
                             + (sp.parsing.sympy_parser.rationalize,))
    except Exception as e:  # sympy raises many kinds on bad text
        raise ValueError(f"bad scalar expression {s!r}") from e
    if not isinstance(expr, sp.Expr) or any(not (a.is_Symbol or a.is_Number) for a in sp.preorder_traversal(expr)
                                            if a.is_Atom):
        raise ValueError(f"bad scalar expression {s!r}")
    return norm(expr)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FUNCS = ("floor", "ceiling", "Mod")


def floordiv(a: Scalar, b: Scalar) -> Scalar:
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    return norm(sp.floor(sp.sympify(a) / sp.sympify(b)))


def exact_div(a: Scalar, b: Scalar) -> Scalar:
    """a / b for a known multiple; the result keeps a rational coefficient (``K/2``)."""
    if isinstance(a, int) and isinstance(b, int):
        if a % b:
            raise ValueError(f"{a} is not divisible by {b}")
        return a // b
    return norm(sp.sympify(a) / sp.sympify(b))


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
        e = sp.sympify(e)
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
        diff = norm(sp.sympify(a) - sp.sympify(b)) if not (isinstance(a, int) and isinstance(b, int)) else a - b
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
