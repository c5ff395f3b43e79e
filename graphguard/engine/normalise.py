"""Graph normal forms applied before proving.

An operator applied to its identity element -- ``x + 0``, ``0 + x``, ``x * 1``, ``x / 1``, as in a partial sum
started from ``x.new_zeros(shape)`` -- returns its other operand. Its op declares which input and value
(:attr:`OpDef.identity`), the constant's op that every entry is its number attribute (:attr:`OpDef.fill`);
the node becomes a ``core.identity`` of the other operand where the constant, the operand and the result
have one shape and the operand's dtype is the result's (no broadcast, no type promotion). Done on the graphs,
not as an e-graph rule: ``x = x + 0`` would put ``x`` inside its own class and every rule about ``+`` would
grow terms around it without end. The fuzzer checks each declaration
(:func:`graphguard.engine.fuzz.check_identity`).

A tensor op applied to a constant that is a number in disguise -- ``x * c``, ``c * x``, ``x / c`` with c a
``scalar_tensor`` -- becomes its scalar form, ``mul.Scalar(x, other=c)`` / ``mul.Scalar(x, other=1 / c)``
(:attr:`OpDef.scalar_form`), so every factor of a graph is one op whose factors fold (403, 553). Lemmas 400-402
state the same in the e-graph, but keep the tensor form beside it: there a factor moved out of ``x * c``
(1204 on ``scale(y, 1/2) * c``) makes a new class ``y * c`` next to ``y`` and ``2 y``, and an all-reduce of
``2 x`` taken back by ``/ 2`` grows ``4 x``, ``8 x``, ... without end. Checked by the fuzzer
(:func:`graphguard.engine.fuzz.check_scalar_form`).
A fused product-plus-bias (:attr:`OpDef.biased`: ``addmm(c, a, b)`` = ``add(mm(a, b), c)``) whose output only a
reshape reads, keeping its last dim, with a row bias -- ``nn.Linear`` on rows flattened to 2-D and viewed back,
as fx captures it -- becomes the product, the reshape, then the add (:func:`bias_after_rows`): the pieces an
ONNX export or a hand-written ``x @ w.T + b`` has, where the frontier can relate the product before the bias.
Done where the two programs differ in the fused ops they call (where both call ``addmm`` the fused form is
kept: fewer operators, the same lemmas).
A constant computed by ops (HF's ``exp(arange(D / 2) * c)`` inverse frequencies) is folded into the ``hlo.literal``
the HLO frontend would write for it, beside a program holding such literals (:func:`fold_constants`): each op by
its NumPy reference in float64, rounded to its dtype; every float literal holds values of its dtype and every
literal of more than one dim is a vector reshaped, so that two programs' constants of one value are one term.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..ir import scalar as S
from ..ir.graph import Graph, Node
from ..ir.ops import Registry, normalize_attrs


def number(v) -> float | Fraction | None:
    """A number attribute as a value (exact where rational), None where it is symbolic or not a number."""
    if isinstance(v, bool):
        return Fraction(int(v))
    if isinstance(v, (int, float, Fraction)):
        return v
    try:
        return Fraction(str(v))
    except (ValueError, ZeroDivisionError):
        try:
            return float(str(v))
        except ValueError:
            return None


def filled_with(g: Graph, reg: Registry, t: str):
    """The value every entry of ``t`` holds, where ``t`` comes from a fill op (a constant); else None."""
    node = g.producer.get(t)
    op = reg.get(node.op) if node is not None else None
    if op is None or not op.fill or node.inputs:
        return None
    return number(node.attrs.get(op.fill))


def _binary_nodes(g: Graph, reg: Registry, declaration: str):
    """(node, its op, its output's info) for every two-input, one-output node whose op declares ``declaration``
    (``identity`` or ``scalar_form``)."""
    for n in g.nodes:
        op = reg.get(n.op)
        if op is not None and getattr(op, declaration) and len(n.inputs) == 2 and len(n.outputs) == 1:
            yield n, op, g.tensors[n.outputs[0]]


def identities(op, attrs: dict) -> list[tuple[int, object]]:
    """(input, value) of each identity declaration of ``op`` that holds under ``attrs``: that input filled with
    that value makes the op return its other input."""
    return [(pos, value) for pos, value, fixed in op.identity
            if all(number(attrs.get(k)) == v for k, v in fixed.items())]


def drop_identities(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """Turn every op applied to its identity element into ``core.identity`` of the other operand; the number
    of nodes changed (checked again: :meth:`Graph.reinfer`)."""
    changed, dropped = [], []
    for n, op, out in _binary_nodes(g, reg, "identity"):
        for pos, value in identities(op, n.attrs):
            other = g.tensors[n.inputs[1 - pos]]
            if other.shape != out.shape or other.dtype != out.dtype or g.shape(n.inputs[pos]) != out.shape:
                continue  # (a 0-dim constant stays: lemmas 407/408 and the vocabulary masks' patterns read it)
            if filled_with(g, reg, n.inputs[pos]) != value:
                continue
            dropped.append(n.inputs[pos])
            n.op, n.inputs, n.attrs = "core.identity", [other.name], {}
            changed.append(n)
            break
    if changed:
        g.reinfer(changed, reg, cx, dropped)
    return len(changed)


def slices_of_concats(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """A slice of a concatenation along the same dim that lies within one part reads that part (its bounds
    shifted): ``cat(zeros(1), cumsum(n))[0:1]`` is ``zeros(1)[0:1]``, a constant on every rank, which the
    search would otherwise have to find through the concatenation's other, data-made part. Exact (data
    movement). The number of slices changed."""
    changed, dropped = [], []
    for n in g.nodes:
        p = g.producer.get(n.inputs[0]) if n.op == "core.slice" else None
        if p is None or p.op != "core.concat" or int(p.attrs["dim"]) != int(n.attrs["dim"]):
            continue
        d, lo, hi, off = int(n.attrs["dim"]), n.attrs["start"], n.attrs["end"], 0
        for part in p.inputs:
            size = g.shape(part)[d]
            if cx.prove(">=", lo, off) and cx.prove("<=", hi, S.norm(S.sym(off) + S.sym(size))):
                dropped.append(n.inputs[0])
                n.inputs = [part]
                n.attrs = dict(n.attrs, start=S.norm(S.sym(lo) - S.sym(off)), end=S.norm(S.sym(hi) - S.sym(off)))
                changed.append(n)
                break
            off = S.norm(S.sym(off) + S.sym(size))
    if changed:
        g.reinfer(changed, reg, cx, dropped)
        for n in changed:
            g.consumers.setdefault(n.inputs[0], []).append(n)
    return len(changed)


# the integer dtypes a constant may hold a factor in (their exclusive bound)
EXACT_INTS = {"int64": 1 << 63, "int32": 1 << 31}
MANTISSA = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}
MIN_EXP = {"float64": -1022, "float32": -126, "float16": -14, "bfloat16": -126}  # smallest normal exponent
MAX_EXP = {"float64": 1023, "float32": 127, "float16": 15, "bfloat16": 127}


def holds(dtype: str | None, value) -> bool:
    """A constant of ``dtype`` filled with ``value`` holds exactly that number (a normal float of the dtype's
    precision, or an integer in range); None: torch's default dtype, float32."""
    if not isinstance(value, Fraction):
        return False  # inf, nan
    dtype = dtype or "float32"
    if dtype in EXACT_INTS:
        return value.denominator == 1 and abs(value) < EXACT_INTS[dtype]
    if dtype not in MANTISSA:
        return False
    if value == 0:
        return True
    n, d = abs(value.numerator), value.denominator
    if d & (d - 1):
        return False  # not a dyadic rational
    e = n.bit_length() - d.bit_length()  # 2**e <= |value| < 2**(e + 1)
    if e < MIN_EXP[dtype] or e > MAX_EXP[dtype]:
        return False
    return (value * Fraction(2) ** (MANTISSA[dtype] - 1 - e)).denominator == 1


