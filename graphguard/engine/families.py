"""Lemma families derived from operator properties.

An operator declares what it is -- elementwise, linear in some inputs, a reduction, row-wise, data movement,
commutative (:class:`graphguard.ir.ops.OpDef`) -- and each family below, written once, states the standard
lemma for every operator with that property, as tinygrad's rules over an op group serve every member. A pack's
new operator joins a family by declaring the property. The derived lemmas are ordinary :class:`Lemma` s: their
reference is the family's (12xx) in the pack of the op (``aten:1201``; no pack's own lemma may take a family's
number), their name ``family[op]``, their text the family's pattern spelt out for the op; they compile through
:func:`build_rules` and ``graphguard lemmas check`` fuzzes every one of them.

Variables: ``?a<i>`` / ``?b<i>`` the two parts of input i, ``?x<i>`` an input used whole, ``?d<i>`` a concat
dim, ``?p_<name>`` the op's attribute ``name``.
"""
from __future__ import annotations

import re
import sys
from itertools import combinations
from typing import Callable, Iterator

from ..ir.expr import VARIADIC
from ..ir.lemma import Lemma
from ..ir.ops import OpDef, Registry
from .lemma import LemmaError

FAMILIES: list[tuple[int, str, Callable, str, bool]] = []  # (ref, name, derive(op, reg), file:line, late)


def family(ref: int, name: str, late: bool = False):
    """Register a family: ``fn(op, reg)`` yields ``(rule, cond, when, examples)`` for each lemma of ``op``.
    ``late``: its lemmas run only in the search after the label provers' equalities
    (engine/labels; :func:`graphguard.ir.lemma.L`)."""
    f = sys._getframe(1)
    where = f"{f.f_code.co_filename}:{f.f_lineno + 1}"

    def deco(fn):
        FAMILIES.append((ref, name, fn, where, late))
        return fn
    return deco


# -- spelling patterns ------------------------------------------------------------------------------

def _n_inputs(op: OpDef) -> int:
    """Tensor inputs of the op inside a pattern (variadic ones are binary there; ops with optional inputs have
    none fixed: 0, no family states them but the row-wise one, which is told how many)."""
    return 2 if op.name in VARIADIC else op.arity or 0


