"""Lemma families of invariances: properties under which two different programs compute the same numbers
(issue 41, item 4). Each is derived from a declaration on the :class:`graphguard.ir.ops.OpDef` and fuzzed by
``graphguard lemmas check`` like every family (:mod:`graphguard.engine.families` registers and derives them).

- ``shift_invariant`` (1223, 1224): softmax / log-softmax of x - c is that of x for any c constant along the
  op's dim -- a max shift all-reduced with sum instead of max, a mean shift, or none at all give the same result.
- ``homogeneous`` with ``positive`` (1225): relu(x / w) * w = relu(x) for w > 0, (x / w) ** 2 * w ** 2 = x ** 2;
  the positivity of w comes from the op that computed it (``positive``) or from a constant factor.
- ``tiles`` (1226): ``repeat`` is an expand of x with unit dims inserted before the repeated dims, reshaped.
- ``identity`` (1227): x + 0, x - 0, x * 1, x / 1 with the constant a fill of x's dtype, of x's shape or
  broadcast to it, are x -- in the e-graph, whatever the shapes (a symbolic batch: ``x + torch.zeros(x.shape[0], 8)``), where the identities pass
  (passes/identities.py) drops only fills it reads a value from.
"""
from __future__ import annotations

from ..ir import scalar as S
from .families import _computing, _fill_of, call, family
from .lemma import FUNCTIONS

_FLOAT = "floating(dtype({x}))"


def _dialect(op) -> str:
    return op.name.split(".")[0]


def _fn(op, fn: str, reg):
    """A function of ``op``'s dialect by its ``computes`` name, spelt with two operands: ``fmt(a, b)``; None
    where the dialect has no one op computing it."""
    got = _computing(_dialect(op), fn, reg)
    if got is None or got[0].arity != 2:
        return None
    o, fixed = got
    return lambda a, b: call(o, [a, b], fixed)


def _shift_parts(op, reg):
    si = op.shift_invariant
    if not si or _n1(op):
        return None
    dim, expr, total, fixed = (tuple(si) + ("", "", {}))[:4]
    sub = _fn(op, "sub", reg)
    if sub is None or op.attr_spec(dim) is None:
        return None
    return f"?p_{dim}", expr, total, dict(fixed), sub


def _n1(op) -> bool:
    return op.arity != 1


def _shift_cond(x: str, c: str, d: str) -> str:
    """c is constant along dim d of x (broadcast there, of no larger shape), of x's floating dtype."""
    return (f"const_along({c}, rank({x}), {d}) and bcast_shape({x}, {c}) == shape({x}) and "
            f"{_FLOAT.format(x=x)} and dtype({c}) == dtype({x})")


@family(1223, "shift-invariant")
def shift_invariant(op, reg):  # f(x - c), f(x + c), f(c + x) -> f(x) for c constant along f's dim (and back, where x - c exists)
    """softmax(x - c) = softmax(x) for any c constant along the softmax dim (exp(x - c) = exp(x) exp(-c), and the
    factor cancels in the row's normalisation): the shift dropped; the shift a program applied (x - c exists)
    taken; and for a concat along the dim, the shift of both parts (each rank's logits minus one all-reduced
    shift, whatever the reduction)."""
    parts = _shift_parts(op, reg)
    if parts is None:
        return
    d, expr, _, _, sub = parts
    f = lambda x: call(op, [x])  # noqa: E731
    cond = _shift_cond("?x", "?c", d)
    ex = [{"x": [2, 3], "c": [2, 1], "p_dim": 1}, {"x": [2, 3], "c": [1, 3], "p_dim": 0},
          {"x": [2, 3, 4], "c": [3, 1], "p_dim": 2}, {"x": [3], "c": [], "p_dim": 0}]
    ex = [{k.replace("p_dim", d[1:]): v for k, v in e.items()} for e in ex]
    yield f"{f(sub('?x', '?c'))} => {f('?x')}", cond, "", ex
    add = _fn(op, "add", reg)
    if add is not None:  # (x + c: the shift added, on either side)
        yield f"{f(add('?x', '?c'))} => {f('?x')}", cond, "", ex
        yield f"{f(add('?c', '?x'))} => {f('?x')}", cond, "", ex
    if not expr:  # the shift taken serves only the written-out form (1224), which reads the shifted term; without
        return    # one (log_softmax) it would only feed other lemmas of the op -- 1730's x - max(...) parts,
        # shifted again, written out again: an e-graph without end (a TP log-softmax whose max is summed)
    yield f"{f('?x')} => {f(sub('?x', '?c'))}", cond, sub("?x", "?c"), ex
    cat = f"concat(?a, ?b, dim={d})"
    conds = (f"{_shift_cond('?a', '?c', d)} and {_shift_cond('?b', '?c', d)}")
    exc = [{"a": [2, 3], "b": [2, 1], "c": [2, 1], d[1:]: 1}, {"a": [1, 3], "b": [2, 3], "c": [1, 3], d[1:]: 0},
           {"a": [2, 2, 3], "b": [2, 2, 1], "c": [2, 1, 1], d[1:]: 2}]
    shifted = f"concat({sub('?a', '?c')}, {sub('?b', '?c')}, dim={d})"
    yield f"{f(cat)} => {f(shifted)}", conds, sub("?b", "?c"), exc


