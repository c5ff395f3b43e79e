"""A recursive-descent parser for the relation language's well-formed texts (:mod:`graphguard.ir.relation`).

Loading the lemma packs parses some 4000 patterns and conditions; the Lark LALR parser that defines the language
spends most of a command's start-up on them. This parser reads the same grammar and builds the same values as
``relation._ToRaw``; it gives up (``None``) on anything it is not sure of -- a syntax error, a string with a
backslash, a keyword where a name could be meant -- and the caller then asks Lark, which stays the definition of
the language and the source of every error message. ``tests/test_relation.py`` checks both agree on every
lemma's texts and on random texts.
"""
from __future__ import annotations

import re

from .expr import ABin, ACall, AConst, AList, Leaf, PVar, RawCall
from .ops import parse_number

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\f\r\n]+)
  | (?P<float>[0-9]+\.[0-9]*(?:[eE][-+]?[0-9]+)?)
  | (?P<int>[0-9]+)
  | (?P<name>[A-Za-z_][A-Za-z0-9_.]*(?:\#[0-9]+)?)
  | (?P<rank>@[0-9]+)
  | (?P<string>"[^"\\\n]*")
  | (?P<op>==|!=|<=|>=|//|[-+*/<>=(),\[\]?])
""", re.X)
_KEYWORDS = ("and", "or", "not")
MAX_TOKENS = 1000  # longer texts (none among the lemmas) go to Lark, which bounds their depth
_CMP = ("==", "!=", "<=", ">=", "<", ">")


class _GiveUp(Exception):
    pass


def _tokens(text: str) -> list[tuple[str, str]]:
    out = []
    pos, n = 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _GiveUp
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            continue
        v = m.group()
        if kind == "name" and v in _KEYWORDS:
            kind = "op"
        out.append((kind, v))
    out.append(("end", ""))
    return out


class _Parser:
    def __init__(self, text: str):
        self.t = _tokens(text)
        self.i = 0

    def peek(self):
        return self.t[self.i]

    def take(self):
        tok = self.t[self.i]
        self.i += 1
        return tok

    def expect(self, v: str):
        k, got = self.take()
        if k != "op" or got != v:
            raise _GiveUp

    def at(self, v: str) -> bool:
        k, got = self.t[self.i]
        return k == "op" and got == v

    # expr: call | tensor | pvar
    def expr(self):
        k, v = self.take()
        if k == "op" and v == "?":
            return self.pvar()
        if k != "name":
            raise _GiveUp
        if self.at("("):
            self.i += 1
            return self.call(v)
        if self.peek()[0] == "rank":
            return Leaf(v + self.take()[1])
        return Leaf(v)

    def pvar(self):
        k, v = self.take()
        if k != "name":
            raise _GiveUp
        return PVar(v)

    def call(self, name: str):
        pos, kw = [], []
        if not self.at(")"):
            while True:
                k, v = self.peek()
                if k == "name" and self.t[self.i + 1] == ("op", "="):
                    self.i += 2
                    kw.append((v, self.aexpr()))
                else:
                    if kw:
                        raise _GiveUp  # (Lark's error message names it)
                    pos.append(self.expr())
                if self.at(","):
                    self.i += 1
                    continue
                break
        self.expect(")")
        return RawCall(name, tuple(pos), tuple(kw))

    # aexpr: or of ands of nots of one comparison of sums of products of unary minus of atoms
    def _left(self, ops: tuple, operand):
        """``operand (op operand)*`` for ``op`` in ``ops``, grouped to the left."""
        a = operand()
        while True:
            k, v = self.peek()
            if k != "op" or v not in ops:
                return a
            self.i += 1
            a = ABin(v, a, operand())

    def aexpr(self):
        return self._left(("or",), self.aand)

    def aand(self):
        return self._left(("and",), self.anot)

    def anot(self):
        if self.at("not"):
            self.i += 1
            return ABin("not", self.anot(), None)
        a = self.asum()
        k, v = self.peek()
        if k == "op" and v in _CMP:
            self.i += 1
            a = ABin(v, a, self.asum())
        return a

    def asum(self):
        return self._left(("+", "-"), self.aprod)

    def aprod(self):
        return self._left(("*", "//", "/"), self.aunary)

    def aunary(self):
        if self.at("-"):
            self.i += 1
            return ABin("-", AConst(0), self.aunary())
        return self.aatom()

    def aatom(self):
        k, v = self.take()
        if k == "int":
            return AConst(int(v))
        if k == "float":
            return AConst(parse_number(v))
        if k == "string":
            return AConst(v[1:-1])
        if k == "name":
            if self.at("("):
                self.i += 1
                return ACall(v, self._items(")"))
            if v in ("true", "false"):
                return AConst(v == "true")
            if v == "None":
                return AConst(None)
            return AConst(("sym", v))
        if k == "op":
            if v == "?":
                return self.pvar()
            if v == "[":
                return AList(self._items("]"))
            if v == "(":
                a = self.aexpr()
                self.expect(")")
                return a
        raise _GiveUp

    def _items(self, close: str) -> tuple:
        items = []
        if not self.at(close):
            while True:
                items.append(self.aexpr())
                if self.at(","):
                    self.i += 1
                    continue
                break
        self.expect(close)
        return tuple(items)


def parse(text: str, start: str):
    """The value ``relation._ToRaw`` builds for a well-formed ``text`` (start "expr" or "cond"), or None."""
    try:
        p = _Parser(text)
        if len(p.t) > MAX_TOKENS:
            return None
        out = p.expr() if start == "expr" else p.aexpr()
        if p.peek()[0] != "end":
            return None
        return out
    except Exception:  # a syntax error, or a value the builders refuse (a 5000-digit number): Lark's to word
        return None
