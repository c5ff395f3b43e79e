"""Operator definitions: what an op name means.

Every operator has a dialect-qualified name (``core.concat``, ``aten.mm``, ``hlo.dot``), typed attributes,
a shape function and a NumPy reference implementation. The *clean* dialect -- the operations allowed in
a certificate R_o: slice, concat, permute, reshape, identity and cross-rank sum/max -- is defined here,
together with the collectives, whose meaning is given as clean expressions over their inputs.
Compute operators come from lemma packs (plugins), which register :class:`OpDef` s the same way.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Sequence

import numpy as np
import sympy as sp

from ..errors import ShapeError
from . import scalar as S
from .expr import App, Term, app

Shape = tuple  # tuple of scalars

ATTR_KINDS = ("int", "ints", "scalar", "scalars", "str", "number", "bool")

# Every tensor's dtype is one of these names (numpy/torch spelling; frontends map their own: HLO ``f32`` is
# ``float32``, ``pred`` is ``bool``). The graph lint refuses any other.
DTYPES = frozenset((
    "bool", "int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "bfloat16", "float32", "float64",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e4m3", "float8_e8m0fnu",
    "complex32", "complex64", "complex128"))


_INTS = ("uint8", "int8", "int16", "int32", "int64")
_FLOATS = ("float16", "bfloat16", "float32", "float64")
_FLOAT_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}


def dtype_category(d: str) -> int:
    """0 bool, 1 integer, 2 floating point."""
    if d in ("bool", "pred"):
        return 0
    if d in _INTS or re.fullmatch(r"u?int\d+|[su]\d+", d):
        return 1
    return 2


def _promoted(ds, attrs) -> str:
    return promote(*ds)


def promote(*dtypes: str) -> str:
    """torch's type promotion of tensor operands (category first, then width)."""
    ds = [d for d in dtypes if d]
    if not ds:
        return "float32"
    top = max(dtype_category(d) for d in ds)
    ds = [d for d in ds if dtype_category(d) == top]
    if top == 0:
        return "bool"
    if top == 1:
        known = [d for d in ds if d in _INTS]
        if set(known) == {"uint8", "int8"}:
            return "int16"
        return max(known, key=_INTS.index) if known else ds[0]
    cplx = [d for d in ds if d.startswith("complex")]
    if cplx:  # complex with real floats: the complex type as wide as the widest of them
        bits = max([int(d[7:]) for d in cplx] + [2 * _FLOAT_BITS.get(d, 0) for d in ds if d not in cplx])
        return f"complex{64 if bits == 32 and 'bfloat16' in ds else bits}"  # (no complex bfloat16)
    known = [d for d in ds if d in _FLOATS]
    if set(known) == {"float16", "bfloat16"}:
        return "float32"
    return max(known, key=_FLOATS.index) if known else ds[0]


@dataclass(frozen=True)
class AttrSpec:
    """A typed attribute. ``kind``: int (concrete, e.g. a dim), ints, scalar (may be symbolic), scalars,
    str, number (an exact rational: a float is its exact binary value; inf/nan stay floats), bool.
    ``optional``: None is a legal value (the default). ``dim_of``: the attribute names dims (an int, or each
    of several ints) of tensor input ``dim_of``; a negative one counts from the end of that input's rank
    and is made non-negative when a term is built (:func:`normalize_dims`), so the e-graph and lemma
    conditions only ever see dims in [0, rank)."""
    name: str
    kind: str  # one of ATTR_KINDS
    default: Any = None
    choices: tuple = ()
    optional: bool = False
    dim_of: int | None = None

    @property
    def required(self) -> bool:
        return self.default is None and not self.optional


@dataclass(frozen=True)
class Reduction:
    """The op reduces its input over the dims named by attribute ``dims`` (None: over every dim; an absent or
    empty value also means every dim), keeping them as size 1 where attribute ``keepdim`` (None: never) is
    true. ``combine``: the op that combines the reductions of two parts along a reduced dim (``sum`` for a
    sum, ``max`` for a max), None where there is none (a mean, a variance)."""
    dims: str | None
    keepdim: str | None = None
    combine: str | None = None


@dataclass(frozen=True)
class RowWise:
    """Each output row depends on the input row through it only: rows span the dims named by attribute
    ``dims`` (an int or ints: those dims; a shape, such as layer norm's ``normalized_shape``: that many
    trailing dims). ``args``: tensor inputs cut into rows with the output (same shape); the others are used
    whole. ``inputs``: for an op with optional tensor inputs, how many it takes at most. ``index``: those of
    ``args`` that hold indices into an input (a slice of rows may leave out the ones out of range)."""
    dims: str
    args: tuple[int, ...] = (0,)
    inputs: int | None = None
    index: tuple[int, ...] = ()


