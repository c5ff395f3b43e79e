"""Graph passes of the ATen-HLO bridge: each moves a PyTorch (ATen) program toward the form an XLA or NeuronX
(HLO) program has, beside such a program -- contributed to the pipeline (:mod:`graphguard.passes`) with the
``graphguard_passes`` hook, so they run only while this pack is loaded.

- :func:`fold_constants` (after ``slices_of_concats``): a constant computed by ops (HF's ``exp(arange(D / 2) * c)``
  inverse frequencies) is folded into the ``hlo.literal`` the HLO frontend would write for it, beside a program
  holding such literals: each op by its NumPy reference in float64, rounded to its dtype; every float literal
  holds values of its dtype and every literal of more than one dim is a vector reshaped, so that two programs'
  constants of one value are one term.
- :func:`masked_softmax` (after ``fuse_expressions``): HF's additive attention mask read as XLA's selected one,
  under the relation's ``assume: masked_scores_within``.
- :func:`scale_into_product` (after ``scalar_forms``): HF's ``(q @ k.T) * c`` as XLA's and NeuronX's
  ``(q * c) @ k.T``, beside a program of other dialects that scales before its products.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.graph import Graph, Node
from graphguard.ir.ops import Registry, normalize_attrs, number_text
from graphguard.ir.values import filled_with, number, value_ranges
from graphguard.passes import Pass
from graphguard.ir.dtypes import ROUNDED
from graphguard.passes.names import fresh_node_name, fresh_tensor, suffixed

FOLD_MAX = 64  # the HLO frontend's LITERAL_MAX: folded values up to this size are written as hlo.literal


def fold_constants(g: Graph, reg: Registry, cx: S.Constraints, other: Graph | None = None) -> int:
    """Fold every subgraph computed from constants alone (no graph input) into the value it computes, written as
    the HLO frontend writes the constants it folds (``hlo.literal``; NumPy references of the ops, as there), so
    that the two programs hold one constant in one form: HF's ``exp(arange(D / 2) * c)`` inverse frequencies and
    the ``hlo.literal`` NeuronX's ``exponential(iota * c)`` was folded into are one term. Done only beside a
    program that holds such literals (``other``, the program it is compared with) and only for a folded value of
    a float or integer dtype, of at most :data:`FOLD_MAX` entries, not all one value (a splat stays the fill
    the other lemmas read), that a node outside the folded subgraph reads; not in a program that holds literals
    itself (its frontend folded what it folds: an HLO broadcast of a literal stays a broadcast). Float literals
    hold their values rounded to their dtype, and a literal of more than one dim is a vector reshaped
    (:func:`_flat_literals`), in every program. The number of nodes folded into literals."""
    lit = reg.get("hlo.literal")
    if lit is None:
        return 0
    for n in g.nodes:  # a float literal holds its values rounded to its dtype (as round_fills does for fills)
        dtype = n.attrs.get("dtype") if n.op == "hlo.literal" else None
        if dtype not in ROUNDED:
            continue
        vals = n.attrs["values"]
        text = ",".join(number_text(x) for x in np.asarray(
            [float(v) for v in vals.split(",") if v.strip()], dtype=np.float64).astype(dtype))
        if text != vals:
            g.rewrite(n, attrs=dict(n.attrs, values=text))
    g.revalidate(reg, cx)
    if other is None or not any(n.op == "hlo.literal" for n in other.nodes) or any(n.op == "hlo.literal" for n in g.nodes):
        _flat_literals(g, reg, cx)  # (a program holding literals: its frontend folded what it folds)
        return 0
    known: dict[str, np.ndarray] = {}
    made: dict[str, Node] = {}  # tensor -> the node computing it from constants
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or op.ref is None or len(n.outputs) != 1 or any(t not in known for t in n.inputs) \
                or op.meaning is not None:
            continue
        t = g.tensors[n.outputs[0]]
        if t.dtype is None or not str(t.dtype).startswith(("float", "int")) or t.dtype == "float64":
            continue
        try:
            # each op evaluated in float64 and its result rounded to its dtype: the value a correctly rounded
            # implementation stores (NumPy's float32 exp is not; HF's torch.exp and XLA's folding are)
            xs = [known[x].astype(np.float64) if known[x].dtype.kind == "f" else known[x] for x in n.inputs]
            with np.errstate(all="ignore"):
                v = np.asarray(op.ref(xs, dict(n.attrs)))
        except Exception:  # noqa: BLE001 -- an op whose reference cannot run here is left as it is
            continue
        if tuple(v.shape) != tuple(g.shape(n.outputs[0])) or v.size > 4096:
            continue
        known[n.outputs[0]] = v.astype(np.dtype(str(t.dtype)), copy=False)
        made[n.outputs[0]] = n
    outside = [t for t in known if any(c.outputs[0] not in known for c in g.consumers.get(t, []))
               or t in g.outputs]
    changed = []
    for t in outside:
        v, n = known[t], made[t]
        if not 0 < v.size <= FOLD_MAX or (v == v.reshape(-1)[0]).all() or not n.inputs:
            continue
        g.rewrite(n, op="hlo.literal", inputs=[], attrs=dict(normalize_attrs(lit, {
            "shape": list(v.shape), "dtype": str(g.tensors[t].dtype),
            "values": ",".join(number_text(x) for x in v.reshape(-1))}, "hlo.literal")))
        changed.append(n)
    if changed:  # the nodes only the folded ones read are left: dead, dropped with the graph's other dead nodes
        live = set(g.outputs)
        for n in reversed(g.nodes):
            if any(o in live for o in n.outputs) or not set(n.outputs) <= set(known):
                live.update(n.inputs)
        g.remove_nodes([n for n in g.nodes if set(n.outputs) <= set(known) and not any(o in live for o in n.outputs)])
        g.revalidate(reg, cx)
    _flat_literals(g, reg, cx)
    return len(changed)


def _flat_literals(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """A literal of more than one dim is its values (row-major: the same text) as a vector, reshaped: ``[1, 1, T]``
    key positions folded from ``arange(T)[None, None]`` and the ``[T]`` iota another program broadcasts are one
    vector, ``[1, D / 2]`` inverse frequencies folded through HF's ``[None, :]`` and through HLO's reshape one
    term. The number of literals rewritten."""
    changed = 0
    for n in g.nodes:
        if n.op != "hlo.literal" or len(n.attrs["shape"]) < 2:
            continue
        out = n.outputs[0]
        flat = fresh_tensor(g, out, ".flat")
        shape = list(n.attrs["shape"])
        g.rewrite(n, attrs=dict(n.attrs, shape=[math.prod(shape)]), outputs=[flat])
        g.insert_node(n, "core.reshape", [flat], [out], {"shape": tuple(shape)}, suffixed(n.name, ".shape"), n.loc,
                      n.func, n.module)
        changed += 1
    g.revalidate(reg, cx)
    return changed


# -- the masked softmax: a mask added to the scores, or selected in their place --------------------------------

# exp(x) rounds to 0 below -UNDERFLOW[dtype] (round to nearest: ln of half the smallest subnormal), with a margin
UNDERFLOW = {"float64": 746, "float32": 105, "bfloat16": 94, "float16": 18}
SOFTMAX_OPS = ("aten._softmax", "aten.softmax.int")


def _fn(reg: Registry, n) -> str | None:
    """The elementwise function node ``n`` computes (``OpDef.computes``, its attributes matched), or None."""
    op = reg.get(n.op)
    c = op.computes if op is not None else ""
    if isinstance(c, str):
        return c or None
    for name, fixed in c.items():
        if all(n.attrs.get(k) == v for k, v in fixed.items()):
            return name
    return None


def _unit_dim_map(src: tuple, dst: tuple, k: int) -> int | None:
    """For a reshape from ``src`` to ``dst`` that only adds or drops dims of size 1: the dim of ``src`` that
    dst's dim ``k`` (not of size 1) is; None for another reshape."""
    a = [d for d in src if d != 1]
    b = [d for d in dst if d != 1]
    if a != b or dst[k] == 1:
        return None
    i = sum(1 for d in dst[:k] if d != 1)
    return [j for j, d in enumerate(src) if d != 1][i]


