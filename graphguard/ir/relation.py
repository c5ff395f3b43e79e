"""The relation language and relation files.

Expressions::

    concat(A@0, A@1, dim=1)          # A@0: tensor A on rank 0 of G_d; a bare name is a G_s tensor
    sum(C@0, C@1)
    slice(X@1, dim=0, start=4, end=8)
    slice(X@0, dim=0, start=0, end=S/2)   # symbolic scalars

Positional arguments are tensors (or nested expressions); keyword arguments are attributes. Lemma patterns
use the same syntax plus ``?x`` variables, and attribute values may be arithmetic over them
(``start=?s - size(?a, ?d)``). Side conditions are boolean expressions: ``?e <= size(?a, ?d) and ?k != ?d``.

A relation file (YAML)::

    inputs:
      A: concat(A@0, A@1, dim=1)
      E: [E@0, E@1]                 # several mappings for one tensor (replicated)
    symbols:                        # optional: symbolic dims and their constraints
      S: {min: 2, multiple_of: 2}
    expect:                         # optional: relations the user expects in R_o
      F: concat(F@0, F@1, dim=0)
    allow_partial: [L]              # optional: outputs G_d may leave as partial results (a sum over ranks)
    ranges:                         # optional: integer inputs' values, "[lo, hi)" or "[lo, hi]" (quoted)
      labels: "[0, 128)"

An output of G_s must be *held* by G_d (its R_o expression uses data movement alone); ``allow_partial`` names
the outputs that may stay cross-rank sums or maxima of the ranks' partial results, as does an ``expect:``
that is one. A file given to ``--expect`` needs no ``inputs:``.

``ranges:`` states what values an integer input of G_s takes (every element lies in the range): lemma
conditions may read it (``vmin(?t)``, ``vend(?t)``: see :mod:`graphguard.engine.lemma`), the lemma fuzzer
checks such lemmas on values drawn in a range, and ``--replay`` draws the input's values in it. It is an
assumption about the inputs, like the relation itself: a range only ever narrows what may be assumed (a
tensor with no range has none), and the G_d tensors that hold the input's values -- its relation's leaves
reached through concat, permute, reshape and identity alone -- take the same range.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import yaml
from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedInput, VisitError

from ..errors import InputError, ShapeError
from ..inputfile import MAX_DEPTH, nesting, read_text
from . import fastparse
from . import scalar as S
from .expr import VARIADIC, ABin, ACall, AConst, AExpr, AList, App, Leaf, PVar, RawCall, Term, app, leaves, to_text
from .ops import Registry, coerce_attr, parse_number
from .scalar import Constraints, SymbolInfo

GRAMMAR = r"""
?expr: call | tensor | pvar
call: NAME "(" [arg ("," arg)*] ")"
?arg: expr | kwarg
kwarg: NAME "=" aexpr
tensor: NAME RANK?
pvar: "?" NAME

?cond: aexpr
?aexpr: aand | aexpr "or" aand      -> or_
?aand: anot | aand "and" anot       -> and_
?anot: acmp | "not" anot            -> not_
?acmp: asum | asum CMP asum         -> cmp
?asum: aprod | asum "+" aprod       -> add
     | asum "-" aprod               -> sub
?aprod: aunary | aprod "*" aunary   -> mul
      | aprod "//" aunary           -> floordiv
      | aprod "/" aunary            -> div
?aunary: aatom | "-" aunary         -> neg
?aatom: INT                         -> int
      | FLOAT                       -> float
      | NAME                        -> name
      | pvar
      | ESCAPED_STRING              -> string
      | "[" [aexpr ("," aexpr)*] "]" -> alist
      | NAME "(" [aexpr ("," aexpr)*] ")" -> acall
      | "(" aexpr ")"