@dataclass(frozen=True)
class Bilinear:
    """The op is the product of its two tensor inputs over contracted dims: its output entry at (batch, lhs free,
    rhs free) -- those dims in that order, free dims in input order -- is the sum, over the contracting dims, of
    lhs times rhs at that batch entry. Each of the four is a tuple of dims, or the name of the ``ints``
    attribute holding them (XLA's ``dot``); ``ranks``: the input ranks those dims are stated for (``mm``: (2, 2)),
    None where the attributes state them at any rank."""
    lhs_batch: tuple | str = ()
    lhs_contracting: tuple | str = ()
    rhs_batch: tuple | str = ()
    rhs_contracting: tuple | str = ()
    ranks: tuple[int, int] | None = None

    def axes(self, attrs: dict, rx: int, ry: int) -> tuple[list, list, list, list] | None:
        """(lhs batch, lhs contracting, rhs batch, rhs contracting) dims for inputs of ranks rx, ry; None where
        the declaration is for other ranks."""
        if self.ranks is not None and (rx, ry) != tuple(self.ranks):
            return None

        def dims(d):
            return [int(x) for x in (attrs.get(d, ()) if isinstance(d, str) else d)]
        return (dims(self.lhs_batch), dims(self.lhs_contracting), dims(self.rhs_batch),
                dims(self.rhs_contracting))

    def matmul(self, attrs: dict) -> bool:
        """Whether the op is the matrix product ``x @ w`` of rank-2 inputs (x's dim 1 contracted with w's dim 0)."""
        return self.axes(attrs, 2, 2) == ([], [1], [], [0])

    @property
    def stated(self) -> bool:
        """Whether the attributes state the dims (a general dot), rather than the op at fixed ranks."""
        return self.ranks is None


