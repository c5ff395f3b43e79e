"""Expressions (terms) over tensors: what relations, lemmas and the e-graph are made of.

A :class:`Term` is either a :class:`Leaf` naming a tensor (``A@0`` is tensor ``A`` on rank 0 of G_d; a bare
``A`` is a G_s tensor) or an :class:`App` of an operator to argument terms with attributes. Variadic
operators (``concat``, ``sum``, ``max``) are kept *binary and left-nested* inside terms, so
``concat(a, b, c, dim=0)`` is ``concat(concat(a, b), c)``; printing flattens them back. Lemma patterns use
the same classes plus :class:`PVar` (``?x``, a tensor variable) and attribute expressions (:class:`AExpr`).
Terms are immutable and hashable; equal terms compare equal.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterator

from . import scalar as S


class Term:
    __slots__ = ()


@dataclass(frozen=True)
class Leaf(Term):
    """A tensor, by name: ``X@r`` for rank r of G_d, a bare name for G_s."""
    name: str

    @property
    def rank(self) -> int | None:
        return rank_of(self.name)


@dataclass(frozen=True)
class App(Term):
    """``op(args..., k=v...)``; ``attrs`` is a tuple of (name, value) pairs in the op's declared order."""
    op: str
    args: tuple[Term, ...]
    attrs: tuple[tuple[str, Any], ...] = ()

    # terms are compared and hashed a lot (e-graph extraction): the hash and the text are cached
    def __hash__(self):
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.op, self.args, self.attrs))
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, App):
            return NotImplemented
        return (hash(self) == hash(other) and self.op == other.op and self.args == other.args
                and self.attrs == other.attrs)

    def attr(self, name: str, default=None):
        for k, v in self.attrs:
            if k == name:
                return v
        return default

    @property
    def attrd(self) -> dict[str, Any]:
        return dict(self.attrs)


@dataclass(frozen=True)
class PVar(Term):
    """A tensor variable in a lemma pattern (``?x``)."""
    name: str


# -- attribute expressions in patterns ------------------------------------------------------------
class AExpr:
    __slots__ = ()


@dataclass(frozen=True)
class AVar(AExpr):
    name: str


@dataclass(frozen=True)
class AConst(AExpr):
    value: Any


@dataclass(frozen=True)
class ACall(AExpr):
    """``size(?x, ?d)``, ``rank(?x)``, ``shape(?x)``... (functions in :mod:`graphguard.engine.lemma`)."""
    fn: str
    args: tuple[Any, ...]  # AExpr or PVar


@dataclass(frozen=True)
class ABin(AExpr):
    """Arithmetic, comparison or boolean operator."""
    op: str
    left: Any
    right: Any


@dataclass(frozen=True)
class AList(AExpr):
    items: tuple[Any, ...]


@dataclass(frozen=True)
class RawCall:
    """A parsed call before it is checked against the op registry (what :mod:`graphguard.ir.fastparse` and the
    relation grammar of :mod:`graphguard.ir.relation` both build; lowered by the latter)."""
    name: str
    args: tuple
    kwargs: tuple


def rank_of(name: str) -> int | None:
    base, sep, r = name.rpartition("@")
    if sep and r.isdigit():
        return int(r)
    return None


def base_name(name: str) -> str:
    base, sep, r = name.rpartition("@")
    return base if sep and r.isdigit() else name


VARIADIC = {"core.concat", "core.sum", "core.max"}


def app(op: str, *args: Term, **attrs) -> App:
    """Build an application; variadic ops are left-nested."""
    if op in VARIADIC and len(args) > 2:
        t = App(op, (args[0], args[1]), tuple(attrs.items()))
        for a in args[2:]:
            t = App(op, (t, a), tuple(attrs.items()))
        return t
    return App(op, tuple(args), tuple(attrs.items()))


def leaves(t: Term) -> Iterator[str]:
    if isinstance(t, Leaf):
        yield t.name
    elif isinstance(t, App):
        for a in t.args:
            yield from leaves(a)


def size(t: Term) -> int:
    if isinstance(t, App):
        return 1 + sum(size(a) for a in t.args)
    return 1


def depth(t: Term) -> int:
    if isinstance(t, App):
        return 1 + max((depth(a) for a in t.args), default=0)
    return 0


def flat_args(t: App) -> list[Term]:
    """Arguments of a (left-nested) variadic application, flattened."""
    if t.op not in VARIADIC:
        return list(t.args)
    out: list[Term] = []
    for a in t.args:
        if isinstance(a, App) and a.op == t.op and a.attrs == t.attrs:
            out.extend(flat_args(a))
        else:
            out.append(a)
    return out


def attr_text(v: Any) -> str:
    """Canonical text of an attribute value (also its spelling inside the e-graph)."""
    if v is None:
        return "None"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(attr_text(x) for x in v) + "]"
    if isinstance(v, str):
        return v
    if isinstance(v, Fraction):
        return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"
    if isinstance(v, float):
        return repr(v)
    return S.text(v)


def short_op(op: str) -> str:
    return op[5:] if op.startswith("core.") else op


def to_text(t: Term) -> str:
    """Human/relation-syntax text: ``concat(A@0, A@1, dim=1)``."""
    if isinstance(t, Leaf):
        return t.name
    if isinstance(t, PVar):
        return "?" + t.name
    assert isinstance(t, App)
    text = t.__dict__.get("_text")
    if text is None:
        parts = [to_text(a) for a in flat_args(t)]
        parts += [f"{k}={attr_text(v)}" for k, v in t.attrs]
        text = f"{short_op(t.op)}({', '.join(parts)})"
        object.__setattr__(t, "_text", text)
    return text


COMMUTATIVE = frozenset({"core.sum", "core.max"})


def ac_text(t: Term) -> str:
    """Text of ``t`` up to the order of the operands of sums and maxima (equal for ``sum(a, b, c)`` and
    ``sum(c, a, b)``: addition is associative and commutative)."""
    if not isinstance(t, App):
        return to_text(t)
    parts = [ac_text(a) for a in flat_args(t)]
    if t.op in COMMUTATIVE:
        parts.sort()
    parts += [f"{k}={attr_text(v)}" for k, v in t.attrs]
    return f"{short_op(t.op)}({', '.join(parts)})"


def ranks(t: Term) -> set[int]:
    return {r for r in (rank_of(n) for n in leaves(t)) if r is not None}


def substitute(t: Term, subst: dict[str, Term]) -> Term:
    """``t`` with each leaf replaced by its term in ``subst`` (every leaf must have one)."""
    if isinstance(t, Leaf):
        return subst[t.name]
    assert isinstance(t, App)
    return App(t.op, tuple(substitute(a, subst) for a in t.args), t.attrs)


def rename_symbols(t: Term, names: dict[str, str]) -> Term:
    """``t`` with the size symbols in its attributes renamed (``names``: old -> new)."""
    from .scalar import rename
    if not isinstance(t, App):
        return t
    return App(t.op, tuple(rename_symbols(a, names) for a in t.args), tuple((k, rename(v, names)) for k, v in t.attrs))