def _attr(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def call(op: OpDef, args, fixed: dict | None = None, prefix: str = "?p_") -> str:
    """``op(args..., attr=?p_attr...)``, attributes in ``fixed`` as those constants (``prefix``: another name for
    the attribute variables, for a second op of one pattern)."""
    fixed = fixed or {}
    attrs = [f"{s.name}={_attr(fixed[s.name]) if s.name in fixed else prefix + s.name}" for s in op.attrs]
    return f"{op.name}({', '.join(list(args) + attrs)})"


def _fixed(prop) -> dict:
    return prop if isinstance(prop, dict) else {}


def _cat(i: int, d: str) -> str:
    return f"concat(?a{i}, ?b{i}, dim={d})"


def _need_attr(op: OpDef, name: str | None, what: str) -> None:
    if name is not None and op.attr_spec(name) is None:
        raise LemmaError(f"operator {op.name} ({op.source}): its {what} names attribute '{name}', which it lacks")


# -- the families -------------------------------------------------------------------------------------

def _elementwise(op: OpDef, whole_concat: bool) -> Iterator[tuple]:
    """op of concats along the same output dim (parts of equal sizes), the other elementwise inputs constant
    along it (broadcast there): the concat of op of the parts."""
    ew = tuple(op.elementwise)
    n = _n_inputs(op)
    if not n:
        return
    subsets = [ew] if whole_concat else [s for k in range(1, len(ew)) for s in combinations(ew, k)]
    if not op.broadcasting and not whole_concat:
        return  # equal shapes: an operand constant along a cut dim is not one that a concat of the same shape meets
    for cut in subsets:
        p = cut[0]
        if op.broadcasting:
            rank = f"brank({', '.join(f'?a{i}' if i in cut else f'?x{i}' for i in ew)})"
            dim = f"?d{p} + {rank} - rank(?a{p})"
            dims = {i: f"?d{i}" for i in cut}
        else:
            rank, dim, dims = None, "?d", {i: "?d" for i in cut}
        conds = []
        for i in cut[1:]:
            if op.broadcasting:
                conds.append(f"?d{i} + {rank} - rank(?a{i}) == {dim}")
            conds += [f"size(?a{i}, {dims[i]}) == size(?a{p}, {dims[p]})",
                      f"size(?b{i}, {dims[i]}) == size(?b{p}, {dims[p]})"]
        conds += [f"const_along(?x{i}, {rank}, {dim})" for i in ew if i not in cut]
        lhs = call(op, [_cat(i, dims[i]) if i in cut else f"?x{i}" for i in range(n)])
        parts = [call(op, [f"?{h}{i}" if i in cut else f"?x{i}" for i in range(n)]) for h in "ab"]
        whole = {f"x{i}": [] for i in range(n) if i not in ew}  # seeds: inputs used whole as 0-dim values
        ex = [{**{f"a{i}": [2, 3] for i in cut}, **{f"b{i}": [1, 3] for i in cut}, **whole,
               **{f"x{i}": [1, 3] for i in ew if i not in cut}, **{k[1:]: 0 for k in set(dims.values())}},
              {**{f"a{i}": [2, 3] for i in cut}, **{f"b{i}": [2, 1] for i in cut}, **whole,
               **{f"x{i}": [2, 1] for i in ew if i not in cut}, **{k[1:]: 1 for k in set(dims.values())}}]
        yield f"{lhs} => concat({parts[0]}, {parts[1]}, dim={dim})", " and ".join(conds), "", ex


@family(1201, "elementwise-of-concats")
def elementwise_of_concats(op, reg):  # f(concat(a0, b0), concat(a1, b1)) -> concat(f(a0, a1), f(b0, b1))
    if op.elementwise:
        yield from _elementwise(op, True)


def _fill_of(dialect: str, reg) -> str | None:
    """The constant fill an op of ``dialect`` meets in its own graphs, as a pattern over ``{s}`` (its shape),
    ``?v`` (its value) and ``?t`` (its dtype): the dialect's op without inputs that declares ``fill`` (its value
    attribute) and has one shape attribute (``aten.full``, ``onnx.ConstantFill``; not ``aten.scalar_tensor``).
    None where the dialect has none, or more than one."""
    found = []
    for op in reg:
        if op.fill and op.arity == 0 and op.name.split(".")[0] == dialect:
            shape = [a.name for a in op.attrs if a.kind == "scalars"]
            if len(shape) == 1:
                dtype = "".join(f", {a.name}=?t" for a in op.attrs if a.name == "dtype")
                found.append(f"{op.name}({shape[0]}={{s}}, {op.fill}=?v{dtype})")
    return found[0] if len(found) == 1 else None


@family(1219, "elementwise-of-concat-and-fill")
def elementwise_of_concat_and_fill(op, reg):  # f(concat(a, b, d), full(s)) -> concat(f(a, full(s_a)), f(b, full(s_b)))
    """A broadcasting op of a concatenation and a constant fill as long as it along the cut (the zeros a
    backward writes a sharded gradient beside: ``where(arange == e, grad, zeros)``): the fill cut in the same
    places. Only where that operand is a fill in the pattern itself, so no other tensor is cut."""
    ew = tuple(op.elementwise)
    n = _n_inputs(op)
    full = _fill_of(op.name.split(".")[0], reg) if op.broadcasting and len(ew) >= 2 and n else None
    if full is None:
        return
    for p in ew:
        for j in ew:
            if j == p:
                continue
            rank = f"brank({', '.join(f'?a{p}' if i == p else f'?x{i}' for i in ew if i != j)})"  # (fill: no wider)
            dim = f"?d + {rank} - rank(?a{p})"  # the cut dim in the output
            dj = f"?d - rank(?a{p}) + len(?s)"  # ... in the fill's shape
            conds = [f"len(?s) <= {rank}", f"{dj} >= 0", f"at(?s, {dj}) == size(?a{p}, ?d) + size(?b{p}, ?d)"]
            conds += [f"const_along(?x{i}, {rank}, {dim})" for i in ew if i not in (p, j)]
            lhs = call(op, [_cat(p, "?d") if i == p else full.format(s="?s") if i == j else f"?x{i}"
                            for i in range(n)])
            parts = [call(op, [f"?{h}{p}" if i == p else full.format(s=f"set_at(?s, {dj}, size(?{h}{p}, ?d))")
                               if i == j else f"?x{i}" for i in range(n)]) for h in "ab"]
            whole = {f"x{i}": [] for i in range(n) if i not in ew}
            others = {f"x{i}": [1, 1] for i in ew if i not in (p, j)}
            ex = [{f"a{p}": [2, 3], f"b{p}": [1, 3], "s": [3, 3], "d": 0, "v": 0, "t": "float32", **whole, **others},
                  {f"a{p}": [2, 3], f"b{p}": [2, 1], "s": [2, 4], "d": 1, "v": 1, "t": "float32", **whole, **others},
                  {f"a{p}": [2, 2, 3], f"b{p}": [2, 1, 3], "s": [3, 1], "d": 1, "v": 0, "t": "float64", **whole,
                   **others}]
            if "?t" not in full:  # (a fill without a dtype attribute)
                ex = [{k: v for k, v in e.items() if k != "t"} for e in ex]
            yield f"{lhs} => concat({parts[0]}, {parts[1]}, dim={dim})", " and ".join(conds), "", ex


@family(1202, "elementwise-of-concat-and-broadcast")
def elementwise_of_concat_and_broadcast(op, reg):  # f(concat(a0, b0), x1) -> concat(f(a0, x1), f(b0, x1)), x1 const along
    if op.elementwise:
        yield from _elementwise(op, False)


def _over_reals(op: OpDef, x: str, fixed: dict | None = None) -> str:
    """Linearity is a statement about real numbers: it holds for floating-point inputs and results (a cast to an
    integer ``dtype`` truncates, integers divide by zero, bools add as "or") and finite number attributes
    (``inf * (a + b)`` is NaN where ``inf * a + inf * b`` is not)."""
    conds = [f"floating(dtype({x}))"]
    for s in op.attrs:
        if s.name in (fixed or {}):
            continue
        if s.kind == "str" and s.name.endswith("dtype"):  # the result's dtype (as the fuzzer reads such names)
            conds.append(f"(?p_{s.name} == None or floating(?p_{s.name}))")
        elif s.kind == "number":
            conds.append(f"(?p_{s.name} == None or finite(?p_{s.name}))")
            if s.name == op.divisor:
                conds.append(f"?p_{s.name} != 0")
    return " and ".join(conds)


@family(1203, "linear-over-sum")
def linear_over_sum(op, reg):  # f(sum(a, b), x) -> sum(f(a, x), f(b, x))
    """One group of inputs, jointly: a partial sum (one summand per rank) goes through. Where the op is linear
    in several groups (products) or in several inputs jointly, only where the op of the second summands
    exists (constrained, §4.3): distributing products over every grouping of 8-way partial sums explodes."""
    groups = op.linear_groups()
    n = _n_inputs(op)
    fx = op.linear_when or {}
    for g in groups if n else ():
        cond = _over_reals(op, f"?a{g[0]}", fx)
        lhs = call(op, [f"sum(?a{i}, ?b{i})" if i in g else f"?x{i}" for i in range(n)], fx)
        a, b = (call(op, [f"?{h}{i}" if i in g else f"?x{i}" for i in range(n)], fx) for h in "ab")
        when = b if len(groups) > 1 or len(g) > 1 else ""
        names = [f"{h}{i}" for i in range(n) for h in ("ab" if i in g else "x")]
        ex = [{v: list(shape) for v in names} for shape in ((3, 3), (2, 3, 3), (4,))]  # (products: square operands)
        yield f"{lhs} => sum({a}, {b})", cond, when, ex


@family(1204, "scalar-factor-out")
def scalar_factor_out(op, reg):  # f(c * a, x) -> c * f(a, x)
    """A constant factor (``scale``, or any op declaring ``scalar_factor``) of a linear input -- or of every input
    of a joint group -- moves out. Through data movement (of input 0) exactly, whatever the factor and dtype: the
    same entries are multiplied."""
    n = _n_inputs(op)
    if op.scalar_factor or (op.scaling and n == 1) or not n:
        return  # factors combine by their own lemmas (a factor pushed into x * c makes x * c a new class: where
        # G_d holds y and 2 y, y = (2 y) / 2 would grow 4 y, 8 y, ... without end)
    groups = op.linear_groups()
    if op.data_movement and (0,) not in groups:
        groups += ((0,),)
    for f in sorted((f for f in reg if f.scalar_factor), key=lambda f: f.name):
        for g in groups:
            fac = {f.scalar_factor: "?f"}
            fx = {} if op.data_movement and g == (0,) else op.linear_when or {}
            lhs = call(op, [call(f, [f"?a{i}"], fac) if i in g else f"?x{i}" for i in range(n)], fx)
            rhs = call(f, [call(op, [f"?a{i}" if i in g else f"?x{i}" for i in range(n)], fx)], fac)
            cond = ("" if op.data_movement and g == (0,) else
                    f"finite(?f) and {_over_reals(op, f'?a{g[0]}', fx)}")
            yield f"{lhs} => {rhs}", cond, "", ()


def _reduction(op: OpDef):
    r = op.reduction
    _need_attr(op, r.dims, "reduction")
    _need_attr(op, r.keepdim, "reduction")
    k = f"?p_{r.dims}" if r.dims else None
    kd = f"?p_{r.keepdim}" if r.keepdim else "0"
    return r, k, kd


@family(1205, "reduction-of-concat-other-dims")
def reduction_other_dims(op, reg):  # r(concat(a, b, d), dims not d) -> concat(r(a), r(b))
    if op.reduction is None or op.reduction.dims is None:
        return
    r, k, kd = _reduction(op)
    lhs = call(op, [_cat(0, "?d")])
    yield (f"{lhs} => concat({call(op, ['?a0'])}, {call(op, ['?b0'])}, dim=reduced_dim(?d, {k}, {kd}))",
           f"not reduces({k}, ?d)", "", ())


@family(1206, "reduction-of-concat-along-it")
def reduction_along_it(op, reg):  # r(concat(a, b, d), dims with d) -> combine(r(a), r(b))
    if op.reduction is None or op.reduction.combine is None:
        return
    r, k, kd = _reduction(op)
    comb = reg.get(r.combine)
    if comb is None:
        raise LemmaError(f"operator {op.name} ({op.source}): its reduction combines with unknown operator "
                         f"'{r.combine}'")
    conds = [f"reduces({k}, ?d)"] if k else []
    if comb.name != "core.sum":  # no identity: a part without entries has no reduction
        conds.append("size(?a0, ?d) > 0 and size(?b0, ?d) > 0")
    yield (f"{call(op, [_cat(0, '?d')])} => {call(comb, [call(op, ['?a0']), call(op, ['?b0'])])}",
           " and ".join(conds), "", ())


def _rowwise(op: OpDef):
    """A row-wise op's pieces: the attribute's kind, the first row input, the condition that ``?d`` is not a
    row dim, and the input counts to state it for."""
    rw = op.rowwise
    _need_attr(op, rw.dims, "rowwise")
    kind = op.attr_spec(rw.dims).kind
    p = rw.args[0]
    k = f"?p_{rw.dims}"
    untouched = {"int": f"{k} != ?d", "ints": f"not reduces({k}, ?d)",
                 "scalars": f"?d < rank(?a{p}) - len({k})"}.get(kind)
    if untouched is None:
        raise LemmaError(f"operator {op.name} ({op.source}): rowwise attribute '{rw.dims}' must be an int, ints or "
                         f"a shape")
    counts = [_n_inputs(op)] if op.arity is not None or op.name in VARIADIC else range(len(rw.args), rw.inputs + 1)
    return kind, p, untouched, counts


@family(1207, "rowwise-of-concats")
def rowwise_of_concats(op, reg):  # f(concat(a, b, d)) -> concat(f(a), f(b)), d not in the rows
    rw = op.rowwise
    if rw is None:
        return
    kind, p, untouched, counts = _rowwise(op)
    for n in counts:
        conds = [untouched] + [f"size(?{h}{i}, ?d) == size(?{h}{p}, ?d)" for i in rw.args[1:] for h in "ab"]
        lhs = call(op, [_cat(i, "?d") if i in rw.args else f"?x{i}" for i in range(n)])
        a, b = (call(op, [f"?{h}{i}" if i in rw.args else f"?x{i}" for i in range(n)]) for h in "ab")
        ex = ()
        if kind == "scalars":  # rows of shape n; the inputs used whole (weights) shaped like a row
            ex = [{**{f"a{i}": a_ for i in rw.args}, **{f"b{i}": b_ for i in rw.args},
                   **{f"x{i}": list(row) for i in range(n) if i not in rw.args}, "d": d, "p_" + rw.dims: list(row)}
                  for a_, b_, row, d in (([2, 3, 4], [1, 3, 4], [4], 0), ([2, 3, 4], [2, 2, 4], [4], 1),
                                         ([3, 4], [1, 4], [4], 0), ([1, 2, 3], [2, 2, 3], [2, 3], 0))]
        yield f"{lhs} => concat({a}, {b}, dim=?d)", " and ".join(conds), "", ex


def _sl(x: str) -> str:
    return f"slice({x}, dim=?d, start=?s, end=?e)"


@family(1211, "elementwise-of-slices", late=True)
def elementwise_of_slices(op, reg):  # f(slice(a0), slice(a1)) -> slice(f(a0, a1)), where f(a0, a1) exists
    """The same slice of every elementwise input (of one shape: no broadcasting across the cut) is the slice of
    the op's result; only where the op of the whole inputs exists (rows of several ranks interleaved: each
    rank's own op is the whole). Late (as 1212): run in every search, they cost verified runs about 10 % more
    time, and the slices they serve are the ones the label provers' equalities bring."""
    ew = tuple(op.elementwise or ())
    n = _n_inputs(op)
    if not ew or not n:
        return
    conds = [f"shape(?a{i}) == shape(?a{ew[0]})" for i in ew[1:]]
    lhs = call(op, [_sl(f"?a{i}") if i in ew else f"?x{i}" for i in range(n)])
    whole = call(op, [f"?a{i}" if i in ew else f"?x{i}" for i in range(n)])
    ex = [{**{f"a{i}": [4, 3] for i in ew}, **{f"x{i}": [] for i in range(n) if i not in ew}, "d": 0, "s": 1, "e": 3},
          {**{f"a{i}": [2, 5] for i in ew}, **{f"x{i}": [] for i in range(n) if i not in ew}, "d": 1, "s": 0, "e": 2}]
    yield f"{lhs} => {_sl(whole)}", " and ".join(conds), whole, ex


@family(1213, "elementwise-of-reshapes", late=True)
def elementwise_of_reshapes(op, reg):  # f(reshape(a0, s), reshape(a1, s), c) -> reshape(f(a0, a1, c), s), where f(a0, a1, c) exists
    """The same reshape of every elementwise input of one shape (the others 0-dim, broadcast to any shape) is the
    reshape of the op's result: an elementwise op is applied entry by entry, and a reshape keeps the row-major
    order of the entries. Only where the op of the unreshaped inputs exists (a rank's own op, beside a
    specification that flattened or unsqueezed its inputs first). Late: run in every search, it cost the
    suite's Megatron and torchtitan runs about 30 % more time."""
    yield from _through_movement(op, "reshape", "shape=?s", "s",
                                 (([2, 3], [6]), ([4], [2, 1, 2]), ([3, 1], [1, 3]), ([0, 2], [2, 0])))


@family(1217, "elementwise-of-permutes")
def elementwise_of_permutes(op, reg):  # f(permute(a0, p), permute(a1, p), c) -> permute(f(a0, a1, c), p), where f(a0, a1, c) exists
    """The same permutation of every elementwise input of one shape (the others 0-dim) is the permutation of the
    op's result: an elementwise op is applied entry by entry, a permutation only moves entries. Only where the op
    of the unpermuted inputs exists (a rank's own op, beside a specification that keeps another layout: HF's
    [batch, seq, hidden] cast to float32 against NeuronX's convert of [hidden, seq, batch])."""
    yield from _through_movement(op, "permute", "dims=?q", "q",
                                 (([2, 3], [1, 0]), ([2, 3, 4], [2, 1, 0]), ([2, 3, 4, 5], [1, 2, 0, 3])))


def _through_movement(op, move: str, attr: str, var: str, examples):
    """Families 1213 / 1217: ``f(move(a0), move(a1), c) => move(f(a0, a1, c))`` for the same data movement of
    every elementwise input of one shape (the others 0-dim), where ``f(a0, a1, c)`` exists."""
    ew = tuple(op.elementwise or ())
    n = _n_inputs(op)
    if not ew or not n:
        return
    cuts = [c for k in range(1, len(ew) + 1) for c in combinations(ew, k)] if op.broadcasting else [ew]
    for cut in cuts:
        conds = [f"shape(?a{i}) == shape(?a{cut[0]})" for i in cut[1:]]
        conds += [f"shape(?x{i}) == []" for i in ew if i not in cut]
        lhs = call(op, [f"{move}(?a{i}, {attr})" if i in cut else f"?x{i}" for i in range(n)])
        whole = call(op, [f"?a{i}" if i in cut else f"?x{i}" for i in range(n)])
        zeros = {f"x{i}": [] for i in range(n) if i not in cut}
        ex = [{**{f"a{i}": a_ for i in cut}, **zeros, var: m_} for a_, m_ in examples]
        yield f"{lhs} => {move}({whole}, {attr})", " and ".join(conds), whole, ex


@family(1218, "fused-expression")
def fused_expression(op, reg):  # the expression an op fuses (OpDef.fuses) -> op(x0, x1, ...)
    """The expression an op declares it computes (``fuses``: HF's RMSNorm spelt out in ATen ops) is that op.
    passes.fusion.fuse_expressions collapses the expression in the graphs with this lemma's two sides before
    proving; as a lemma it is what ``lemmas check`` fuzzes (the declaration's soundness)."""
    n = _n_inputs(op)
    for expr, cond, examples, index, fixed in op.spellings():
        # a spelling in a dialect whose pack is not loaded (-p no:aten) is no lemma
        if all(name in reg for name in re.findall(r"([A-Za-z_][\w]*\.[\w.]+)\(", expr)):
            yield (f"{expr} => {call(op, [f'?x{i}' for i in range(n)], fixed)}", cond, "",
                   op_examples(op) if examples is None else list(examples), index)


@family(1228, "unfolded-definition")
def unfolded_definition(op, reg):  # op(x0, x1, ...) -> the expression it is (OpDef.unfolds)
    """An op declaring the expression it is (``unfolds``: a variance as the mean of the squared deviations from
    the mean) is that expression, so the lemmas over its ops apply to it (a variance of a concatenation along its
    dim is the parts' sums of squared deviations from the whole's mean, all-reduced)."""
    for expr, cond, examples, index, fixed in op.unfoldings():
        # (an op with optional inputs: as many as the expression reads, the others absent under ``fixed``)
        n = _n_inputs(op) or 1 + max(int(i) for i in re.findall(r"\?x(\d+)", expr))
        if all(name in reg for name in re.findall(r"([A-Za-z_][\w]*\.[\w.]+)\(", expr)):
            yield (f"{call(op, [f'?x{i}' for i in range(n)], fixed)} => {expr}", cond, "",
                   op_examples(op) if examples is None else list(examples), index)


def combined_by(op: OpDef, reg) -> str | None:
    """The op that combines ``op``'s reductions of two parts (``Reduction.combine``, resolved), None where there
    is none (not a reduction, a mean)."""
    r = op.reduction
    comb = reg.get(r.combine) if r is not None and r.combine is not None else None
    return comb.name if comb is not None else None


@family(1229, "reduction-of-a-reduction")
def reduction_of_a_reduction(op, reg):  # r(r'(x, some dims)) -> r(x), r over every dim, r and r' of one combine
    """A reduction whose parts combine (sum, max, min: associative and commutative), taken over every dim, of a
    reduction of the same kind over some dims is the first over every dim of x: ``x.sum(1).sum()`` is
    ``x.sum()``, ``x.amax(0).amax()`` is ``x.amax()``. Of one dialect, the inner one's result dtype its input's."""
    r, comb = op.reduction, combined_by(op, reg)
    if comb is None:
        return
    _need_attr(op, r.dims, "reduction")
    conds = []
    if r.dims is not None:  # (an op of a dims attribute reduces every dim where it is absent or empty)
        if op.attr_spec(r.dims).kind != "ints":
            return
        d = f"?p_{r.dims}"
        conds.append(f"({d} == None or len({d}) == 0)")
    fixed = {r.keepdim: False} if r.keepdim else {}
    dialect = op.name.split(".")[0]
    for inner in reg:
        ri = inner.reduction
        if (inner.name.split(".")[0] != dialect or ri is None or ri.dims is None
                or combined_by(inner, reg) != comb):
            continue
        kind = inner.attr_spec(ri.dims).kind
        ifixed = {s.name: None for s in inner.attrs if s.kind == "str" and s.name.endswith("dtype")}
        lhs = call(op, [call(inner, ["?x0"], ifixed, "?q_")], fixed)
        cond = conds + [_over_reals(op, "?x0", fixed)] + ([] if comb == "core.sum" else ["numel(?x0) > 0"])
        dims = ([[1], [0, 2], [0]] if kind == "ints" else [1, 2, 0])
        ex = [{"x0": x, "q_" + ri.dims: dd, **({"q_" + ri.keepdim: k} if ri.keepdim else {})}
              for x, dd, k in (([2, 3], dims[0], False), ([2, 3, 4], dims[1], True), ([3, 1, 2], dims[2], False))]
        yield f"{lhs} => {call(op, ['?x0'], fixed)}", " and ".join(cond), "", ex


def op_examples(op) -> list:
    """Fuzzer seeds an op may attach to its declarations (``OpDef.doc`` cannot: ``fuses_examples`` on the op's
    ``ref`` function, where a pack puts them)."""
    return list(getattr(op.ref, "fuses_examples", ()))


@family(1214, "reduction-over-the-last-dim-of-a-layout", late=True)
def reduction_of_layout(op, reg):  # r(reshape(x, s), last) -> reshape(r(x, last), s'), r(permute(x, p), last) -> ...
    """A reduction over the last dim only, of a reshape that keeps that dim (its size is x's last) or of a permute
    that keeps it last, is the reshape / permute of x's reduction over its last dim: the other dims only move
    whole rows (Megatron's expert-tensor-parallel probabilities' gradient: rows the ranks' layout interleaves,
    summed over the hidden dim). Late, as the layouts it serves come from the label provers (engine/labels)."""
    r = op.reduction
    if r is None or r.dims is None or r.keepdim is None or op.attr_spec(r.dims).kind != "ints" or _n_inputs(op) != 1:
        return
    k = f"?p_{r.dims}"
    for keep in (True, False):
        fx = {r.keepdim: keep}
        when = call(op, ["?x0"], {**fx, r.dims: "[rank(?x0) - 1]"})
        lhs = call(op, ["reshape(?x0, shape=?s)"], fx)
        shape = "set_at(?s, len(?s) - 1, 1)" if keep else "drop_at(?s, len(?s) - 1)"
        conds = ["rank(?x0) >= 1", "len(?s) >= 1", f"{k} == [len(?s) - 1]",
                 "at(?s, len(?s) - 1) == size(?x0, rank(?x0) - 1)", "size(?x0, rank(?x0) - 1) > 0"]  # (else the rows
        # before it need not match: [1, 0] as [2, 0] has one row of no entries, then two)
        ex = [{"x0": [2, 3, 4], "s": [6, 4], "p_" + r.dims: [1]}, {"x0": [6, 2], "s": [2, 3, 2], "p_" + r.dims: [2]}]
        yield f"{lhs} => reshape({when}, shape={shape})", " and ".join(conds), "", ex
        lhs = call(op, ["permute(?x0, dims=?q)"], fx)
        dims = "?q" if keep else "drop_at(?q, len(?q) - 1)"
        conds = ["rank(?x0) >= 1", f"{k} == [len(?q) - 1]", "at(?q, len(?q) - 1) == len(?q) - 1"]
        ex = [{"x0": [2, 3, 4], "q": [1, 0, 2], "p_" + r.dims: [2]}, {"x0": [2, 2, 3, 2], "q": [2, 0, 1, 3], "p_" + r.dims: [3]}]
        yield f"{lhs} => permute({when}, dims={dims})", " and ".join(conds), "", ex


@family(1212, "rowwise-of-slices", late=True)
def rowwise_of_slices(op, reg):  # f(slice(a, d)) -> slice(f(a), d), d not in the rows, where f(a) exists
    """The same slice of rows of every row input is that slice of the op's result, where the op of the whole
    inputs exists. An op with an index input (``gather``) too: the index is sliced with the data, along a dim
    that is not the indexed one, and the whole op exists -- a program computed it, so every row of its index
    is in range (the rows a slice leaves out included)."""
    rw = op.rowwise
    if rw is None or not set(rw.index) <= set(rw.args):  # (an index used whole: its rows are not the data's)
        return
    kind, p, untouched, counts = _rowwise(op)
    if kind == "int":  # (a negative row dim too)
        untouched += f" and ?p_{rw.dims} != ?d - rank(?a{p})"
    for n in counts:
        conds = ["?d >= 0", untouched] + [f"size(?a{i}, ?d) == size(?a{p}, ?d)" for i in rw.args[1:]]
        lhs = call(op, [_sl(f"?a{i}") if i in rw.args else f"?x{i}" for i in range(n)])
        whole = call(op, [f"?a{i}" if i in rw.args else f"?x{i}" for i in range(n)])
        ex = ()
        # an index input holds positions along the row dims of the first row input (gather's dim)
        index = {f"a{i}": f"size(?a{p}, ?p_{rw.dims})" for i in rw.index} if kind == "int" else {}
        if rw.index and not index:
            continue  # (an index op whose index bound is not the row dim's size: not stated)
        if kind == "ints":
            ex = [{**{f"a{i}": [3, 4] for i in rw.args}, "d": 0, "s": 0, "e": 2, "p_" + rw.dims: [1]},
                  {**{f"a{i}": [2, 3, 2] for i in rw.args}, "d": 1, "s": 1, "e": 3, "p_" + rw.dims: [0, 2]}]
        if kind == "scalars":
            ex = [{**{f"a{i}": a_ for i in rw.args}, **{f"x{i}": list(row) for i in range(n) if i not in rw.args},
                   "d": d, "s": 0, "e": 1, "p_" + rw.dims: list(row)}
                  for a_, row, d in (([2, 3, 4], [4], 0), ([2, 3, 4], [4], 1), ([3, 4], [4], 0))]
        yield f"{lhs} => {_sl(whole)}", " and ".join(conds), whole, ex, index


@family(1210, "reduction-over-a-unit-dim")
def reduction_over_a_unit_dim(op, reg):  # r(x, dim=[d], keepdim=false) -> x without dim d, where x has size 1 there
    """A reduction whose parts combine (sum, max, min: the reduction of one entry is that entry) over one dim of
    size 1 only drops that dim (an all-gather of unsqueezed shards reduced over the gathered dim)."""
    if op.reduction is None or op.reduction.combine is None or op.reduction.dims is None or not op.reduction.keepdim:
        return
    r, k, _ = _reduction(op)
    kind = op.attr_spec(r.dims).kind
    if kind not in ("int", "ints"):
        return
    d = f"at({k}, 0)" if kind == "ints" else k
    conds = ([f"len({k}) == 1"] if kind == "ints" else []) + [f"size(?x0, {d}) == 1", _over_reals(op, "?x0")]
    lhs = call(op, ["?x0"], {r.keepdim: False})
    ex = [{"x0": [2, 1, 3], "p_" + r.dims: [1] if kind == "ints" else 1},
          {"x0": [1, 4], "p_" + r.dims: [0] if kind == "ints" else 0}]
    yield f"{lhs} => reshape(?x0, shape=drop_at(shape(?x0), {d}))", " and ".join(conds), "", ex


def _broadcast(op: OpDef):
    """A broadcast view's target-shape attribute (``broadcast_to``), checked to be a shape."""
    k = op.broadcast_to
    _need_attr(op, k, "broadcast_to")
    if op.attr_spec(k).kind != "scalars" or op.arity != 1:
        raise LemmaError(f"operator {op.name} ({op.source}): broadcast_to names '{k}', which must be the shape "
                         f"attribute of a one-input op")
    return f"?p_{k}"


@family(1215, "broadcast-of-concat")
def broadcast_of_concat(op, reg):  # bcast(concat(a, b, d), s) -> concat(bcast(a, s'), bcast(b, s''), d')
    """A broadcast of parts is the parts broadcast (grouped-query attention repeats each KV head for its query
    heads; a target size of -1 keeps the dim)."""
    if not op.broadcast_to:
        return
    s = _broadcast(op)
    xd = f"?d + len({s}) - rank(?a)"  # the concat dim in the output (a broadcast may add leading dims)
    part = lambda x: call(op, [x], {op.broadcast_to: f"set_at({s}, {xd}, size({x}, ?d))"})  # noqa: E731
    ex = [{"a": [2, 1, 3], "b": [1, 1, 3], "d": 0, s[1:]: [2, 3, 4, 3]},
          {"a": [2, 1, 3], "b": [2, 2, 3], "d": 1, s[1:]: [2, 3, 3]}]
    yield (f"{call(op, ['concat(?a, ?b, dim=?d)'])} => concat({part('?a')}, {part('?b')}, dim={xd})",
           f"at({s}, {xd}) == size(?a, ?d) + size(?b, ?d) or at({s}, {xd}) == -1", "", ex)


@family(1216, "broadcast-splits-at-narrower-copy")
def broadcast_splits(op, reg):  # bcast(x, s) -> concat(bcast(x, t), bcast(x, s - t at k), k), where bcast(x, t) exists
    """Constrained (§4.3): a broadcast copy splits where a narrower copy of the same tensor exists, along the one
    broadcast dim where they differ (ranks each holding some of the repeats of a KV head)."""
    if not op.broadcast_to:
        return
    s = _broadcast(op)
    k = f"expand_split_dim(?x, {s}, ?t)"
    rest = call(op, ["?x"], {op.broadcast_to: f"set_at({s}, {k}, at({s}, {k}) - at(?t, {k}))"})
    narrow = call(op, ["?x"], {op.broadcast_to: "?t"})
    ex = [{"x": [2, 1, 3], s[1:]: [2, 4, 3], "t": [2, 1, 3]}, {"x": [1, 3], s[1:]: [2, 3, 3], "t": [2, 1, 3]}]
    yield f"{call(op, ['?x'])} => concat({narrow}, {rest}, dim={k})", f"{k} >= 0", narrow, ex


def _computes(op: OpDef) -> dict[str, dict]:
    """``OpDef.computes`` as {function: fixed attribute values}."""
    c = op.computes
    return {c: {}} if isinstance(c, str) and c else dict(c) if isinstance(c, dict) else {}


OVER_REALS = frozenset({"exp", "sin", "cos", "logistic"})  # functions of the reals: the same on floating operands


def _broadcast_op(dialect: str, reg):
    """The dialect's explicit broadcast (an op declaring ``broadcast`` with attributes ``shape`` and
    ``dimensions``: HLO's broadcast_in_dim), or None."""
    found = [op for op in reg if op.broadcast and op.arity == 1 and op.name.split(".")[0] == dialect
             and [a.name for a in op.attrs] == ["shape", "dimensions"]]
    return found[0] if len(found) == 1 else None


@family(1220, "same-function-across-dialects")
def same_function(op, reg):  # A(x0, x1) -> B(bcast(x0), x1) where B(bcast(x0), x1) exists, A and B computing one function
    """Two dialects' ops computing the same elementwise function (``OpDef.computes``: ``aten.where`` and
    ``hlo.select``, ``aten.le.Tensor`` and ``hlo.compare(direction=LE)``) are one op up to broadcasting: an
    implicitly broadcasting op's operands are the other's with the broadcasts made explicit, in that dialect's
    own broadcast op, for the operands that are not of the output's shape (one lemma per set of such operands;
    only where the other exists, §4.3). Values of one dtype (a mixed-dtype ATen op promotes; HLO's does not)."""
    n = _n_inputs(op)
    if not n or not op.elementwise or len(op.elementwise) != n:
        return
    xs = [f"?x{i}" for i in range(n)]
    for fn, fixed in sorted(_computes(op).items()):
        same = f"same_values({', '.join(f'dtype({x})' for x in xs)})"
        if fn in OVER_REALS:  # (integer operands: ATen computes in float32, HLO in their own type)
            same += "".join(f" and floating(dtype({x}))" for x in xs)
        for other in sorted(reg, key=lambda o: o.name):
            if other.name.split(".")[0] == op.name.split(".")[0] or fn not in _computes(other) or _n_inputs(other) != n:
                continue
            ofixed = _computes(other)[fn]
            if any(a.name not in fixed for a in op.attrs) or any(a.name not in ofixed for a in other.attrs):
                continue  # (an attribute the function does not fix: not the same op)
            lhs = call(op, xs, fixed)
            if op.broadcasting == other.broadcasting:
                yield f"{lhs} => {call(other, xs, ofixed)}", same, call(other, xs, ofixed), ()
                continue
            if not op.broadcasting:
                continue  # (stated from the broadcasting side, both ways)
            bc = _broadcast_op(other.name.split(".")[0], reg)
            if bc is None:
                continue
            out = f"bcast_shape({', '.join(xs)})"
            for k in range(1 << n):
                cut = [i for i in range(n) if k >> i & 1]
                ys = [f"{bc.name}({x}, shape=?s{i}, dimensions=?m{i})" if i in cut else x for i, x in enumerate(xs)]
                conds = [f"shape({x}) {'!=' if i in cut else '=='} {out}" for i, x in enumerate(xs)] + [same]
                conds += [c for i in cut for c in (f"?s{i} == {out}", f"?m{i} == bcast_dims(?x{i}, len({out}))")]
                rhs = call(other, ys, ofixed)
                ex = []
                if cut:  # the cut operands [3] / [1, 3] beside [2, 2, 3]; all cut: [2, 1] and [1, 3] make [2, 3]
                    shp = {i: ([3] if i % 2 else [1, 3]) if i in cut else [2, 2, 3] for i in range(n)}
                    if len(cut) == n:
                        shp = {i: [1, 3] if i % 2 else [2, 1] for i in range(n)}
                    full = [2, 3] if len(cut) == n else [2, 2, 3]
                    ex = [{**{f"x{i}": v for i, v in shp.items()}, **{f"s{i}": full for i in cut},
                           **{f"m{i}": list(range(len(full) - len(shp[i]), len(full))) for i in cut}}]
                yield f"{lhs} => {rhs}", " and ".join(conds), rhs, ex
                yield f"{rhs} => {lhs}", " and ".join(conds), lhs, ex


# functions defined by others (dialect-neutral names of OpDef.computes): (function, operands...), an int the op's
# operand of that index
COMPOSITES = {
    "silu": ("mul", 0, ("logistic", 0)),
}


def _computing(dialect: str, fn: str, reg) -> tuple[OpDef, dict] | None:
    """``dialect``'s one op computing ``fn`` (OpDef.computes) with every attribute fixed by it; None where it has
    none or several."""
    found = [(op, _computes(op)[fn]) for op in reg if op.name.split(".")[0] == dialect and fn in _computes(op)
             and all(a.name in _computes(op)[fn] for a in op.attrs)]
    return found[0] if len(found) == 1 else None


def _spell(e, dialect: str, reg) -> tuple[str, str] | None:
    """(pattern, its innermost op's pattern) of composite ``e`` in ``dialect``'s ops; None where one is missing."""
    if isinstance(e, int):
        return f"?x{e}", ""
    got = _computing(dialect, e[0], reg)
    args = [_spell(a, dialect, reg) for a in e[1:]]
    if got is None or None in args or _n_inputs(got[0]) != len(args):
        return None
    me = call(got[0], [a for a, _ in args], got[1])
    return me, next((i for _, i in args if i), me)


@family(1222, "composite-across-dialects")
def composite(op, reg):  # silu(x) -> mul(x, logistic(x)) in any dialect, where its logistic(x) exists
    """An op computing a function others define (``COMPOSITES``: SiLU is x times the logistic of x) is that
    expression in any dialect computing its parts (NeuronX's ``multiply(x, logistic(x))`` beside HF's ``silu``);
    only where the expression's innermost op exists (§4.3). Floating operands."""
    n = _n_inputs(op)
    for fn, fixed in sorted(_computes(op).items()):
        if fn not in COMPOSITES or any(a.name not in fixed for a in op.attrs):
            continue
        for dialect in sorted({o.name.split(".")[0] for o in reg}):
            got = _spell(COMPOSITES[fn], dialect, reg)
            if got is not None:
                cond = " and ".join(f"floating(dtype(?x{i}))" for i in range(n))
                yield f"{call(op, [f'?x{i}' for i in range(n)], fixed)} => {got[0]}", cond, got[1], ()


@family(1221, "same-fill-across-dialects")
def same_fill(op, reg):  # full(s, v, t) -> constant(s, v, t) where constant(s, v, t) exists
    """Two dialects' constant fills of one shape, value and dtype are one tensor (only where the other exists)."""
    dialect = op.name.split(".")[0]
    mine = _fill_of(dialect, reg)
    if mine is None or not mine.startswith(op.name + "(") or "?t" not in mine:
        return
    for other in sorted({o.name.split(".")[0] for o in reg} - {dialect}):
        theirs = _fill_of(other, reg)
        if theirs is None or "?t" not in theirs:
            continue
        a, b = mine.format(s="?s"), theirs.format(s="?s")
        yield f"{a} => {b}", "is_dtype(?t)", b, ({"s": [2, 3], "v": 0, "t": "float16"}, {"s": [], "v": 1, "t": "int32"})


def _binary(op: OpDef) -> bool:
    return _n_inputs(op) == 2


@family(1208, "commutes-where-mirrored")
def commutes(op, reg):  # f(a, b) -> f(b, a) where f(b, a) exists
    """Only where the mirror exists (full commutativity would explode n-way sums and products)."""
    if op.commutative and _binary(op):
        fx = _fixed(op.commutative)
        yield f"{call(op, ['?a', '?b'], fx)} => {call(op, ['?b', '?a'], fx)}", "", call(op, ["?b", "?a"], fx), ()


@family(1209, "regroups-where-grouped")
def regroups(op, reg):  # f(f(a, b), c) -> f(a, f(b, c)) where f(b, c) exists (and back)
    if op.associative and _binary(op):
        fx = _fixed(op.associative)
        f = lambda x, y: call(op, [x, y], fx)  # noqa: E731
        yield f"{f(f('?a', '?b'), '?c')} => {f('?a', f('?b', '?c'))}", "", f("?b", "?c"), ()
        yield f"{f('?a', f('?b', '?c'))} => {f(f('?a', '?b'), '?c')}", "", f("?a", "?b"), ()


def all_families() -> list[tuple[int, str, Callable, str, bool]]:
    """Every registered family: this module's and those of the modules that register beside it
    (:mod:`graphguard.engine.invariances`: shift invariance, homogeneity, tiles), imported here, not at module
    level, so that they may import this one."""
    from . import invariances  # noqa: F401
    return FAMILIES


def derive(reg: Registry) -> list[Lemma]:
    """Every family's lemmas for every registered operator, in a stable order (family, op)."""
    all_families()
    out = []
    ops = sorted((op for op in reg if op.meaning is None and op.shape is not None), key=lambda o: o.name)
    for ref, name, fn, where, late in FAMILIES:
        for op in ops:
            pieces = list(fn(op, reg))
            for k, (rule, cond, when, examples, *index) in enumerate(pieces):
                tag = op.name if len(pieces) == 1 else f"{op.name}#{k}" if "#" not in op.name else f"{op.name}/{k}"
                out.append(Lemma(ref, f"{name}[{tag}]", rule, cond, "root", f"{where} ({op.name})",
                                 pack=op.source, examples=tuple(examples), when=when, variant=tag, late=late,
                                 family=(name, op.name), index=tuple((index[0] if index else {}).items())))
    return out