def _aligned(rank_out: int, shape: tuple, k: int) -> int:
    return k - (rank_out - len(shape))


def _is_iota(g: Graph, reg: Registry, t: str, k: int, n: int, depth: int = 8) -> bool:
    """Whether tensor ``t`` holds 0, 1, ..., n - 1 along its dim ``k`` and is constant along the others."""
    shape = tuple(g.shape(t))
    if depth < 0 or not 0 <= k < len(shape) or shape[k] != n or any(d != 1 for j, d in enumerate(shape) if j != k):
        return False
    p = g.producer.get(t)
    if p is None:
        return False
    if p.op == "core.reshape":
        j = _unit_dim_map(tuple(g.shape(p.inputs[0])), shape, k)
        return j is not None and _is_iota(g, reg, p.inputs[0], j, n, depth - 1)
    if p.op == "aten.arange":
        return len(shape) == 1 and number(p.attrs.get("end")) == n
    if p.op == "hlo.iota":
        return int(p.attrs.get("dimension", -1)) == k
    if p.op == "hlo.literal" and not p.inputs:  # (an arange folded beside an HLO program: fold_constants)
        vals = [number(v) for v in str(p.attrs.get("values", "")).split(",")]
        return vals == list(range(n))
    return False


FLIP = {"le": "ge", "lt": "gt", "ge": "le", "gt": "lt"}