@family(1224, "written-out-with-row-total")
def written_out(op, reg):  # f(x) -> expr(x, total(x)) where total(x) exists; f(concat(a, b)) -> concat(expr(a, sum(total(a), total(b))), ...)
    """A shift-invariant op is its expression of the row total (``shift_invariant``'s ``expr`` and ``total``:
    softmax = exp(x) / sum(exp(x))), where the program computed that total; over a concat along the dim, the
    total is the sum of the parts' totals (vocabulary-parallel softmax: the sums of exponentials all-reduced).
    Unshifted: together with 1223, any shift."""
    parts = _shift_parts(op, reg)
    if parts is None:
        return
    d, expr, total, fixed, _ = parts
    if not expr:  # (log_softmax: x - log(sum(exp(x))) overflows to -inf where log_softmax is finite -- equal over
        return    # the reals only, which the fuzzer's inf inputs refuse)
    tot = lambda x: total.format(x=x)  # noqa: E731
    # (a 'when' pattern binds attributes to variables: a list attribute naming the dim becomes ?k, checked)
    seen = lambda x: tot(x).replace(f"[{d}]", "?k")  # noqa: E731
    k = f" and ?k == [{d}]" if f"[{d}]" in total else ""
    out = lambda x, t: expr.replace("?x0", x).format(t=t)  # noqa: E731
    lhs = call(op, ["?x"], fixed)
    cond = _FLOAT.format(x="?x")
    ex = [{"x": [2, 3], d[1:]: 1}, {"x": [2, 3], d[1:]: 0}, {"x": [2, 3, 4], d[1:]: 2}]
    yield f"{lhs} => {out('?x', tot('?x'))}", cond + k, seen("?x"), ex
    t = f"sum({tot('?a')}, {tot('?b')})"
    cond = f"{_FLOAT.format(x='?a')} and dtype(?b) == dtype(?a)"
    exc = [{"a": [2, 3], "b": [2, 1], d[1:]: 1}, {"a": [1, 3], "b": [2, 3], d[1:]: 0},
           {"a": [2, 2, 3], "b": [2, 2, 1], d[1:]: 2}]
    yield (f"{call(op, [f'concat(?a, ?b, dim={d})'], fixed)} => concat({out('?a', t)}, {out('?b', t)}, dim={d})",
           cond + k, seen("?b"), exc)


def _scalar_mults(op, reg):
    """The ops multiplying a tensor by a number in ``op``'s dialect or the core one: (op, attribute) -- those
    declaring ``scalar_factor``, and the ops the dialect's ``scalar_form`` declarations rewrite a product to."""
    out = {}
    for o in reg:
        if o.scalar_factor and _dialect(o) in ("core", _dialect(op)):
            out[o.name] = o.scalar_factor
        for _, name, attr, power in o.scalar_form or ():
            if power == 1 and _dialect(o) == _dialect(op) and name in reg:
                out[name] = attr
    return [(reg.get(n), a) for n, a in sorted(out.items()) if reg.get(n) is not None and reg.get(n).arity == 1]


@family(1225, "homogeneous")
def homogeneous(op, reg):  # f(c x) -> c^k f(x) for a number c (> 0 where positive_only); f(x / w) * w^k -> f(x), w > 0 from its op
    """Positive homogeneity: relu(c x) = c relu(x) for c > 0, (c x) ** 2 = c ** 2 x ** 2 for every c. For a
    factor that is a number (a constant a program divides by and multiplies back); for a tensor factor w
    that the op which computed it makes positive (``positive``: exp, sigmoid), relu(x / w) * w = relu(x) and
    (x / w) ** 2 * w ** 2 = x ** 2 (the square of w as the op itself). A negative or unknown factor: none."""
    h = op.homogeneous
    if not h or op.arity != 1:
        return
    k, positive_only, fixed = (tuple(h) + ({},))[:3]
    f = lambda x: call(op, [x], fixed)  # noqa: E731
    for m, attr in _scalar_mults(op, reg):
        sign = "?f > 0" if positive_only else "?f != 0"
        power = " * ".join(["?f"] * int(k))
        cond = f"finite(?f) and {sign} and {_FLOAT.format(x='?x')}"
        yield (f"{f(call(m, ['?x'], {attr: '?f'}))} => {call(m, [f('?x')], {attr: power})}", cond, "",
               [{"x": [2, 3], "f": 2}, {"x": [3], "f": 0.5}])
    div, mul = _fn(op, "div", reg), _fn(op, "mul", reg)
    if div is None or mul is None or k not in (1, 2):
        return
    for p in sorted((o for o in reg if o.positive and o.arity == 1 and _dialect(o) == _dialect(op)),
                    key=lambda o: o.name):
        w = call(p, ["?y"])
        back = w if k == 1 else f(w)
        cond = (f"bcast_shape(?x, ?y) == shape(?x) and {_FLOAT.format(x='?x')} and dtype(?y) == dtype(?x)")
        yield (f"{mul(f(div('?x', w)), back)} => {f('?x')}", cond, "",
               [{"x": [2, 3], "y": [2, 1]}, {"x": [2, 3], "y": []}, {"x": [4], "y": [4]}])