@dataclass
class OpDef:
    """An operator.

    ``arity`` is the number of tensor inputs (None: one or more, kept binary inside terms).
    ``shape(in_shapes, attrs, cx)`` returns the output shape or raises :class:`ShapeError`.
    ``ref(arrays, attrs)`` is the NumPy reference.  ``clean`` marks the certificate dialect.
    ``meaning(in_terms, attrs)`` -- for ops that are *defined* by other ops (collectives, split) --
    returns one term per output; such ops never appear inside terms themselves.
    ``scaling``: with one operand a constant (or a single operand: ``neg``), the op multiplies or divides the
    other by it (so the input is a clean function of the output, as for data movement).
    ``broadcast``: the output repeats its input along new or size-1 dims (the engine tells the e-graph how
    a G_d tensor named in a relation was broadcast, so lemmas can cut it to a narrower copy).
    ``data_sizes``: ``((attr, dim), ...)`` -- scalar attributes naming an output dim whose size the data
    decides (``nonzero``'s row count; ``dim`` an int, or the name of the int attribute holding it). The
    frontend fills each with the captured size symbol; the engine equates the symbols of two e-nodes with equal
    operands and other attributes (equal data, equal size). ``data_size_args``: the operands those sizes
    depend on, where not all (a slice at bounds the data decides: the bounds and the sliced dim's length, an
    attribute, not the sliced data).

    Algebraic properties (declarations only: :mod:`graphguard.engine.families` derives the standard lemma
    families from them, each fuzzed like a hand-written lemma):

    ``elementwise``: tensor inputs combined entry by entry, ``out[i] = f(x[i], y[i], ...)`` (the others are used
    whole by every entry); ``broadcasting``: those inputs broadcast against each other (NumPy rules), else they
    have equal shapes. ``commutative`` / ``associative`` (binary ops): True, or the attribute values under which
    it holds (``{"alpha": 1}``). ``linear``: inputs in which f is linear, ``f(x + y) = f(x) + f(y)`` and
    ``f(c x) = c f(x)`` -- an int for one input alone (the others fixed), a tuple for inputs jointly
    (``add``: ``((0, 1),)``); ``linear_when``: the attribute values under which it is (``masked_fill`` with 0);
    ``divisor``: the number attribute the op divides by (``div.Scalar``'s ``other``), which the declarations
    need nonzero (``(a + b) / 0`` is NaN where ``a / 0 + b / 0`` is inf). ``scalar_factor``: the op is ``x * c`` for its number attribute of that name
    (``scale``'s ``factor``). ``reduction``: a :class:`Reduction`. ``rowwise``: a :class:`RowWise`.
    ``data_movement``: every output entry is a copy of an entry of input 0 (the other inputs are indices).
    ``bilinear``: a :class:`Bilinear` -- the op is a product of its two inputs over the dims it names (the label
    proofs of products read their pairs of entries from it; ``tests/test_provers.py`` checks each declaration
    against the op's reference).
    ``broadcast_to``: the op is NumPy's ``broadcast_to(x, shape)`` for its shape attribute of that name (new dims
    lead; a size of -1 keeps the dim): its concats and narrower copies split (families 1215, 1216).
    ``rows``: ``(input, trailing)`` -- row-wise without an attribute: each output row (the index over all but
    the last ``trailing`` dims, the same dims as that input's) depends on that input's row at the same index
    alone, the other inputs used whole (``mm``: ``out[i, :] = x[i, :] @ w``). Declarations only; the fuzzer
    checks that permuting the input's rows permutes the output's.
    ``identity``: ``((input, value, attrs), ...)`` -- that input filled with ``value`` (under those attribute
    values) makes the op return its other input (``x + 0``, ``x * 1``) where shape and dtype stay the same;
    :mod:`graphguard.passes.identities` drops such ops before proving, and the fuzzer checks the declaration.
    ``fill``: an op without tensor inputs whose every entry is its number attribute of that name (a constant).
    ``scalar_form``: ``((input, op, attr, power), ...)`` -- that input a constant c makes the op the scalar op
    ``op`` of its other input with number attribute ``attr`` = c ** power (``x * c`` is ``mul.Scalar(x, c)``,
    ``x / c`` is ``mul.Scalar(x, 1 / c)``) where shape and dtype stay the same; :mod:`graphguard.passes.scalars`
    rewrites such ops before proving, and the fuzzer checks the declaration.
    ``biased``: ``(product, add, attrs)`` -- under those attribute values the op is ``add(product(in1, in2), in0)``
    (``addmm`` = ``add.Tensor(mm(a, b), c)``). Where its output is read only by a reshape that keeps the last dim
    and its bias is a row (``[n]``, ``[1, n]``), :mod:`graphguard.passes.bias` makes it the product, the
    reshape, then the add of the bias (an ``nn.Linear`` captured by fx, then, has the pieces of its ONNX export);
    the fuzzer checks the declaration.
    """
    name: str
    arity: int | None
    shape: Callable | None = None
    ref: Callable | None = None
    attrs: tuple[AttrSpec, ...] = ()
    clean: bool = False
    cost: int = 1
    meaning: Callable | None = None
    collective: bool = False
    doc: str = ""
    source: str = ""  # which plugin registered it
    dtype: Callable | None = None  # dtype(in_dtypes, attrs) -> out dtype; default: the first input's (clean
    # ops and collectives: the one dtype all their inputs share). None: the call site's declared dtype decides
    scaling: bool = False
    broadcast: bool = False
    data_sizes: tuple[tuple[str, int | str], ...] = ()
    data_size_args: tuple[int, ...] | None = None
    elementwise: tuple[int, ...] = ()
    broadcasting: bool = False
    commutative: bool | dict = False
    associative: bool | dict = False
    linear: tuple = ()
    linear_when: dict | None = None
    divisor: str = ""
    scalar_factor: str = ""
    reduction: "Reduction | None" = None
    rowwise: "RowWise | None" = None
    bilinear: "Bilinear | None" = None
    data_movement: bool = False
    broadcast_to: str = ""
    rows: tuple[int, int] | tuple = ()
    identity: tuple = ()
    fill: str = ""
    scalar_form: tuple = ()
    biased: tuple = ()
    # the expression this op computes, spelt out over ``?x0``, ``?x1``... (its tensor inputs) and ``?p_<attr>``
    # (its attributes), with a condition: where a graph computes that expression op by op, its intermediate
    # tensors read only inside it, passes.fusion.fuse_expressions collapses it into this one op (HF's RMSNorm's seven
    # ATen ops beside a kernel that fuses them); family 1218 states the identity, so ``lemmas check`` fuzzes it.
    # Several spellings of one op (each framework's way of writing one masked vocabulary lookup): a tuple of
    # ``(expr, cond[, examples[, index[, fixed]]])``, each its own lemma of family 1218 (:meth:`spellings`)
    fuses: tuple[str, str] | tuple = ()
    # the expression the op *is*, spelt out over ``?x0``... and ``?p_<attr>`` in other ops, in the same format as
    # ``fuses``: family 1228 rewrites the op into it in the e-graph (the reverse of 1218), so the lemmas over the
    # spelled ops apply to the op -- a variance over a concatenation splits into the parts' sums as a mean does.
    # No pass collapses it (a program computing it op by op is left as it is); ``lemmas check`` fuzzes it
    unfolds: tuple[str, str] | tuple = ()
    # the elementwise function the op computes, by a name every dialect shares ("where", "le", "and", "exp"...):
    # a name, or {name: attribute values under which the op computes it} (``hlo.compare``'s directions). Two ops
    # of different dialects computing the same function are the same op up to their broadcasting: family 1220
    # states it (the broadcasting one as the other applied to explicit broadcasts), and ``lemmas check`` fuzzes
    # every pair, so a wrong declaration fails there
    computes: str | dict = ""
    # ``((index, table, dim, negative), ...)``: the op is undefined (torch raises) unless every value of tensor
    # input ``index`` lies in [0, n) -- [-n, n) where ``negative`` -- with n the size of tensor input ``table``
    # on ``dim`` (an int, or the name of the attribute holding it). A G_s operator so declared gives the G_s
    # input its index comes from (through ops that keep every entry) that range as a fact, carried like a
    # relation's ``ranges:`` and printed among the certificate's assumptions (:func:`graphguard.ir.values.implied_ranges`)
    index_domain: tuple = ()
    # Invariances (issue 41; families 1223-1226 in graphguard.engine.invariances derive their lemmas):
    # ``shift_invariant``: ``(dim, expr, total, fixed)`` -- adding a term constant along the op's dim attribute
    # ``dim`` leaves it unchanged (softmax, log-softmax: op(x - c) = op(x) for any c broadcast along dim), and the
    # op is ``expr`` (over ``?x0`` and ``{t}``) of its row total ``total`` (over ``{x}``: a sum over dim, keepdim, of
    # an elementwise function of x), under attribute values ``fixed`` (log_softmax = x - log(sum(exp(x)))).
    shift_invariant: tuple = ()
    # ``homogeneous``: ``(degree, positive_only, fixed)`` -- f(c x) = c ** degree f(x) for every real c > 0
    # (``positive_only``: relu, leaky relu) or every real c (a square), under attribute values ``fixed``
    homogeneous: tuple = ()
    # ``positive``: every output entry is > 0 over the reals, whatever the input (exp, sigmoid): a factor known
    # positive from the op that computed it (never assumed)
    positive: bool = False
    # ``tiles``: the op is NumPy's ``tile(x, reps)`` for its ints attribute of that name (torch's ``repeat``): an
    # expand of x with a unit dim inserted before each repeated dim, reshaped (family 1226)
    tiles: str = ""

    def linear_groups(self, attrs=None) -> tuple[tuple[int, ...], ...]:
        """``linear`` with every entry a tuple of inputs; given a call's ``attrs``, none where they are not the
        values ``linear_when`` asks."""
        if attrs is not None and self.linear_when and any(
                k not in attrs or not _same_value(attrs[k], v) for k, v in self.linear_when.items()):
            return ()
        if attrs is not None and self.divisor and _same_value(attrs.get(self.divisor), 0):
            return ()
        return tuple((g,) if isinstance(g, int) else tuple(g) for g in self.linear)

    def data_dims(self, attrs) -> list[tuple[str, int]]:
        """``data_sizes`` with each dim an int (an attribute's value where it names one)."""
        a = dict(attrs)
        return [(k, int(a[d]) if isinstance(d, str) else d) for k, d in self.data_sizes]

    def spellings(self) -> list[tuple[str, str, tuple | None, dict, dict]]:
        """``fuses`` as ``(expr, cond, examples, index, fixed)`` spellings (examples None: the op's own, index: the
        fuzzer's bounds of index variables, fixed: the op's attribute values the spelling computes it under --
        ``((a - y) ** 2).sum()`` is ``mse_loss`` at reduction 2 -- where the expression binds no variable of theirs)."""
        return _spellings(self.fuses)

    def unfoldings(self) -> list[tuple[str, str, tuple | None, dict, dict]]:
        """``unfolds`` in the format of :meth:`spellings`."""
        return _spellings(self.unfolds)

    def attr_spec(self, name: str) -> AttrSpec | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None