def _key_bounds(g: Graph, reg: Registry, t: str, k: int, n: int, depth: int = 8) -> list[tuple[str, str]] | None:
    """Boolean tensor ``t`` as a conjunction of comparisons of the key index (0 .. n - 1 along dim ``k``) with
    bounds constant along it: [(relation, bound tensor)] read ``key <relation> bound``; None where it is not
    one (a mask of another form: nothing is claimed)."""
    shape = tuple(g.shape(t))
    p = g.producer.get(t)
    if depth < 0 or p is None or not 0 <= k < len(shape):
        return None
    if p.op == "core.reshape":
        j = _unit_dim_map(tuple(g.shape(p.inputs[0])), shape, k)
        return None if j is None else _key_bounds(g, reg, p.inputs[0], j, n, depth - 1)
    fn = _fn(reg, p)
    if fn == "and" and len(p.inputs) == 2:
        parts = [_key_bounds(g, reg, x, _aligned(len(shape), tuple(g.shape(x)), k), n, depth - 1) for x in p.inputs]
        return None if None in parts else parts[0] + parts[1]
    if fn in FLIP and len(p.inputs) == 2:
        a, b = p.inputs
        ka, kb = (_aligned(len(shape), tuple(g.shape(x)), k) for x in (a, b))
        const = lambda x, kx: kx < 0 or tuple(g.shape(x))[kx] == 1  # noqa: E731
        if _is_iota(g, reg, a, ka, n) and const(b, kb):
            return [(fn, b)]
        if _is_iota(g, reg, b, kb, n) and const(a, ka):
            return [(FLIP[fn], a)]
    return None


def rows_keep_a_key(g: Graph, reg: Registry, mask: str, k: int, ranges: dict) -> bool:
    """Whether every row of boolean ``mask`` along its dim ``k`` holds a true entry: the mask is the key index
    compared with bounds (causal: key <= query position; left padding: key >= the row's start) and the bounds'
    value ranges (a relation's ``ranges:``) leave every row a key -- the largest lower bound at most the smallest
    upper bound, within 0 .. n - 1."""
    n = tuple(g.shape(mask))[k]
    if not isinstance(n, int) or n < 1:
        return False
    bounds = _key_bounds(g, reg, mask, k, n)
    if not bounds:
        return False
    lo, hi = 0, n - 1
    for rel, t in bounds:
        r = ranges.get(t)
        if r is None:
            return False
        if rel in ("ge", "gt"):  # key >= b: b's largest value (+ 1 if strict)
            lo = max(lo, r[1] - 1 + (rel == "gt"))
        else:  # key <= b: b's smallest value (- 1 if strict)
            hi = min(hi, r[0] - (rel == "lt"))
    return lo <= hi