RANK: "@" /[0-9]+/
CMP: "==" | "!=" | "<=" | ">=" | "<" | ">"
NAME: /[A-Za-z_][A-Za-z0-9_.]*(#[0-9]+)?/
FLOAT: /[0-9]+\.[0-9]*([eE][-+]?[0-9]+)?/
%import common.INT
%import common.ESCAPED_STRING
%import common.WS
%ignore WS
"""

_PARSER = Lark(GRAMMAR, start=["expr", "cond"], parser="lalr", propagate_positions=False)

ALIASES = {"cat": "concat", "transpose": "permute", "add_n": "sum"}


@v_args(inline=True)
class _ToRaw(Transformer):
    def call(self, name, *args):
        pos, kw = [], []
        for a in args:
            if a is None:
                continue
            if isinstance(a, tuple) and len(a) == 3 and a[0] == "kw":
                kw.append((a[1], a[2]))
            else:
                if kw:
                    raise ValueError(f"positional argument after keyword argument in {name}(...)")
                pos.append(a)
        return RawCall(str(name), tuple(pos), tuple(kw))

    def kwarg(self, name, value):
        return ("kw", str(name), value)

    def tensor(self, name, rank=None):
        return Leaf(str(name) + (str(rank) if rank else ""))

    def pvar(self, name):
        return PVar(str(name))

    def int(self, tok):
        return AConst(int(tok))

    def float(self, tok):
        return AConst(parse_number(str(tok)))  # the float it spells, exactly (as in a graph file)

    def name(self, tok):
        s = str(tok)
        if s in ("true", "false"):
            return AConst(s == "true")
        if s == "None":  # an absent optional attribute (its spelling in printed terms)
            return AConst(None)
        return AConst(("sym", s))

    def string(self, tok):
        return AConst(str(tok)[1:-1])

    def alist(self, *items):
        return AList(tuple(i for i in items if i is not None))

    def acall(self, name, *args):
        return ACall(str(name), tuple(a for a in args if a is not None))

    def cmp(self, a, op, b):
        return ABin(str(op), a, b)

    def or_(self, a, b):
        return ABin("or", a, b)

    def and_(self, a, b):
        return ABin("and", a, b)

    def not_(self, a):
        return ABin("not", a, None)

    def add(self, a, b):
        return ABin("+", a, b)

    def sub(self, a, b):
        return ABin("-", a, b)

    def mul(self, a, b):
        return ABin("*", a, b)

    def floordiv(self, a, b):
        return ABin("//", a, b)

    def div(self, a, b):
        return ABin("/", a, b)

    def neg(self, a):
        return ABin("-", AConst(0), a)


class ParseError(InputError):
    pass


def _parse(text: str, start: str, where: str, line: int = 1, col: int = 1):
    if nesting(text, "()[]") > MAX_DEPTH:
        raise ParseError(f"{where}:{line}:{col}: expression nested more than {MAX_DEPTH} levels deep")
    fast = fastparse.parse(text, start)  # well-formed texts, fast; Lark decides the rest (and words errors)
    if fast is not None:
        return fast
    try:
        tree = _PARSER.parse(text, start=start)
        return _ToRaw().transform(tree)
    except UnexpectedInput as e:
        ln, cl = e.line, e.column
        tok = getattr(e, "token", None)
        if isinstance(tok, Token) and tok.type == "$END":
            ln, cl = tok.end_line, tok.end_column  # just past the last token
        if ln in (-1, None):
            ln, cl = 1, len(text) + 1
        abs_line = line + ln - 1
        abs_col = (col + cl - 1) if ln == 1 else cl
        got = getattr(e, "token", None)
        if got is None:
            ch = getattr(e, "char", None)
            what = f"unexpected character {ch!r}" if ch else "unexpected input"
        elif isinstance(got, Token) and got.type == "$END" or str(got) == "":
            what = "unexpected end of expression"
        else:
            what = f"unexpected '{got}'"
        raise ParseError(f"{where}:{abs_line}:{abs_col}: {what} in {text!r}") from None
    except VisitError as e:
        raise ParseError(f"{where}:{line}:{col}: {e.orig_exc} in {text!r}") from None
    except RecursionError:
        raise ParseError(f"{where}:{line}:{col}: expression nested too deeply") from None


# -- lowering raw calls to terms ------------------------------------------------------------------

def _const_attr(v: AExpr, where: str):
    """Evaluate a constant attribute expression (no pattern variables)."""
    if isinstance(v, AConst):
        c = v.value
        if isinstance(c, tuple) and c[0] == "sym":
            return ("sym", c[1])
        return c
    if isinstance(v, AList):
        return [_scalar_value(_const_attr(x, where), where) if not isinstance(x, AList) else _const_attr(x, where)
                for x in v.items]
    if isinstance(v, ABin) and v.op in "+-*//":
        a = _scalar_value(_const_attr(v.left, where), where)
        b = _scalar_value(_const_attr(v.right, where), where)
        for x in (a, b):
            if isinstance(x, bool) or not isinstance(x, (int, Fraction, S.sp.Expr)):
                raise ParseError(f"{where}: arithmetic on {str(x)[:40]!r}, which is not a number")
        if v.op == "+":
            return S.norm(S.sym(a) + S.sym(b))
        if v.op == "-":
            return S.norm(S.sym(a) - S.sym(b))
        if v.op == "*":
            return S.norm(S.sym(a) * S.sym(b))
        if v.op == "//":
            return S.floordiv(a, b)
        if v.op == "/":
            if isinstance(a, Fraction) or isinstance(b, Fraction):
                return Fraction(a) / Fraction(b)
            return S.norm(S.sym(a) / S.sym(b))
    raise ParseError(f"{where}: unsupported attribute value")


def _scalar_value(c, where):
    if isinstance(c, tuple) and c[0] == "sym":
        return S.symbol(c[1])
    return c


def _attr_for_kind(c, kind: str, where: str):
    if isinstance(c, tuple) and c[0] == "sym":
        return c[1] if kind == "str" else S.symbol(c[1])
    if isinstance(c, list):
        return [_attr_for_kind(x, "scalar", where) if kind in ("scalars", "ints") else x for x in c]
    if kind == "number" and isinstance(c, S.sp.Rational):  # factor=1/2, as relations are printed
        return Fraction(int(c.p), int(c.q))
    return c


def lower(raw, reg: Registry, where: str) -> Term:
    """Turn a parsed expression into a checked :class:`Term` (ops exist, attributes typed)."""
    if isinstance(raw, (Leaf, PVar)):
        return raw
    assert isinstance(raw, RawCall)
    name = ALIASES.get(raw.name, raw.name)
    op = reg.get(name)
    if op is None:
        raise ParseError(f"{where}: unknown operator '{raw.name}'")
    if op.meaning is not None:
        raise ParseError(f"{where}: {op.name} cannot appear inside an expression (it is defined by other ops)")
    args = [lower(a, reg, where) for a in raw.args]
    if op.arity is not None and len(args) != op.arity:
        raise ParseError(f"{where}: {op.name} takes {op.arity} tensor argument(s), got {len(args)}")
    if op.arity is None and not args:
        raise ParseError(f"{where}: {op.name} needs at least one tensor argument")
    given = dict(raw.kwargs)
    unknown = set(given) - {a.name for a in op.attrs}
    if unknown:
        raise ParseError(f"{where}: unknown attribute(s) {', '.join(sorted(unknown))} for {op.name}")
    attrs = {}
    for spec in op.attrs:
        if spec.name not in given:
            if spec.required:
                raise ParseError(f"{where}: {op.name} needs attribute {spec.name}=")
            attrs[spec.name] = coerce_attr(op, spec, spec.default, where)
            continue
        try:
            c = _attr_for_kind(_const_attr(given[spec.name], where), spec.kind, where)
            attrs[spec.name] = coerce_attr(op, spec, c, where)
        except ShapeError as e:
            raise ParseError(str(e)) from None
    if op.name in VARIADIC and len(args) == 1:
        return args[0]  # a one-operand concat/sum is its operand
    return app(op.name, *args, **attrs)


def parse_term(text: str, reg: Registry, where: str = "<expr>", line: int = 1, col: int = 1) -> Term:
    """Parse a relation expression (no pattern variables)."""
    raw = _parse(text, "expr", where, line, col)
    _no_pattern_vars(raw, f"{where}:{line}:{col}")
    return lower(raw, reg, f"{where}:{line}:{col}")


def _no_pattern_vars(raw, where: str) -> None:
    if isinstance(raw, PVar):
        raise ParseError(f"{where}: ?{raw.name}: pattern variables only belong in lemmas")
    if isinstance(raw, RawCall):
        for a in raw.args:
            _no_pattern_vars(a, where)


def parse_raw(text: str, where: str = "<pattern>"):
    """Parse a pattern (with ``?x`` variables) without lowering; see :mod:`graphguard.engine.lemma`."""
    return _parse(text, "expr", where)


def parse_cond(text: str, where: str = "<condition>") -> AExpr:
    return _parse(text, "cond", where)


# -- relation files ---------------------------------------------------------------------------------

@dataclass
class RelationFile:
    source: str
    inputs: dict[str, list[Term]] = field(default_factory=dict)
    expect: dict[str, list[Term]] = field(default_factory=dict)
    symbols: dict[str, SymbolInfo] = field(default_factory=dict)
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    allow_partial: dict[str, tuple[int, int]] = field(default_factory=dict)  # output -> (line, column)
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # input -> [lo, hi) of its values
    range_positions: dict[str, tuple[int, int]] = field(default_factory=dict)  # input -> (line, column)
    assume: dict[str, Fraction] = field(default_factory=dict)  # named assumption -> its number (ASSUMPTIONS)

    def constraints(self) -> Constraints:
        cx = Constraints()
        for info in self.symbols.values():
            cx.declare(info)
        return cx

    def leaf_ranges(self) -> dict[str, tuple[int, int]]:
        """The value ranges of G_d tensors that the stated ones give: a leaf of an input's relation reached
        through data movement that keeps every entry (concat, permute, reshape, identity) holds only values
        of the input; a leaf under a slice, a sum or any other op gets nothing. Ranges met twice intersect."""
        out: dict[str, tuple[int, int]] = {}

        def walk(e: Term, r: tuple[int, int]) -> None:
            if isinstance(e, Leaf):
                old = out.get(e.name)
                out[e.name] = r if old is None else (max(old[0], r[0]), min(old[1], r[1]))
            elif isinstance(e, App) and e.op in RANGE_KEEPING:
                for a in e.args:
                    walk(a, r)
        for name, r in self.ranges.items():
            for e in self.inputs.get(name, ()):
                walk(e, r)
        return out


RANGE_KEEPING = frozenset({"core.concat", "core.permute", "core.reshape", "core.identity"})
_RANGE = re.compile(r"\s*\[\s*([-+]?[0-9]{1,18})\s*,\s*([-+]?[0-9]{1,18})\s*([)\]])\s*")


def parse_range(text: str) -> tuple[int, int] | None:
    """``"[lo, hi)"`` or ``"[lo, hi]"`` (integers) as the half-open ``(lo, hi)``; None if malformed or empty."""
    m = _RANGE.fullmatch(text)
    if m is None:
        return None
    lo, hi = int(m.group(1)), int(m.group(2)) + (1 if m.group(3) == "]" else 0)
    return (lo, hi) if lo < hi else None


class _Loader(yaml.SafeLoader):
    """Composes a relation file's node tree: plain YAML only -- no tags (``!!python/...``), anchors or aliases
    (no "billion laughs"), no key twice in a mapping, nesting at most MAX_DEPTH levels."""

    _depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(None, None, "anchors and aliases are not allowed in a relation file",
                                              event.start_mark)
        if getattr(event, "tag", None) is not None:
            raise yaml.composer.ComposerError(None, None, f"tag {event.tag} is not allowed in a relation file",
                                              event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep",
                                                  event.start_mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode):
                    if k.value in seen:
                        raise yaml.composer.ComposerError(None, None, f"'{k.value}' appears twice in one mapping",
                                                          k.start_mark)
                    seen.add(k.value)
        return node


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # a list used twice is written twice: relation files hold no aliases
        return True


def relation_yaml(doc: dict, sort_keys: bool = False) -> str:
    """A relation file's text for ``doc`` ({"inputs": ..., "symbols": ..., "expect": ...})."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=sort_keys, width=1000, default_flow_style=None)


def _compose(text: str, source: str):
    loader = None
    try:
        loader = _Loader(text)  # (checks that every character is one YAML allows)
        return loader.get_single_node()
    except yaml.reader.ReaderError as e:
        before = text[:e.position]
        pos = f":{before.count(chr(10)) + 1}:{e.position - before.rfind(chr(10))}"
        ch = chr(e.character) if isinstance(e.character, int) else e.character
        raise InputError(f"{source}{pos}: invalid YAML (character {ch!r} is not allowed)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        pos = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        raise InputError(f"{source}{pos}: invalid YAML ({getattr(e, 'problem', None) or e})") from None
    finally:
        if loader is not None:
            loader.dispose()


def _key(k, source: str) -> str:
    if not isinstance(k, yaml.ScalarNode):
        raise InputError(f"{source}:{k.start_mark.line + 1}:{k.start_mark.column + 1}: expected a name as the key")
    return str(k.value)


def _exprs(node, source: str, reg: Registry) -> list[Term]:
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    out = []
    for it in items:
        if not isinstance(it, yaml.ScalarNode):
            raise InputError(f"{source}:{it.start_mark.line + 1}:{it.start_mark.column + 1}: expected an "
                             f"expression string")
        line, col = it.start_mark.line + 1, it.start_mark.column + 1
        if it.style in ('"', "'"):
            col += 1
        out.append(parse_term(str(it.value), reg, source, line, col))
    if not out:
        raise InputError(f"{source}:{node.start_mark.line + 1}:{node.start_mark.column + 1}: an empty list of "
                         f"expressions")
    return out


SECTIONS = ("inputs", "symbols", "expect", "allow_partial", "ranges", "assume")
# assumptions a relation file may state about values the programs compute (not only their inputs), each a number;
# a proof that uses one says so with its verdict
ASSUMPTIONS = {
    "masked_scores_within": "every score a masked softmax reads lies in [-N, N] (a mask filled with a large "
                            "negative number: added to the scores, or selected in their place, gives the same "
                            "probabilities where every row keeps a key; the aten-hlo pack's masked_softmax pass)",
}


def parse_relation_text(text: str, source: str, reg: Registry, need_inputs: bool = True) -> RelationFile:
    """A relation file; with ``need_inputs=False`` (an ``--expect`` file) the ``inputs:`` section is optional."""
    root = _compose(text, source)
    rel = RelationFile(source)
    if root is None:
        raise InputError(f"{source}: empty relation file (needs an '{'inputs' if need_inputs else 'expect'}:' "
                         f"mapping)")
    if not isinstance(root, yaml.MappingNode):
        raise InputError(f"{source}:1:1: a relation file is a mapping with 'inputs:' (and optional 'symbols:', "
                         f"'expect:', 'allow_partial:', 'ranges:', 'assume:')")
    sections = {}
    for k, v in root.value:
        key = _key(k, source)
        if key not in SECTIONS:
            raise InputError(f"{source}:{k.start_mark.line + 1}:{k.start_mark.column + 1}: unknown section "
                             f"'{key}' (expected {', '.join(SECTIONS)})")
        sections[key] = v
    if "symbols" in sections:
        node = sections["symbols"]
        if not isinstance(node, yaml.MappingNode):
            raise InputError(f"{source}:{node.start_mark.line + 1}: 'symbols' must be a mapping")
        for k, v in node.value:
            name = _key(k, source)
            where = f"{source}:{k.start_mark.line + 1}:{k.start_mark.column + 1}"
            if not S.valid_name(name):
                raise InputError(f"{where}: a symbol is named by an identifier (letters, digits, _), got "
                                 f"{name[:60]!r}")
            try:  # the node holds no tags or aliases (_Loader): this constructs plain data
                spec = yaml.safe_load(yaml.serialize(v)) if not isinstance(v, yaml.ScalarNode) or v.value else {}
            except (yaml.YAMLError, ValueError):  # e.g. an integer of more digits than Python converts
                raise InputError(f"{where}: symbol '{name}' takes integer min/max/multiple_of") from None
            if spec is None:
                spec = {}
            if not isinstance(spec, dict) or set(spec) - {"min", "max", "multiple_of"} or not all(
                    isinstance(x, int) and not isinstance(x, bool) for x in spec.values()):
                raise InputError(f"{where}: symbol '{name}' takes integer min/max/multiple_of")
            lo, hi, mult = spec.get("min", 1), spec.get("max"), spec.get("multiple_of")
            if lo < 0:
                raise InputError(f"{where}: symbol '{name}' is a dimension: min must be >= 0")
            if mult is not None and mult < 1:
                raise InputError(f"{where}: symbol '{name}': multiple_of must be >= 1")
            if hi is not None and hi < lo:
                raise InputError(f"{where}: symbol '{name}' has no possible value (min {lo} > max {hi})")
            info = SymbolInfo(name, lo, hi, mult)
            try:
                Constraints(symbols={name: info}).model()
            except ValueError:
                raise InputError(f"{where}: symbol '{name}' has no possible value within min/max/multiple_of") from None
            rel.symbols[name] = info
    for section in ("inputs", "expect"):
        if section not in sections:
            continue
        node = sections[section]
        if not isinstance(node, yaml.MappingNode):
            raise InputError(f"{source}:{node.start_mark.line + 1}: '{section}' must map tensor names to "
                             f"expressions")
        target = rel.inputs if section == "inputs" else rel.expect
        for k, v in node.value:
            name = _key(k, source)  # (a name twice in one mapping: _Loader)
            target[name] = _exprs(v, source, reg)
            rel.positions[name] = (k.start_mark.line + 1, k.start_mark.column + 1)
    if "allow_partial" in sections:
        node = sections["allow_partial"]
        items = node.value if isinstance(node, yaml.SequenceNode) else [node] if node.value else []
        for it in items:
            if not isinstance(it, yaml.ScalarNode) or not str(it.value) or it.tag != "tag:yaml.org,2002:str":
                raise InputError(f"{source}:{it.start_mark.line + 1}:{it.start_mark.column + 1}: 'allow_partial' "
                                 f"lists output names: allow_partial: [y, ...]")
            rel.allow_partial[str(it.value)] = (it.start_mark.line + 1, it.start_mark.column + 1)
    if "ranges" in sections:
        node = sections["ranges"]
        if not isinstance(node, yaml.MappingNode):
            raise InputError(f"{source}:{node.start_mark.line + 1}: 'ranges' must map input names to value ranges "
                             f"like \"[0, 128)\"")
        for k, v in node.value:
            name = _key(k, source)
            where = f"{source}:{v.start_mark.line + 1}:{v.start_mark.column + 1}"
            r = parse_range(str(v.value)) if isinstance(v, yaml.ScalarNode) else None
            if r is None:
                raise InputError(f"{where}: the range of '{name[:60]}' must be a non-empty \"[lo, hi)\" or "
                                 f"\"[lo, hi]\" of integers (quoted)")
            rel.ranges[name] = r
            rel.range_positions[name] = (k.start_mark.line + 1, k.start_mark.column + 1)
    if "assume" in sections:
        node = sections["assume"]
        if not isinstance(node, yaml.MappingNode):
            raise InputError(f"{source}:{node.start_mark.line + 1}: 'assume' must map assumption names to numbers "
                             f"(known: {', '.join(ASSUMPTIONS)})")
        for k, v in node.value:
            name = _key(k, source)
            where = f"{source}:{k.start_mark.line + 1}:{k.start_mark.column + 1}"
            if name not in ASSUMPTIONS:
                raise InputError(f"{where}: unknown assumption '{name[:60]}' (known: {', '.join(ASSUMPTIONS)})")
            text = str(v.value) if isinstance(v, yaml.ScalarNode) else ""
            if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", text.strip()):
                raise InputError(f"{where}: assumption '{name}' takes a non-negative number, got {text[:40]!r}")
            rel.assume[name] = Fraction(text.strip())
    if "inputs" not in sections and need_inputs:
        raise InputError(f"{source}: the relation file has no 'inputs:' section")
    return rel


def load_relation(path: str | Path, reg: Registry, need_inputs: bool = True) -> RelationFile:
    return parse_relation_text(read_text(path), str(path), reg, need_inputs)


# -- exact conversions: convert(p@0, dtype=t) in an input relation ----------------------------------------------

CONVERT = "core.convert"


def exact_conversions(rel: RelationFile, g_d, reg: Registry, cx: Constraints) -> None:
    """Read each ``convert(E, dtype=t)`` of ``rel``'s input relations as what it states: the G_d tensor E is the
    exact conversion of the specification input (of dtype t) to E's dtype, so E holds only t values and its
    conversion back to t is exact. That needs the conversion from t to E's dtype to lose nothing
    (:func:`graphguard.ir.dtypes.exact_conversion`: float16 -> float32, int widening...); any other is refused
    (InputError naming the tensor and both dtypes), as is a convert of anything but G_d inputs, whole, and their
    concatenations, permutations and reshapes (``RANGE_KEEPING``: every entry of each input is stated to be such
    a value).

    The statement is then built into G_d, so that every later step (the e-graph, the label searches, the checker,
    replay) sees it: each G_d input ``p@r`` under a convert to t becomes the output of a ``core.convert`` to its
    dtype of a new G_d input ``p.t@r`` of dtype t, and the relation names ``p.t@r`` in the convert's place
    (another relation naming ``p@r`` itself still reads the same tensor). Like the rest of the relation, what
    it states is the premise of the verdict, not an assumption beside it."""
    from .dtypes import exact_conversion
    from .semantics import term_dtype

    def at(name: str) -> str:
        pos = rel.positions.get(name)
        return f"{rel.source}:{pos[0]}:{pos[1]}" if pos else rel.source

    d_inputs = set(g_d.inputs)
    narrowed: dict[str, str] = {}  # G_d input -> the dtype t it holds values of
    fresh: dict[str, str] = {}  # G_d input -> its new input p.t@r

    def leaf_dtype(t: str) -> str:
        return g_d.tensors[t].dtype

    def under(e: Term, name: str, t: str, text: str) -> Term:
        """E of convert(E, dtype=t), its leaves the new narrow inputs."""
        if isinstance(e, Leaf):
            if e.name not in d_inputs:
                raise InputError(f"{at(name)}: relation for {name}: {text}: '{e.name}' is not an input of the "
                                 f"implementation (convert relates inputs only)")
            was = narrowed.setdefault(e.name, t)
            if was != t:
                raise InputError(f"{at(name)}: relation for {name}: {text}: '{e.name}' is already related as "
                                 f"the exact conversion of a {was} tensor, not of a {t} one")
            if e.name not in fresh:
                base, _, r = e.name.rpartition("@")
                new, k = f"{base}.{t}@{r}", 1
                while new in g_d.tensors:
                    k += 1
                    new = f"{base}.{t}{k}@{r}"
                fresh[e.name] = new
            return Leaf(fresh[e.name])
        if isinstance(e, App) and e.op in RANGE_KEEPING:
            return App(e.op, tuple(under(a, name, t, text) for a in e.args), e.attrs)
        op = e.op if isinstance(e, App) else str(e)
        raise InputError(f"{at(name)}: relation for {name}: {text}: only inputs of the implementation, whole, and "
                         f"their concat / permute / reshape convert exactly ({op} does not keep every entry)")

    def lower_converts(e: Term, name: str) -> Term:
        if not isinstance(e, App):
            return e
        if e.op != CONVERT:
            return App(e.op, tuple(lower_converts(a, name) for a in e.args), e.attrs)
        (x,) = e.args
        t = e.attrd["dtype"]
        text = to_text(e)
        if any(leaf not in g_d.tensors for leaf in leaves(x)):
            return e  # (check_relation names the unknown tensor)
        try:
            d = term_dtype(x, leaf_dtype, reg)
        except ShapeError as err:
            raise InputError(f"{at(name)}: relation for {name}: {err}") from None
        if d is None or d == t:
            return lower_converts(x, name) if d == t else e
        if not exact_conversion(t, d):
            raise InputError(f"{at(name)}: relation for {name}: {text} states that a {d} tensor is the exact "
                             f"conversion of a {t} input, but {t} -> {d} is not exact (a convert may only relate "
                             f"an input to its exact conversion to a wider dtype: float16 -> float32, ...)")
        return under(x, name, t, text)

    for name, exprs in rel.inputs.items():
        rel.inputs[name] = [lower_converts(e, name) for e in exprs]
    if not fresh:
        return
    # G_d inputs named in a relation outside a convert keep their names: the convert node writes them
    for p, new in fresh.items():
        info = g_d.tensors[p]
        g_d.inputs[g_d.inputs.index(p)] = new
        g_d.tensors[new] = type(info)(new, info.shape, narrowed[p])
        g_d.add_node(CONVERT, [new], [p], {"dtype": info.dtype}, name=f"relation.convert.{new}",
                     loc=f"{rel.source}: convert")
    g_d.validate(reg, cx)