def _spellings(f: tuple) -> list[tuple[str, str, tuple | None, dict, dict]]:
    """``fuses`` / ``unfolds`` as ``(expr, cond, examples, index, fixed)`` (:meth:`OpDef.spellings`)."""
    if not f:
        return []
    if isinstance(f[0], str):
        return [(f[0], f[1], None, {}, {})]
    return [(x[0], x[1], x[2] if len(x) > 2 else None, dict(x[3]) if len(x) > 3 else {},
             dict(x[4]) if len(x) > 4 else {}) for x in f]


def float_to_int(x, dtype) -> "np.ndarray":
    """``x`` cast to the NumPy dtype ``dtype``; from floating point to an integer type, truncated and saturated
    (NaN to 0, beyond the type's range to its bound). C leaves such conversions undefined and NumPy's result
    differs between its vectorised and scalar loops (NaN to uint32 gave 0 or 2^31 for the same value in
    different arrays), so every pack's cast reference uses this one rule: a cast is then a function, and
    the dialects' casts agree with each other."""
    x, dt = np.asarray(x), np.dtype(dtype)
    if x.dtype.kind != "f" or dt.kind not in "iu":
        return x.astype(dt)
    info = np.iinfo(dt)
    t = np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0, posinf=np.inf, neginf=-np.inf)
    hi, lo = t >= float(info.max), t <= float(info.min)
    out = np.where(hi | lo, 0.0, t).astype(dt)
    out[hi], out[lo] = info.max, info.min
    return out