def _lit(v) -> str:
    return str(v).lower() if isinstance(v, bool) else "None" if v is None else str(v)


def _padded(r, x) -> list:
    return [1] * (len(r) - len(x)) + list(x)


def _tile(r, x, inserted) -> tuple:
    """x's shape with ``inserted(r_i)`` for each new leading dim and before each dim repeated (r_i != 1)."""
    out, new = [], len(r) - len(x)
    for i, (ri, xi) in enumerate(zip(r, _padded(r, x))):
        if i < new:  # a new leading dim: expanded in place
            out.append(inserted(ri))
            continue
        if S.norm(ri) != 1:
            out.append(inserted(ri))
        out.append(xi)
    return tuple(out)


FUNCTIONS.update({
    # family 1226: the shapes repeat(x, r) is the reshape of an expand of (tile_units -> tile_expanded -> tile_shape)
    "tile_units": lambda ctx, r, x: _tile(tuple(r), ctx.shape_of(x), lambda ri: 1),
    "tile_expanded": lambda ctx, r, x: _tile(tuple(r), ctx.shape_of(x), lambda ri: ri),
    "tile_shape": lambda ctx, r, x: tuple(S.norm(S.sym(ri) * S.sym(xi)) for ri, xi in zip(r, _padded(tuple(r), ctx.shape_of(x)))),
})


@family(1226, "tile-is-expand-reshape")
def tile(op, reg):  # repeat(x, r) -> reshape(expand(reshape(x, unit dims before repeated ones), ...), shape(repeat))
    """``repeat(x, reps)`` (NumPy's tile) is x with a unit dim inserted before each repeated dim, expanded there to
    the repeat count, reshaped to the result: GQA's ``repeat_kv`` written with ``repeat`` against ``expand`` +
    ``reshape`` (not ``repeat_interleave``, which inserts the unit dim after: another order of the rows)."""
    if not op.tiles or op.arity != 1:
        return
    exps = [o for o in reg if o.broadcast_to and o.arity == 1 and _dialect(o) == _dialect(op)]
    if len(exps) != 1:
        return
    ex_op = exps[0]
    r = f"?p_{op.tiles}"
    e = call(ex_op, [f"reshape(?x, shape=tile_units({r}, ?x))"], {
        a.name: f"tile_expanded({r}, ?x)" if a.name == ex_op.broadcast_to else _lit(a.default)
        for a in ex_op.attrs})
    cond = f"len({r}) >= rank(?x) and tile_units({r}, ?x) != shape(?x)"
    yield (f"{call(op, ['?x'])} => reshape({e}, shape=tile_shape({r}, ?x))", cond, "",
           [{"x": [2, 2, 3], r[1:]: [1, 3, 1]}, {"x": [2, 3], r[1:]: [2, 2]}, {"x": [3], r[1:]: [2, 1]},
            {"x": [2, 1], r[1:]: [2, 2, 3]}])


@family(1227, "identity-element")
def identity_element(op, reg):  # f(x, fill(v)) -> x where v is f's identity element (OpDef.identity), the fill x's shape and dtype
    """x + 0 = x, x * 1 = x (and each op's other declared identities, on either side where declared): with the
    constant a fill of the dialect's fill op of x's dtype (no promotion changes it), of x's shape or one that
    broadcasts to it (no broadcast widens x) -- e.g. x + torch.zeros(s) where s is x's symbolic shape, or
    x + torch.zeros(1, n)."""
    full = _fill_of(_dialect(op), reg) if op.arity == 2 else None
    if full is None or not op.identity or ", dtype=?t" not in full:
        return
    for pos, value, fixed in op.identity:
        args = ["?x", "?x"]
        args[pos] = full.format(s="?s")
        # (floating only: an integer x / 1 is a float -- the fuzzer found it)
        cond = f"?v == {value} and broadcasts_to(?s, ?x) and ?t == dtype(?x) and {_FLOAT.format(x='?x')}"
        free = {f"p_{a.name}": a.default for a in op.attrs if a.name not in fixed}
        ex = [{"x": x, "s": s, "v": value, "t": t, **free}
              for x, s in (([2, 3], [2, 3]), ([4], [4]), ([1, 2, 2], [1, 2, 2]), ([3, 1], [3, 1]), ([2, 2, 3], [1, 3]),
                           ([5], [1]), ([2, 3], [3]), ([2, 3], [1, 1]), ([4, 2], []))
              for t in ("float32", "float64", "float16")]
        yield f"{call(op, args, fixed)} => ?x", cond, "", ex