def masked_softmax(g: Graph, reg: Registry, cx: S.Constraints, ranges: dict, bound) -> list[str]:
    """``softmax(scores + where(mask, 0, c))`` -> ``softmax(where(mask, scores, c))`` (the scores cast to the
    softmax's dtype before it or not): HF's eager attention adds a mask filled with a large negative c, XLA (and
    NeuronX) select c in the masked places. Exact -- the same probabilities, bit for bit -- where every row of the
    mask keeps a key (:func:`rows_keep_a_key`, from the relation's ``ranges:``) and every score lies in
    [-bound, bound] (the relation's ``assume: masked_scores_within``): then c <= -(2 bound + U) makes every
    masked entry's exp round to 0 on both sides (U: exp's underflow in the softmax's dtype) while the allowed
    entries, scores + 0, are the scores. Rows of padding with no key differ (HF averages the scores shifted by c,
    XLA weighs every key alike): no rewrite there, nor without the assumption. The sites rewritten."""
    if bound is None:
        return []
    done, dropped = [], []
    for sm in list(g.nodes):
        if sm.op not in SOFTMAX_OPS or len(sm.inputs) != 1:
            continue
        x = sm.inputs[0]
        p = g.producer.get(x)
        cast = None
        if p is not None and p.op == "aten._to_copy" and len(g.consumers.get(x, [])) == 1:
            cast, x, p = p, p.inputs[0], g.producer.get(p.inputs[0])
        if p is None or p.op != "aten.add.Tensor" or number(p.attrs.get("alpha", 1)) != 1 or \
                len(g.consumers.get(x, [])) != 1 or x in g.outputs:
            continue
        out = tuple(g.shape(x))
        d = int(sm.attrs.get("dim", -1)) % len(out)
        for w, s in ((p.inputs[1], p.inputs[0]), (p.inputs[0], p.inputs[1])):
            wn = g.producer.get(w)
            if wn is None or _fn(reg, wn) != "where" or len(wn.inputs) != 3:
                continue
            m, z, c = wn.inputs
            cv, zv = filled_with(g, reg, c), filled_with(g, reg, z)
            sdt = g.tensors[s].dtype
            if zv != 0 or cv is None or g.tensors[c].dtype != sdt or g.tensors[x].dtype != sdt or \
                    tuple(g.shape(s)) != out:
                continue
            fdt = g.tensors[sm.inputs[0]].dtype
            big = float(np.finfo(np.dtype(sdt)).max) if sdt in ("float16", "float32", "float64") else None
            if fdt not in UNDERFLOW or big is None or not cv <= -(2 * bound + UNDERFLOW[fdt]) or \
                    bound + abs(cv) > big:
                continue
            km = _aligned(len(out), tuple(g.shape(m)), d)
            if km < 0 or not rows_keep_a_key(g, reg, m, km, ranges):
                continue
            g.rewrite(p, op="aten.where.self", inputs=[m, s, c], attrs={})
            dropped.append(wn)
            done.append(f"{p.loc or p.name}: the mask added to the scores read as selected in their place "
                        f"(every row keeps a key; scores within [-{bound}, {bound}])")
            break
    if done:  # (the additive masks' wheres, and what only they read, are read by nothing now: dropped)
        g.revalidate(reg, cx)  # (readers' table rebuilt)
        gone: set[int] = set()
        todo = list(dropped)
        while todo:
            n = todo.pop()
            if id(n) in gone or any(o in g.outputs for o in n.outputs) or \
                    any(id(r) not in gone for o in n.outputs for r in g.consumers.get(o, [])):
                continue
            gone.add(id(n))
            todo += [g.producer[i] for i in n.inputs if i in g.producer]
        g.remove_nodes([n for n in g.nodes if id(n) in gone])
        g.revalidate(reg, cx)
    return done


def _dialects(g: Graph) -> set[str]:
    """The dialects of g's operators that read tensors (constants aside: a folded literal is HLO's in any program)."""
    return {n.op.split(".")[0] for n in g.nodes if n.inputs} - {"core"}