def _same_value(a, b) -> bool:
    try:
        return a == b or float(a) == float(b)
    except (TypeError, ValueError):
        return False


_INTEGRAL = re.compile(r"[-+]?[0-9]+(?:/[0-9]+)?")
_DECIMAL = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,3})?")


# the one NaN every parsed attribute holds: NaN equals nothing, but a tuple holding the same object equals itself
# (and hashes alike), so two terms with a NaN attribute -- an empty buffer's fill -- are the same term
NAN = float("nan")


def number_text(v) -> str:
    """A number as exact text for a graph file (read back by :func:`parse_number`: a Fraction; inf/nan floats)."""
    if isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return repr(float(v))


def parse_number(text: str) -> Fraction | float:
    """A number attribute from text (never evaluated): ``3`` and ``1/3`` are exact; a decimal (``0.1``,
    ``1e-05``; exponents of at most three digits) is the float it spells, by its exact binary value (as JSON and
    Python read it, so text and graph files agree); ``inf``, ``-inf`` and ``nan`` stay floats. A decimal beyond
    the float range, or anything else, raises ValueError (ZeroDivisionError for ``n/0``)."""
    t = text.strip()
    if t.lower() == "nan":
        return NAN
    if t.lower() in ("inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"):
        return float(t)
    if len(t) > 2400:  # an exact binary fraction of the tiniest double has ~1100 digits
        raise ValueError(f"not a number: {text[:60]!r}")
    if _INTEGRAL.fullmatch(t):
        return Fraction(t)
    if not _DECIMAL.fullmatch(t):
        raise ValueError(f"not a number: {text[:60]!r}")
    f = float(t)
    if not math.isfinite(f):
        raise ValueError(f"{text[:60]!r} is beyond the float range")
    return Fraction(f)


def coerce_attr(op: OpDef, spec: AttrSpec, value: Any, where: str) -> Any:
    """Check and normalise one attribute value; raises ShapeError with ``where`` in the message."""
    k = spec.kind
    if value is None and spec.optional:
        return None
    try:
        if k == "bool":
            if not isinstance(value, bool):
                raise TypeError
            return value
        if k == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError
            return value
        if k == "ints":
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                              for v in value):
                raise TypeError
            return tuple(value)
        if k == "scalar":
            return S.parse(value) if isinstance(value, str) else S.norm(value)
        if k == "scalars":
            if not isinstance(value, (list, tuple)):
                raise TypeError
            return tuple(S.parse(v) if isinstance(v, str) else S.norm(v) for v in value)
        if k == "str":
            if not isinstance(value, str):
                raise TypeError
            if spec.choices and value not in spec.choices:
                raise ShapeError(f"{where}: attribute {spec.name}={value!r} of {op.name} must be one of "
                                 f"{', '.join(spec.choices)}")
            return value
        if k == "number":
            if isinstance(value, str):
                return parse_number(value)
            if isinstance(value, bool):
                raise TypeError
            if isinstance(value, int):
                return Fraction(value)
            if isinstance(value, float):
                # exact: the float's binary value (3e-10 and -3e-10, f32(1e-5) and 1e-05 all differ); non-finite
                # constants (-inf attention masks) stay floats
                return Fraction(value) if math.isfinite(value) else value
            if isinstance(value, Fraction):
                return value
            raise TypeError
    except (TypeError, ValueError, ZeroDivisionError):
        raise ShapeError(f"{where}: attribute {spec.name}={value!r} of {op.name} must be of kind {k}") from None
    raise AssertionError(k)


def _norm_dim(v, rank: int):
    """A dim of a rank-``rank`` tensor in [0, rank) when it was given counting from the end; a rank-0 tensor
    takes dim 0 or -1 (as torch does). Out-of-range dims are left for the shape function to reject."""
    r = max(rank, 1)
    if isinstance(v, int) and not isinstance(v, bool) and -r <= v < 0:
        return v + r
    return v


def normalize_dims(op: OpDef, attrs: dict, in_ranks: Sequence[int]) -> dict:
    """``attrs`` with every dim attribute (``AttrSpec.dim_of``) non-negative, against the rank of the input it
    refers to. Generic over ops: graphs, relation terms and lemma sides all go through it."""
    out = None
    for spec in op.attrs:
        if spec.dim_of is None or spec.dim_of >= len(in_ranks):
            continue
        v = attrs.get(spec.name)
        r = in_ranks[spec.dim_of]
        n = tuple(_norm_dim(x, r) for x in v) if isinstance(v, tuple) else _norm_dim(v, r)
        if n != v:
            out = dict(attrs) if out is None else out
            out[spec.name] = n
    return attrs if out is None else out