def scalar_forms(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """Turn every op applied to a constant that its ``scalar_form`` reads as a number into that scalar op of the
    other operand (``x * c`` -> ``mul.Scalar(x, other=c)``); the number of nodes changed (checked again:
    :meth:`Graph.reinfer`)."""
    changed, dropped = [], []
    for n, op, out in _binary_nodes(g, reg, "scalar_form"):
        for pos, name, attr, power in op.scalar_form:
            other = g.tensors[n.inputs[1 - pos]]
            sop = reg.get(name)
            c = filled_with(g, reg, n.inputs[pos])
            if sop is None or not holds(g.tensors[n.inputs[pos]].dtype, c) or (power < 0 and c == 0):
                continue
            if other.shape != out.shape or not str(other.dtype).startswith(("float", "bfloat")):
                continue
            attrs = dict(normalize_attrs(sop, {attr: c ** power}, g.where(n)))
            if (sop.dtype([other.dtype], attrs) if sop.dtype else other.dtype) != out.dtype:
                continue
            dropped.append(n.inputs[pos])
            n.op, n.inputs, n.attrs = name, [other.name], attrs
            changed.append(n)
            break
    if changed:
        g.reinfer(changed, reg, cx, dropped)
    return len(changed)


def bias_after_rows(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """``reshape(fused(c, a, b))`` -> ``add(reshape(product(a, b)), c)`` for every op declaring ``biased``, under
    its attribute values, where the reshape is the fused output's only reader (the fused output is no graph
    output; the reshape's may be: the add writes it), keeps the
    last dim and the bias is ``[n]`` or ``[1, n]``; the number of nodes rewritten (the graph is validated again
    where any was). Exact: the add of a row bias commutes with a reshape of the rows."""
    changed, extra = 0, {}
    outputs = set(g.outputs)
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or not op.biased or len(n.inputs) != 3 or len(n.outputs) != 1 or n.outputs[0] in outputs:
            continue
        prod, add, fixed = op.biased
        if any(number(n.attrs.get(k)) != v for k, v in fixed.items()):
            continue
        readers = g.consumers.get(n.outputs[0], [])
        if len(readers) != 1 or readers[0].op != "core.reshape":
            continue
        view, out, bias = readers[0], g.tensors[n.outputs[0]], g.tensors[n.inputs[0]]
        if len(out.shape) != 2:
            continue
        width = out.shape[1]
        if g.shape(view.outputs[0])[-1:] != (width,) or bias.shape not in ((width,), (1, width)) or \
                bias.dtype != out.dtype:
            continue
        final = view.outputs[0]
        rows = _fresh(g, final, ".rows")
        g.tensors[rows] = g.tensors[final]  # (re-inferred by validate)
        n.op, n.inputs, n.attrs = prod, n.inputs[1:], {}
        view.outputs = [rows]
        node = Node(add, [rows, bias.name], [final], {}, _suffixed(n.name, ".bias"), n.loc, n.func, n.module)
        node._declared = {}  # type: ignore[attr-defined]
        extra[id(view)] = node
        changed += 1
    if changed:
        nodes = []
        for x in g.nodes:
            nodes.append(x)
            if id(x) in extra:
                nodes.append(extra[id(x)])
        g.nodes = nodes
        g.validate(reg, cx)
    return changed


def _fresh(g: Graph, name: str, suffix: str) -> str:
    """``name`` + ``suffix``, made unused in ``g``."""
    new = _suffixed(name, suffix)
    while new in g.tensors:
        new = _suffixed(new, "_")
    return new


def _suffixed(name: str, suffix: str) -> str:
    """``name`` with ``suffix`` before its rank (``y@1`` -> ``y.rows@1``): a G_d tensor stays ``NAME@RANK``."""
    base, at, rank = name.rpartition("@")
    return f"{base}{suffix}@{rank}" if at and rank.isdigit() else name + suffix


def widen_fills(g: Graph, reg: Registry, cx: S.Constraints, other: Graph | None = None) -> int:
    """A constant fill read only by broadcasting elementwise ops of one output shape takes that shape (a fill
    broadcast is the same fill, wider): ``where(mask, full([], 0), full([], -30000))`` beside a program whose
    ops do not broadcast (HLO's ``select`` of two constants of the mask's shape), so that the two programs'
    constants are one term. Only beside such a program. The number of fills widened."""
    if other is None or not any((op := reg.get(n.op)) is not None and len(op.elementwise) > 1 and not op.broadcasting
                                and not n.op.startswith("core.") for n in other.nodes):  # (core: every G_d's sums)
        return 0
    changed = []
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or not op.fill or n.inputs or len(n.outputs) != 1:
            continue
        shape_attrs = [a.name for a in op.attrs if a.kind == "scalars"]
        readers = g.consumers.get(n.outputs[0], [])
        if len(shape_attrs) != 1 or not readers or n.outputs[0] in g.outputs:
            continue
        outs = set()
        for r in readers:
            rop = reg.get(r.op)
            if rop is None or not rop.broadcasting or len(r.outputs) != 1 or \
                    any(r.inputs[i] == n.outputs[0] for i in range(len(r.inputs)) if i not in rop.elementwise):
                outs = None
                break
            outs.add(tuple(g.shape(r.outputs[0])))
        if not outs or len(outs) != 1:
            continue
        (wide,) = outs
        mine = tuple(g.shape(n.outputs[0]))
        if mine == wide or len(mine) > len(wide) or any(
                not (cx.prove("==", d, 1) or cx.prove("==", d, w)) for d, w in zip(mine, wide[len(wide) - len(mine):])):
            continue
        n.attrs = dict(n.attrs, **{shape_attrs[0]: list(wide)})
        changed.append(n)
    if changed:
        g.reinfer(changed, reg, cx)
    return len(changed)


_ROUND = ("float32", "float16", "float64")  # (NumPy's float dtypes; bfloat16: left as written)


def round_fills(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """A constant fill (an op declaring ``fill``) of a float dtype holds its number rounded to that dtype: the
    attribute becomes that rounded value (``1e-6`` in float32 is 8796093/8796093022208 whether the program wrote
    the decimal or the float32), so two programs' constants of one value are one term. The number of nodes
    changed (their terms inferred again: :meth:`Graph.reinfer`)."""
    import numpy as np
    changed = []
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or not op.fill or n.inputs or len(n.outputs) != 1:
            continue
        dtype = g.tensors[n.outputs[0]].dtype
        v = n.attrs.get(op.fill)
        if dtype not in _ROUND or not isinstance(v, Fraction):
            continue
        with np.errstate(over="ignore"):
            r = np.asarray(float(v), dtype=dtype)
        if not np.isfinite(r):
            continue
        exact = Fraction(float(r))
        if exact != v:
            n.attrs = dict(n.attrs, **{op.fill: exact})
            changed.append(n)
    if changed:
        g.reinfer(changed, reg, cx)
    return len(changed)


def fuse_expressions(g: Graph, reg: Registry, cx: S.Constraints, ops: set[str] | None = None,
                     other: Graph | None = None) -> int:
    """Collapse every expression an op declares it computes (:attr:`OpDef.fuses`; family 1218 states the
    identity, fuzzed) into one node of that op, where the graph spells it out op by op and its intermediate
    tensors are read only inside it (no graph output): HF's RMSNorm -- ``pow``, ``mean``, ``add``, ``rsqrt``,
    ``mul``, ``_to_copy``, ``mul`` -- is one ``aten.hf_rms_norm`` beside the kernel another program calls. Only
    the ops named in ``ops`` (default: every declaring op); with ``other`` (the program it is compared with), only
    expressions whose ops ``other`` does not all call (two HF programs keep theirs: their operators meet one by
    one, and a failure names the one). The number of expressions collapsed."""
    from .families import fused_expression
    from .lemma import EvalContext, Lemma, build_rules, check_condition, match_attrs, term_ops
    from ..ir.expr import App, Leaf, PVar
    fusers = [op for op in reg if op.fuses and (ops is None or op.name in ops)]
    if not fusers:
        return 0
    rules = []
    for op in fusers:
        for rule_text, cond, when, _ in fused_expression(op, reg):
            rules += build_rules(Lemma(1218, f"fused-expression[{op.name}]", rule_text, cond, "root", op.source,
                                       pack=op.source), reg)
    if other is not None:
        there = {n.op for n in other.nodes}
        rules = [r for r in rules if not term_ops(r.lhs, set()) <= there]
    outputs = set(g.outputs)
    changed = 0

    def gmatch(p, t: str, env: dict, inside: set) -> bool:
        """Pattern ``p`` against the computation of tensor ``t`` (variables bind tensors and attribute values)."""
        if isinstance(p, PVar):
            if p.name in env:
                return env[p.name] == Leaf(t)
            env[p.name] = Leaf(t)
            return True
        node = g.producer.get(t)
        if node is None or node.op != p.op or len(node.outputs) != 1:
            return False
        term = g.node_terms(node)[0]
        if not isinstance(term, App) or term.op != p.op or len(term.args) != len(p.args) or \
                not all(isinstance(x, Leaf) for x in term.args) or not match_attrs(p, term, env):
            return False
        inside.add(t)
        return all(gmatch(a, x.name, env, inside) for a, x in zip(p.args, term.args))

    for rule in rules:
        root_op = rule.lhs.op
        for n in list(g.nodes):
            if n.op != root_op or len(n.outputs) != 1:
                continue
            env: dict = {}
            inside: set = set()
            if not gmatch(rule.lhs, n.outputs[0], env, inside):
                continue
            inside.discard(n.outputs[0])
            tensors = {v: e.name for v, e in env.items() if isinstance(e, Leaf)}
            ctx = EvalContext(lambda leaf: g.shape(leaf.name), cx, reg.functions,
                              lambda leaf: g.tensors[leaf.name].dtype)
            if not check_condition(rule, env, ctx):
                continue
            # the tensors the pattern's own operators compute (below its root) must be read only inside it
            nodes_inside = [g.producer[t] for t in inside]
            if any(t in outputs for t in inside) or any(
                    c not in nodes_inside and c is not n for t in inside for c in g.consumers.get(t, [])):
                continue
            rhs = rule.rhs
            n.op = rhs.op
            n.inputs = [tensors[a.name] for a in rhs.args]
            n.attrs = {k: (env[v.name] if hasattr(v, "name") and v.name in env else getattr(v, "value", v))
                       for k, v in rhs.attrs}
            dead = {id(x) for x in nodes_inside}
            g.nodes = [x for x in g.nodes if id(x) not in dead]
            for t in inside:
                g.tensors.pop(t, None)
            changed += 1
            g.validate(reg, cx)
    return changed


def _apps(p):
    from ..ir.expr import App
    if isinstance(p, App):
        yield p
        for a in p.args:
            yield from _apps(a)


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
    import numpy as np
    from ..ir.ops import number_text
    lit = reg.get("hlo.literal")
    if lit is None:
        return 0
    rounded = []
    for n in g.nodes:  # a float literal holds its values rounded to its dtype (as round_fills does for fills)
        dtype = n.attrs.get("dtype") if n.op == "hlo.literal" else None
        if dtype not in _ROUND:
            continue
        vals = n.attrs["values"]
        text = ",".join(number_text(x) for x in np.asarray(
            [float(v) for v in vals.split(",") if v.strip()], dtype=np.float64).astype(dtype))
        if text != vals:
            n.attrs = dict(n.attrs, values=text)
            rounded.append(n)
    if rounded:
        g.reinfer(rounded, reg, cx)
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
        n.op, n.inputs = "hlo.literal", []
        n.attrs = dict(normalize_attrs(lit, {"shape": list(v.shape), "dtype": str(g.tensors[t].dtype),
                                             "values": ",".join(number_text(x) for x in v.reshape(-1))}, n.op))
        changed.append(n)
    if changed:  # the nodes only the folded ones read are left: dead, dropped with the graph's other dead nodes
        live = set(g.outputs)
        for n in reversed(g.nodes):
            if any(o in live for o in n.outputs) or not set(n.outputs) <= set(known):
                live.update(n.inputs)
        g.nodes = [n for n in g.nodes if not set(n.outputs) <= set(known) or any(o in live for o in n.outputs)]
        for t in list(g.tensors):
            if t in known and t not in live:
                g.tensors.pop(t, None)
        g.validate(reg, cx)
    _flat_literals(g, reg, cx)
    return len(changed)


def _flat_literals(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """A literal of more than one dim is its values (row-major: the same text) as a vector, reshaped: ``[1, 1, T]``
    key positions folded from ``arange(T)[None, None]`` and the ``[T]`` iota another program broadcasts are one
    vector, ``[1, D / 2]`` inverse frequencies folded through HF's ``[None, :]`` and through HLO's reshape one
    term. The number of literals rewritten."""
    extra = {}
    for n in g.nodes:
        if n.op != "hlo.literal" or len(n.attrs["shape"]) < 2:
            continue
        out = n.outputs[0]
        flat = _fresh(g, out, ".flat")
        g.tensors[flat] = g.tensors[out]  # (re-inferred by validate)
        shape = list(n.attrs["shape"])
        n.attrs = dict(n.attrs, shape=[math.prod(shape)])
        n.outputs = [flat]
        node = Node("core.reshape", [flat], [out], {"shape": tuple(shape)}, _suffixed(n.name, ".shape"), n.loc,
                    n.func, n.module)
        node._declared = {}  # type: ignore[attr-defined]
        extra[id(n)] = node
    if extra:
        g.nodes = [y for x in g.nodes for y in ((x, extra[id(x)]) if id(x) in extra else (x,))]
        g.validate(reg, cx)
    return len(extra)


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
            p.op, p.inputs, p.attrs = "aten.where.self", [m, s, c], {}
            dropped.append(wn)
            done.append(f"{p.loc or p.name}: the mask added to the scores read as selected in their place "
                        f"(every row keeps a key; scores within [-{bound}, {bound}])")
            break
    if done:  # (the additive masks' wheres, and what only they read, are read by nothing now: dropped)
        g.validate(reg, cx)  # (readers' table rebuilt)
        gone: set[int] = set()
        todo = list(dropped)
        while todo:
            n = todo.pop()
            if id(n) in gone or any(o in g.outputs for o in n.outputs) or \
                    any(id(r) not in gone for o in n.outputs for r in g.consumers.get(o, [])):
                continue
            gone.add(id(n))
            todo += [g.producer[i] for i in n.inputs if i in g.producer]
        g.nodes = [n for n in g.nodes if id(n) not in gone]
        g.validate(reg, cx)
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
        scaled = _fresh(g, x, ".scaled")
        g.add_node("aten.mul.Scalar", [x], [scaled], {"other": c}, name=_fresh_name(g, m.name + ".into"), loc=m.loc,
                   func=m.func, module=m.module)
        p.inputs = [scaled] + p.inputs[1:]
        m.op, m.inputs, m.attrs = "core.identity", [m.inputs[0]], {}
        changed += 1
    if changed:
        g.validate(reg, cx)
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


def _fresh_name(g: Graph, name: str) -> str:
    names = {n.name for n in g.nodes}
    while name in names:
        name += "_"
    return name