def scale_into_product(g: Graph, reg: Registry, cx: S.Constraints, other: Graph | None = None) -> int:
    """``(x @ y) * c`` -> ``(x * c) @ y`` (views of the product between them kept): HF's attention scales its
    scores after ``q @ k.T``, XLA's and NeuronX's before it (``q * c``); the factor has one place in both programs.
    Exact over the reals (the product is linear in x), as the engine reads every linear op. Only beside a program
    of other dialects that scales an operand of its own products (one framework's programs keep their own forms,
    and so does a pair where neither moves the factor), and only where the product and its views are read by
    nothing else. The number of factors moved."""
    if other is None or _dialects(g) & _dialects(other) or not _scales_before_products(other, reg):
        return 0  # (two frameworks, no dialect in common, the other scaling an operand of its products)
    changed = 0
    for m in list(g.nodes):
        c = number(m.attrs.get("other")) if m.op == "aten.mul.Scalar" else None
        if not isinstance(c, Fraction) or c == 0:
            continue
        p, t = g.producer.get(m.inputs[0]), m.inputs[0]
        while p is not None and p.op == "core.reshape" and len(g.consumers.get(t, [])) == 1 and t not in g.outputs:
            t = p.inputs[0]
            p = g.producer.get(t)
        product = getattr(reg.get(p.op), "bilinear", None) if p is not None else None  # (OpDef.bilinear)
        if product is None or len(g.consumers.get(t, [])) != 1 or t in g.outputs or \
                len(g.consumers.get(m.inputs[0], [])) != 1:
            continue
        x = p.inputs[0]
        scaled = fresh_tensor(g, x, ".scaled")
        g.insert_node(None, "aten.mul.Scalar", [x], [scaled], {"other": c}, name=fresh_node_name(g, m.name + ".into"),
                      loc=m.loc, func=m.func, module=m.module)
        g.rewrite(p, inputs=[scaled] + p.inputs[1:])
        g.rewrite(m, op="core.identity", inputs=[m.inputs[0]], attrs={})
        changed += 1
    g.revalidate(reg, cx)
    return changed


def _scales_before_products(g: Graph, reg: Registry) -> bool:
    """Whether ``g`` multiplies an operand of a bilinear product by a constant (NeuronX's ``q * scale`` before
    its ``dot``)."""
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or not n.inputs or not {(0,), (1,)} <= set(op.linear_groups(dict(n.attrs))):
            continue
        p = g.producer.get(n.inputs[0])
        pop = reg.get(p.op) if p is not None else None
        if pop is not None and pop.scaling and any(filled_with(g, reg, i) is not None for i in p.inputs):
            return True
    return False


def _masked_softmax(g: Graph, ctx) -> int:
    """:func:`masked_softmax` under the relation's ``assume: masked_scores_within`` (value ranges: the relation's
    ``ranges:``, of G_s inputs or G_d leaves); each site rewritten is an assumption of the result."""
    rel = ctx.rel
    bound = rel.assume.get("masked_scores_within") if rel is not None else None
    if bound is None:
        return 0
    done = masked_softmax(g, ctx.reg, ctx.cx, value_ranges(g, rel.ranges if ctx.role == "spec" else rel.leaf_ranges(),
                                                            ctx.reg), bound)
    for a in done:
        ctx.assume(a)
    return len(done)


PASSES = [
    Pass("fold_constants", lambda g, ctx: fold_constants(g, ctx.reg, ctx.cx, other=ctx.other),
         requires={"fills-rounded"}, ensures={"constants-folded", "literals-flat"}, after="slices_of_concats",
         doc="constants computed by ops -> hlo.literal beside a program holding literals; literals flat"),
    Pass("masked_softmax", _masked_softmax, requires={"constants-folded"}, ensures={"masks-selected"},
         after="fuse_expressions",
         doc="softmax(s + where(m, 0, c)) -> softmax(where(m, s, c)) under assume: masked_scores_within"),
    Pass("scale_into_product", lambda g, ctx: scale_into_product(g, ctx.reg, ctx.cx, other=ctx.other),
         requires={"scalar-forms"}, ensures={"scales-before-products"}, after="scalar_forms",
         doc="(x @ y) * c -> (x * c) @ y beside a program of other dialects scaling before its products"),
]