def normalize_attrs(op: OpDef, attrs: dict, where: str) -> tuple[tuple[str, Any], ...]:
    """Attributes in declared order with defaults filled in; unknown or missing ones are errors."""
    unknown = set(attrs) - {a.name for a in op.attrs}
    if unknown:
        raise ShapeError(f"{where}: unknown attribute(s) {', '.join(sorted(unknown))} for {op.name}")
    out = []
    for spec in op.attrs:
        if spec.name in attrs:
            out.append((spec.name, coerce_attr(op, spec, attrs[spec.name], where)))
        elif spec.required:
            raise ShapeError(f"{where}: {op.name} needs attribute {spec.name}")
        else:
            out.append((spec.name, coerce_attr(op, spec, spec.default, where)))
    return tuple(out)


class Registry:
    """All known operators, by qualified name; a bare name means ``core.<name>``."""

    def __init__(self):
        self.ops: dict[str, OpDef] = {}
        self.collective_ops: dict[str, dict] = {}  # custom ops that are collectives (hook graphguard_collective_ops)
        self.functions: dict[str, object] = {}  # lemma functions of plugins (hook graphguard_lemma_functions)

    def add(self, op: OpDef) -> None:
        if op.name in self.ops and self.ops[op.name] is not op:
            raise ValueError(f"operator {op.name} is defined twice ({self.ops[op.name].source} and {op.source})")
        self.ops[op.name] = op

    def resolve(self, name: str) -> str:
        return name if "." in name else "core." + name

    def get(self, name: str) -> OpDef | None:
        return self.ops.get(self.resolve(name))

    def __contains__(self, name: str) -> bool:
        return self.resolve(name) in self.ops

    def __iter__(self):
        return iter(self.ops.values())


# =================================================================================================
# Shape helpers shared by op definitions
# =================================================================================================

def fail(msg: str):
    raise ShapeError(msg)


def check_rank(name: str, shape: Shape, dim: int) -> None:
    if not 0 <= dim < len(shape):
        fail(f"{name}: dim {dim} out of range for a rank-{len(shape)} tensor")


def same_shapes(name: str, shapes: Sequence[Shape]) -> Shape:
    first = tuple(shapes[0])
    for s in shapes[1:]:
        if len(s) != len(first) or any(S.norm(a) != S.norm(b) for a, b in zip(s, first)):
            fail(f"{name}: operand shapes differ: {fmt_shape(first)} vs {fmt_shape(s)}")
    return first


def fmt_shape(s: Shape) -> str:
    return "[" + ", ".join(S.text(d) for d in s) + "]"


def numel(shape: Shape) -> S.Scalar:
    return S.norm(sp.Mul(*[S.sym(d) for d in shape])) if shape else 1


# =================================================================================================
# The clean dialect
# =================================================================================================

def _concat_shape(shapes, attrs, cx):
    d = attrs["dim"]
    for s in shapes:
        check_rank("concat", s, d)
    r = len(shapes[0])
    for s in shapes[1:]:
        if len(s) != r or any(S.norm(a) != S.norm(b) for i, (a, b) in enumerate(zip(s, shapes[0])) if i != d):
            fail(f"concat: shapes {fmt_shape(shapes[0])} and {fmt_shape(s)} differ outside dim {d}")
    out = list(shapes[0])
    out[d] = S.norm(sum(S.sym(s[d]) for s in shapes))
    return tuple(out)


def _slice_shape(shapes, attrs, cx):
    (x,) = shapes
    d, a, b = attrs["dim"], attrs["start"], attrs["end"]
    check_rank("slice", x, d)
    if not (cx.prove(">=", a, 0) and cx.prove("<=", a, b) and cx.prove("<=", b, x[d])):
        fail(f"slice: bounds [{S.text(a)}:{S.text(b)}] not within 0..{S.text(x[d])} on dim {d}")
    out = list(x)
    out[d] = S.norm(S.sym(b) - S.sym(a))
    return tuple(out)


def _slice_ref(xs, attrs):
    (x,) = xs
    idx = [slice(None)] * x.ndim
    idx[attrs["dim"]] = slice(attrs["start"], attrs["end"])
    return x[tuple(idx)]


def _permute_shape(shapes, attrs, cx):
    (x,) = shapes
    p = attrs["dims"]
    if sorted(p) != list(range(len(x))):
        fail(f"permute: dims {list(p)} is not a permutation of a rank-{len(x)} tensor")
    return tuple(x[i] for i in p)


def _reshape_shape(shapes, attrs, cx):
    (x,) = shapes
    new = attrs["shape"]
    if S.norm(numel(x)) != S.norm(numel(new)):
        fail(f"reshape: cannot reshape {fmt_shape(x)} to {fmt_shape(new)}")
    return tuple(new)


