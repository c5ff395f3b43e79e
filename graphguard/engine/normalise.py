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
"""
from __future__ import annotations

from fractions import Fraction

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


def drop_identities(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """Turn every op applied to its identity element into ``core.identity`` of the other operand; the number
    of nodes changed (checked again: :meth:`Graph.reinfer`)."""
    changed, dropped = [], []
    for n, op, out in _binary_nodes(g, reg, "identity"):
        for pos, value, fixed in op.identity:
            other = g.tensors[n.inputs[1 - pos]]
            if any(number(n.attrs.get(k)) != v for k, v in fixed.items()):
                continue
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
        rows = _suffixed(final, ".rows")
        while rows in g.tensors:
            rows = _suffixed(rows, "_")
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


def _suffixed(name: str, suffix: str) -> str:
    """``name`` with ``suffix`` before its rank (``y@1`` -> ``y.rows@1``): a G_d tensor stays ``NAME@RANK``."""
    base, at, rank = name.rpartition("@")
    return f"{base}{suffix}@{rank}" if at and rank.isdigit() else name + suffix


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