def _elementwise_shape(name):
    def f(shapes, attrs, cx):
        return same_shapes(name, shapes)
    return f


def _reduce_ref(fn):
    def f(xs, attrs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out
    return f


def _float_only(name):
    """The dtype rule of an op defined on floating-point tensors (a constant factor): its input's; bool and
    integer tensors are refused (they would round or wrap where the factor does not)."""
    def f(ds, a):
        if ds and (ds[0] in ("bool", "pred") or ds[0].startswith(("int", "uint"))):
            fail(f"{name}: needs a floating-point input, got {ds[0]}")
        return ds[0] if ds else "float32"
    return f


CLEAN_OPS = [
    OpDef("core.concat", None, _concat_shape, lambda xs, a: np.concatenate(xs, axis=a["dim"]),
          (AttrSpec("dim", "int", dim_of=0),), clean=True, doc="Concatenate along dim."),
    OpDef("core.slice", 1, _slice_shape, _slice_ref,
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("start", "scalar"), AttrSpec("end", "scalar")), clean=True,
          doc="x[start:end] along dim (step 1).", data_movement=True),
    OpDef("core.permute", 1, _permute_shape, lambda xs, a: np.transpose(xs[0], a["dims"]),
          (AttrSpec("dims", "ints", dim_of=0),), clean=True, doc="Permute dimensions (transpose).",
          data_movement=True),
    OpDef("core.reshape", 1, _reshape_shape, lambda xs, a: np.reshape(xs[0], [int(d) for d in a["shape"]]),
          (AttrSpec("shape", "scalars"),), clean=True, doc="Row-major reshape.", data_movement=True),
    OpDef("core.identity", 1, lambda s, a, cx: tuple(s[0]), lambda xs, a: xs[0], clean=True, doc="Identity."),
    OpDef("core.sum", None, _elementwise_shape("sum"), _reduce_ref(np.add), clean=True, dtype=_promoted,
          doc="Elementwise sum of same-shape tensors; clean when its operands come from disjoint ranks.",
          elementwise=(0, 1), commutative=True, associative=True),
    OpDef("core.max", None, _elementwise_shape("max"), _reduce_ref(np.maximum), clean=True, dtype=_promoted,
          doc="Elementwise max of same-shape tensors; clean when its operands come from disjoint ranks.",
          elementwise=(0, 1), commutative=True, associative=True),
]


# =================================================================================================
# Ops defined by clean expressions: split and the collectives
# =================================================================================================

def _split_meaning(ins, attrs):
    (x,) = ins
    out, start = [], 0
    for sz in attrs["sizes"]:
        end = S.norm(S.sym(start) + S.sym(sz))
        out.append(app("core.slice", x, dim=attrs["dim"], start=start, end=end))
        start = end
    return out


def _reduce(op: str, ins):
    if op == "sum":
        return app("core.sum", *ins) if len(ins) > 1 else ins[0]
    if op == "max":
        return app("core.max", *ins) if len(ins) > 1 else ins[0]
    if op == "avg":
        total = app("core.sum", *ins) if len(ins) > 1 else ins[0]
        return app("core.scale", total, factor=Fraction(1, len(ins)))
    raise ShapeError(f"unknown reduction {op!r}")


def _all_reduce_meaning(ins, attrs):
    t = _reduce(attrs["op"], ins)
    return [t for _ in ins]


def _all_gather_meaning(ins, attrs):
    t = app("core.concat", *ins, dim=attrs["dim"]) if len(ins) > 1 else ins[0]
    return [t for _ in ins]


def _reduce_scatter_meaning(ins, attrs, shapes=None):
    w = len(ins)
    t = _reduce(attrs["op"], ins)
    if shapes is None:
        return [t for _ in ins]
    check_rank("reduce_scatter", shapes[0], attrs["dim"])
    n = shapes[0][attrs["dim"]]
    chunk = S.exact_div(n, w)
    return [app("core.slice", t, dim=attrs["dim"], start=S.norm(S.sym(chunk) * r),
                end=S.norm(S.sym(chunk) * (r + 1))) for r in range(w)]


def _all_to_all_meaning(ins, attrs, shapes=None):
    w = len(ins)
    if shapes is None:
        return list(ins)
    sd, cd = attrs["split_dim"], attrs["concat_dim"]
    check_rank("all_to_all", shapes[0], sd)
    check_rank("all_to_all", shapes[0], cd)
    chunk = S.exact_div(shapes[0][sd], w)
    outs = []
    for r in range(w):
        parts = [app("core.slice", x, dim=sd, start=S.norm(S.sym(chunk) * r),
                     end=S.norm(S.sym(chunk) * (r + 1))) for x in ins]
        outs.append(app("core.concat", *parts, dim=cd) if w > 1 else parts[0])
    return outs


def _broadcast_meaning(ins, attrs):
    group = attrs["group"]
    if attrs["src"] not in group:
        raise ShapeError(f"broadcast: src rank {attrs['src']} is not in group {list(group)}")
    src = ins[group.index(attrs["src"])]
    return [src for _ in ins]


GROUP = AttrSpec("group", "ints")

# Not clean: ``avg`` reductions need it, so it lives beside the collectives.
SCALE = OpDef("core.scale", 1, lambda s, a, cx: tuple(s[0]),
              lambda xs, a: xs[0] * (a["factor"].numerator / a["factor"].denominator),
              (AttrSpec("factor", "number"),), doc="x * factor (a rational constant).", dtype=_float_only("core.scale"),
              elementwise=(0,), linear=(0,), scalar_factor="factor")

COLLECTIVES = [
    OpDef("core.all_reduce", None, attrs=(AttrSpec("op", "str", "sum", ("sum", "max", "avg")), GROUP),
          meaning=_all_reduce_meaning, collective=True,
          doc="out@r = sum/max/avg over the group of in@g (inputs and outputs in group order)."),
    OpDef("core.all_gather", None, attrs=(AttrSpec("dim", "int", 0, dim_of=0), GROUP), meaning=_all_gather_meaning,
          collective=True, doc="out@r = concat(in@g for g in group, dim)."),
    OpDef("core.reduce_scatter", None,
          attrs=(AttrSpec("op", "str", "sum", ("sum", "max", "avg")), AttrSpec("dim", "int", 0, dim_of=0), GROUP),
          meaning=_reduce_scatter_meaning, collective=True,
          doc="out@r = slice r of reduce(in@g for g in group) along dim."),
    OpDef("core.all_to_all", None,
          attrs=(AttrSpec("split_dim", "int", 0, dim_of=0), AttrSpec("concat_dim", "int", 0, dim_of=0), GROUP),
          meaning=_all_to_all_meaning, collective=True,
          doc="out@r = concat(slice r of in@g along split_dim, for g in group) along concat_dim."),
    OpDef("core.broadcast", None, attrs=(AttrSpec("src", "int"), GROUP), meaning=_broadcast_meaning,
          collective=True, doc="out@r = in@src."),
    OpDef("core.sendrecv", 1, attrs=(AttrSpec("src", "int"), AttrSpec("dst", "int")),
          meaning=lambda ins, attrs: [ins[0]], collective=True,
          doc="Point-to-point: the output, on rank dst, equals the input on rank src."),
    OpDef("core.split", 1, attrs=(AttrSpec("dim", "int", dim_of=0), AttrSpec("sizes", "scalars")),
          meaning=_split_meaning, doc="Split into consecutive slices along dim."),
]

SHAPE_DEPENDENT_MEANING = {"core.reduce_scatter", "core.all_to_all"}


def expand(op: OpDef, ins: list[Term], attrs: dict, shapes: list[Shape] | None) -> list[Term]:
    """The output terms of an op defined by ``meaning`` (collectives, split)."""
    if op.name in SHAPE_DEPENDENT_MEANING:
        return op.meaning(ins, attrs, shapes)
    return op.meaning(ins, attrs)


def multi_output(name: str, arity: int | None, shapes: Callable, ref: Callable, attrs: tuple = (),
                 n: int | None = None, doc: str = "", names: Sequence[str] = (),
                 dtypes: Callable | None = None, **props) -> list[OpDef]:
    """An op with several outputs: ``name`` (used in graphs) is defined by one term op per output,
    ``name#0``, ``name#1``, ... ``shapes(in_shapes, attrs, cx)`` returns every output shape and
    ``ref(arrays, attrs)`` every output array; each ``name#k`` picks its own. ``dtypes(in_dtypes, attrs)``
    (optional) returns every output dtype. ``props``: algebraic properties of every output op (OpDef fields)."""
    count = n or len(names)
    outs = [OpDef(f"{name}#{k}", arity,
                  (lambda k: lambda s, a, cx: tuple(shapes(s, a, cx)[k]))(k),
                  (lambda k: lambda xs, a: ref(xs, a)[k])(k), attrs,
                  doc=f"output {k}{' (' + names[k] + ')' if names else ''} of {name}",
                  dtype=(lambda k: (lambda d, a: dtypes(d, a)[k]) if dtypes else None)(k), **props)
            for k in range(count)]

    def meaning(ins, a):
        return [App(f"{name}#{k}", tuple(ins), tuple((spec.name, a[spec.name]) for spec in attrs))
                for k in range(count)]
    return [OpDef(name, arity, attrs=attrs, meaning=meaning, doc=doc)] + outs


def builtin_ops() -> list[OpDef]:
    ops = CLEAN_OPS + COLLECTIVES + [SCALE]
    for o in ops:
        o.source = "graphguard.ir"
    return ops
