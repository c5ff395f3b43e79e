"""Certificate replay: an independent numeric check of a verdict with the NumPy references.

Random G_d inputs are drawn, made consistent with R_i (a replicated input gets the same values on every
rank), the G_s inputs are built through R_i, both graphs run, and every relation found -- R_o and the
intermediate ones -- is evaluated and compared. For a "does not refine" verdict the failing operator's
output is compared with the closest reconstruction from the G_d tensors explored for it.

Memory. Both graphs and the checks run as one schedule (:func:`schedule`): G_s in topological order, and
after each G_s operator the checks its outputs complete, each preceded by the G_d operators (and G_s
inputs) it needs and no others. A tensor is freed after its last reader, operator or check, so what is
held at any time is what some later step reads.

Dtypes (``dtype``). ``"graph"`` (the default): a float tensor is stored in its graph's dtype -- float16,
float32, float64; bfloat16 as float32 (NumPy has no bfloat16; every rounding to bfloat16 is skipped) --
and an operator computes on float32 copies of float16 inputs, its float results rounded to the output's
dtype: the arithmetic of mixed-precision hardware (16-bit storage, 32-bit accumulation).
``"float32"`` / ``"float64"``: every float tensor in that dtype. Integer and bool tensors are kept exact.
Float inputs are drawn from N(0, 1) -- N(0, 1/16) where stored in float16, whose largest value (65504) a
production-width layer of unit-scale products exceeds.

Tolerances (:func:`tolerance`). float64: elementwise, |got - want| <= 1e-8 + 1e-6 |want|. A narrower
computation must keep half its significant digits: |got - want| <= sqrt(eps) (|want| + rms(want)), eps the
machine epsilon of the coarsest float dtype either value was computed through (an error made in float16
stays in its float32 copy): float16 2**-5 (3 %), float32 2**-11.5 (3.5e-4). The rms term measures an error
against the tensor's scale (a sum of products carries an error of its terms' size, however small the sum);
sqrt(eps) leaves room for the rounding errors two evaluation orders accumulate and for operations that
amplify them (an exponential multiplies an absolute error of its input, of the order of sqrt(n) after a
length-n reduction of unit-scale values, into a relative one), while a wrong result differs in its
leading digits. Integer and bool tensors must be equal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import GraphGuardError
from ..ir import scalar as S
from ..ir.expr import App, Leaf, Term, base_name, flat_args, leaves, rank_of, to_text
from ..ir.graph import Graph, Node
from ..ir.ops import Registry
from ..ir.relation import RelationFile
from ..ir.semantics import term_eval
from .result import VerifyResult

DTYPES = ("graph", "float32", "float64")  # the replay's dtype choices (module docstring)
RTOL, ATOL = 1e-6, 1e-8  # float64: elementwise
F16_INPUT_STD = 0.25  # float inputs stored in float16: N(0, 1/16) (module docstring)
CHUNK = 1 << 20  # elements compared at a time (float64 temporaries of 8 MiB)


class ReplayError(GraphGuardError):
    pass


def data_symbols(g: Graph, reg: Registry) -> set[str]:
    """Symbols of sizes the data decides (``nonzero``'s count): bound while the graph runs, not chosen."""
    out = set()
    for n in g.nodes:
        op = reg.get(n.op)
        for a, _ in (op.data_sizes if op is not None else ()):
            out |= S.free_symbols(n.attrs[a])
    return out


def symbol_values(g_s: Graph, g_d: Graph, rel: RelationFile, data: set[str] = frozenset()) -> dict[str, int]:
    cx = rel.constraints()
    for n in data:
        cx.symbols.pop(n, None)
    names = set()
    for g in (g_s, g_d):
        for t in g.tensors.values():
            for d in t.shape:
                names |= S.free_symbols(d)
    names -= data
    for n in names - set(cx.symbols):
        cx.declare(S.SymbolInfo(n, 1))
    if not names:
        return {}
    # prefer values >= 4 (degenerate sizes hide bugs), else the smallest allowed
    for lo in (4, 1):
        trial = S.Constraints()
        for info in cx.symbols.values():
            trial.declare(S.SymbolInfo(info.name, max(info.min or 1, lo), info.max, info.multiple_of))
        try:
            return trial.model()
        except ValueError:
            continue
    raise ReplayError("no values satisfy the symbol constraints")


def _shape(g: Graph, t: str, sv: dict) -> tuple[int, ...]:
    return tuple(S.substitute(d, sv) for d in g.tensors[t].shape)


def _concrete_attrs(t: Term, sv: dict, keep: frozenset = frozenset()) -> Term:
    """``t`` with its attributes' symbols given their values (``keep``: attributes left as they are)."""
    if isinstance(t, Leaf):
        return t
    attrs = []
    for k, v in t.attrs:
        if k in keep:
            attrs.append((k, v))
            continue
        if isinstance(v, tuple):
            v = tuple(S.substitute(x, sv) if not isinstance(x, (str, float)) else x for x in v)
        elif not isinstance(v, (str, float, int)) and hasattr(v, "free_symbols"):
            v = S.substitute(v, sv)
        attrs.append((k, v))
    return App(t.op, tuple(_concrete_attrs(a, sv) for a in t.args), tuple(attrs))


def _storage(dtype: str, mode: str):
    """The NumPy dtype a float tensor of graph dtype ``dtype`` is stored in under ``mode``; None for integer
    and bool tensors (kept as the references compute them)."""
    if not dtype.startswith(("float", "bfloat", "half", "double")):
        return None
    if mode == "float64":
        return np.dtype(np.float64)
    if mode == "float32":
        return np.dtype(np.float32)
    if dtype in ("float16", "half"):
        return np.dtype(np.float16)
    return np.dtype(np.float64 if dtype in ("float64", "double") else np.float32)


def _store(value, dtype: str, mode: str) -> np.ndarray:
    """A reference's result as stored: float results rounded to the tensor's float dtype."""
    value = np.asarray(value)
    st = _storage(dtype, mode)
    if st is not None and value.dtype.kind == "f" and value.dtype != st:
        value = value.astype(st)
    return value


def _widen(a: np.ndarray) -> np.ndarray:
    """The operand an operator computes on: float16 as float32."""
    return a.astype(np.float32) if a.dtype == np.float16 else a


def _random(shape, dtype: str, rng, mode: str) -> np.ndarray:
    if "int" in dtype:
        return rng.integers(0, 4, size=shape).astype(np.int64)
    if "bool" in dtype or dtype == "pred":
        return rng.integers(0, 2, size=shape).astype(bool)
    st = _storage(dtype, mode) or np.dtype(np.float64)
    if st == np.float64:
        return rng.standard_normal(shape)
    x = rng.standard_normal(shape, dtype=np.float32)
    if st == np.float16:
        x *= F16_INPUT_STD
    return x.astype(st, copy=False)


def _assign(t: Term, value: np.ndarray, env: dict, fixed: dict, reg: Registry, mask=None) -> None:
    """Make ``t`` evaluate to ``value`` (where ``mask`` is true; everywhere when None) by setting G_d inputs
    (clean expressions are invertible enough). ``fixed`` holds, per G_d input, which of its elements are
    already set (True: all): slices of one tensor may be set by different relations, an element only once."""
    value = np.asarray(value)
    if isinstance(t, Leaf):
        old = fixed.get(t.name)
        cur = env[t.name]
        if old is not None:
            both = old if mask is None else old & mask
            if both is True:
                agree = compare(cur, value.astype(cur.dtype))[1] <= 1
            else:
                agree = not both.any() or compare(cur[both], value[both].astype(cur.dtype))[1] <= 1
            if not agree:
                raise ReplayError(f"the input relation constrains {t.name} twice inconsistently")
        if mask is None:
            cur[...] = value
            fixed[t.name] = True
        else:
            cur[mask] = value[mask]
            fixed[t.name] = mask if old is None else old | mask
        return
    op, a = t.op, t.attrd
    if op == "core.concat":
        sizes = np.cumsum([term_eval(x, env.__getitem__, reg).shape[a["dim"]] for x in t.args])[:-1]
        masks = [None] * len(t.args) if mask is None else np.split(mask, sizes, axis=a["dim"])
        for x, p, m in zip(t.args, np.split(value, sizes, axis=a["dim"]), masks):
            _assign(x, p, env, fixed, reg, m)
    elif op == "core.slice":
        cur = np.array(term_eval(t.args[0], env.__getitem__, reg), copy=True)
        m = np.zeros(cur.shape, bool)
        idx = [slice(None)] * cur.ndim
        idx[a["dim"]] = slice(a["start"], a["end"])
        cur[tuple(idx)] = value
        m[tuple(idx)] = True if mask is None else mask
        _assign(t.args[0], cur, env, fixed, reg, m)
    elif op == "core.permute":
        inv = np.argsort(a["dims"])
        _assign(t.args[0], np.transpose(value, inv), env, fixed, reg, None if mask is None else np.transpose(mask, inv))
    elif op == "core.reshape":
        shape = term_eval(t.args[0], env.__getitem__, reg).shape
        _assign(t.args[0], np.reshape(value, shape), env, fixed, reg, None if mask is None else np.reshape(mask, shape))
    elif op == "core.identity":
        _assign(t.args[0], value, env, fixed, reg, mask)
    elif op == "core.sum":
        def is_set(x):
            return any(fixed.get(n) is True or (fixed.get(n) is not None and fixed[n].any()) for n in leaves(x))
        keep, free = t.args  # keep one summand as it is (committing it), solve for the other
        if is_set(t.args[1]) and not is_set(t.args[0]):
            keep, free = t.args[1], t.args[0]
        other = term_eval(keep, env.__getitem__, reg)
        _assign(keep, other, env, fixed, reg, mask)
        _assign(free, value - other, env, fixed, reg, mask)
    elif op == "core.max":
        for x in t.args:
            _assign(x, value, env, fixed, reg, mask)
    else:
        raise ReplayError(f"cannot build inputs through a relation using {op}")


def run_node(g: Graph, n: Node, env: dict, reg: Registry, sv: dict, mode: str | None = None,
             release: frozenset = frozenset()) -> None:
    """Compute ``n``'s outputs into ``env``; a size the data decides gets its value here (``sv``), where it is
    first computed -- and a size two graphs share (proved equal) must come out the same in both. ``mode``: a
    dtype choice (module docstring); None: the references' results as they are. ``release``: inputs read
    here for the last time, dropped from ``env`` once read."""
    op = reg.get(n.op)
    sized = dict(op.data_dims(n.attrs)) if op is not None else {}
    free = {a for a in sized if S.free_symbols(n.attrs[a]) - set(sv)}
    held: dict = {}
    widen = mode is not None and not (op is not None and op.clean)  # moving data is exact in any dtype

    def get(t):
        if t not in held:
            held[t] = _widen(env[t]) if widen else env[t]
            if t in release:
                del env[t]
        return held[t]
    memo: dict = {}  # one operator's outputs share their subterms
    values = [term_eval(_concrete_attrs(term, sv, frozenset(free)), get, reg, memo) for term in g.node_terms(n)]
    held.clear()
    memo.clear()
    for i, o in enumerate(n.outputs):
        env[o] = values[i] if mode is None else _store(values[i], g.tensors[o].dtype, mode)
        values[i] = None
    for a, dim in sized.items():
        x, got = n.attrs[a], env[n.outputs[0]].shape[dim]
        if a in free and isinstance(x, S.sp.Symbol):
            sv[x.name] = got
        elif S.substitute(x, sv) != got:
            raise ReplayError(f"{g.where(n)}: size {S.text(x)} is {got} here, {S.substitute(x, sv)} elsewhere")


def run_graph(g: Graph, env: dict, reg: Registry, sv: dict) -> dict:
    """Run all of ``g`` on ``env`` (every tensor kept), the references' results as they are."""
    for n in g.topo_order():
        run_node(g, n, env, reg, sv)
    return env


# -- comparison ------------------------------------------------------------------------------------

def _pieces(a: np.ndarray):
    """``a`` flattened, in float64 pieces of CHUNK elements."""
    a = a.reshape(-1)
    for i in range(0, a.size, CHUNK):
        yield a[i:i + CHUNK].astype(np.float64)


def _absdiff(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # equal infinities (masks) and nan against nan differ by 0
        d = np.where((x == y) | (np.isnan(x) & np.isnan(y)), 0.0, np.abs(x - y))
    return np.where(np.isnan(d), np.inf, d)


@dataclass(frozen=True)
class Tolerance:
    """|got - want| <= atol + rtol (|want| + scale), elementwise."""
    rtol: float
    atol: float
    scale: float

    def __str__(self) -> str:
        return f"atol {self.atol:.3g} + rtol {self.rtol:.3g} (|want| + {self.scale:.3g})"


def _eps(a: np.ndarray) -> float:
    return float(np.finfo(a.dtype).eps) if a.dtype.kind == "f" else 0.0


def precision(g: Graph, mode: str) -> dict[str, float]:
    """Per tensor, the machine epsilon of the coarsest float dtype it was computed through (an error made
    in float16 stays in the float32 copy of the result)."""
    def eps(t):
        st = _storage(g.tensors[t].dtype, mode)
        return float(np.finfo(st).eps) if st is not None else 0.0
    out = {t: eps(t) for t in g.inputs}
    for n in g.topo_order():
        came = max((out[i] for i in n.inputs), default=0.0)
        for o in n.outputs:
            out[o] = max(eps(o), came)
    return out


def tolerance(got: np.ndarray, want: np.ndarray, eps: float = 0.0) -> Tolerance:
    """How far ``got`` may be from ``want`` (module docstring): from the coarsest float dtype they were
    computed through (``eps``, at least their own dtypes') and want's scale."""
    if got.dtype.kind != "f" and want.dtype.kind != "f":
        return Tolerance(0.0, 0.0, 0.0)  # integers, bools: exact
    eps = max(eps, _eps(got), _eps(want))
    if eps <= np.finfo(np.float64).eps:
        return Tolerance(RTOL, ATOL, 0.0)
    ss, n = 0.0, 0
    for x in _pieces(want):
        x = x[np.isfinite(x)]
        ss, n = ss + float(np.dot(x, x)), n + x.size
    rms = (ss / n) ** 0.5 if n else 0.0
    tiny = float(np.finfo(np.float16 if eps >= np.finfo(np.float16).eps else np.float32).tiny)
    return Tolerance(eps ** 0.5, tiny, rms)


def compare(got: np.ndarray, want: np.ndarray, eps: float = 0.0) -> tuple[float, float, Tolerance]:
    """(max |got - want|, the largest |got - want| as a fraction of its tolerance, the tolerance):
    the relation holds numerically when the fraction is at most 1."""
    tol = tolerance(got, want, eps)
    if got.shape != want.shape:
        return float("inf"), float("inf"), tol
    worst, frac = 0.0, 0.0
    for x, y in zip(_pieces(got), _pieces(want)):
        d = _absdiff(x, y)
        if d.size:
            worst = max(worst, float(np.max(d)))
            with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
                allowed = tol.atol + tol.rtol * (np.abs(y) + tol.scale)
                f = np.where(d == 0, 0.0, d / allowed)
            frac = max(frac, float(np.max(np.where(np.isnan(f), np.inf, f))))
    return worst, frac, tol


# -- the schedule ----------------------------------------------------------------------------------

@dataclass
class Check:
    """A computation on finished tensors: ``s`` of G_s and ``d`` of G_d; ``run(s_env, d_env)`` reads them."""
    s: tuple[str, ...]
    d: tuple[str, ...]
    run: Callable[[dict, dict], None]


@dataclass
class Step:
    kind: str  # "s": a G_s operator, "d": a G_d operator, "in": a G_s input built through R_i, "check"
    item: object  # the Node, the input's name, or the Check
    reads: tuple[tuple[str, str], ...]  # ("s" | "d", tensor)
    writes: tuple[tuple[str, str], ...]


def _attr_symbols(n) -> set[str]:
    out: set[str] = set()
    for v in n.attrs.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if not isinstance(x, (str, float, int)) and hasattr(x, "free_symbols"):
                out |= S.free_symbols(x)
    return out


def binders(g: Graph, reg: Registry) -> dict[str, list]:
    """For each node, the nodes that bind the data-decided sizes its attributes read (a fill shaped like
    a slice at bounds read from tensors reads nothing that orders it after that slice)."""
    first: dict[str, object] = {}
    for n in g.topo_order():
        op = reg.get(n.op)
        for a, _ in (op.data_sizes if op is not None else ()):
            for x in S.free_symbols(n.attrs[a]):
                first.setdefault(x, n)
    if not first:
        return {}
    return {n.name: [first[x] for x in sorted(_attr_symbols(n)) if x in first and first[x] is not n]
            for n in g.topo_order()}


def replay_order(g: Graph, reg: Registry, need: dict | None = None) -> list:
    """``g``'s topological order with every node after the binders of the data-decided sizes it reads (where
    that makes no cycle); ``need``: :func:`binders` of ``g`` where already known."""
    order = g.topo_order()
    need = binders(g, reg) if need is None else need
    if not need:
        return order
    done: set[str] = set(g.inputs)
    placed: set[str] = set()
    out, left = [], list(order)
    while left:
        pick = next((n for n in left if all(i in done for i in n.inputs)
                     and all(b.name in placed for b in need.get(n.name, ()))), None)
        if pick is None:  # (a binder that reads what needs it: the plain order)
            pick = next(n for n in left if all(i in done for i in n.inputs))
        left.remove(pick)
        out.append(pick)
        placed.add(pick.name)
        done.update(pick.outputs)
    return out


def schedule(g_s: Graph, g_d: Graph, inputs: dict[str, Term], checks: list[Check], whole: bool = True,
             reg: Registry | None = None) -> list[Step]:
    """G_s in topological order; after each operator the checks it completes (those of a G_s input before its
    first reader), each preceded by what it needs of G_d (in G_d's order) and of the G_s inputs (``inputs``:
    each one's expression over G_d inputs); then the rest of G_d. A G_s input is built before its first
    reader. ``whole=False``: only the operators the checks need."""
    steps: list[Step] = []
    have_s: set[str] = set()
    have_d: set[str] = set(g_d.inputs)
    d_need = binders(g_d, reg) if reg is not None else {}
    d_nodes = replay_order(g_d, reg, d_need) if reg is not None else g_d.topo_order()
    d_order = {n.name: i for i, n in enumerate(d_nodes)}

    def need_s(names):
        for t in names:
            if t not in have_s and t in inputs:
                have_s.add(t)
                steps.append(Step("in", t, tuple(("d", x) for x in sorted(leaves(inputs[t]))), (("s", t),)))

    def need_d(names):
        nodes, todo = {}, [t for t in names if t not in have_d]
        while todo:
            n = g_d.producer[todo.pop()]
            if n.name not in nodes:
                nodes[n.name] = n
                todo.extend(i for i in n.inputs if i not in have_d)
                todo.extend(o for b in d_need.get(n.name, ()) for o in b.outputs[:1] if o not in have_d)
        for n in sorted(nodes.values(), key=lambda n: d_order[n.name]):
            have_d.update(n.outputs)
            steps.append(Step("d", n, tuple(("d", i) for i in n.inputs), tuple(("d", o) for o in n.outputs)))

    order = replay_order(g_s, reg) if reg is not None else g_s.topo_order()
    if not whole:
        cone = _upstream(g_s, {t for c in checks for t in c.s})
        order = [n for n in order if cone & set(n.outputs)]
    s_pos = {o: i for i, n in enumerate(order) for o in n.outputs}  # checked after operator i
    for i, n in reversed(list(enumerate(order))):
        s_pos.update((t, i - 0.5) for t in n.inputs if t in inputs)  # an input's check: before its first reader
    ready: dict[float, list[Check]] = {}
    for c in checks:
        ready.setdefault(max((s_pos.get(t, -1) for t in c.s), default=-1), []).append(c)

    def emit(c: Check):
        need_s(c.s)
        need_d(c.d)
        steps.append(Step("check", c, tuple(("s", t) for t in c.s) + tuple(("d", t) for t in c.d), ()))

    for c in ready.get(-1, ()):
        emit(c)
    for i, n in enumerate(order):
        for c in ready.get(i - 0.5, ()):
            emit(c)
        need_s(n.inputs)
        have_s.update(n.outputs)
        steps.append(Step("s", n, tuple(("s", t) for t in n.inputs), tuple(("s", o) for o in n.outputs)))
        for c in ready.get(i, ()):
            emit(c)
    if whole:
        need_d(g_d.tensors)
    return steps


def _upstream(g: Graph, tensors: set[str]) -> set[str]:
    """``tensors`` and every tensor of ``g`` they are computed from."""
    seen, todo = set(tensors), list(tensors)
    while todo:
        n = g.producer.get(todo.pop())
        for i in n.inputs if n is not None else ():
            if i not in seen:
                seen.add(i)
                todo.append(i)
    return seen


def last_reads(steps: list[Step]) -> dict[tuple[str, str], int]:
    """For each tensor, the step after which it is freed: its last reader's (or, unread, its writer's)."""
    last: dict[tuple[str, str], int] = {}
    for i, st in enumerate(steps):
        for k in st.writes:
            last.setdefault(k, i)
        for k in st.reads:
            last[k] = i
    return last


# -- replay ----------------------------------------------------------------------------------------

def _symbol_needs(e: Term, g: Graph, reg: Registry, data: set[str]) -> list[str]:
    """The outputs of the first ``g`` operators that bind the data-decided sizes in ``e``'s attributes."""
    names: set[str] = set()

    def walk(t):
        if isinstance(t, App):
            for _, v in t.attrs:
                for x in (v if isinstance(v, tuple) else (v,)):
                    if not isinstance(x, (str, float, int)) and hasattr(x, "free_symbols"):
                        names.update(S.free_symbols(x) & data)
            for a in t.args:
                walk(a)
    walk(e)
    out = []
    for n in g.topo_order() if names else ():
        op = reg.get(n.op)
        bound = {s for a, _ in (op.data_sizes if op is not None else ()) for s in S.free_symbols(n.attrs[a])}
        if bound & names:
            out.append(n.outputs[0])
            names -= bound
    return out


def _inputs(g_s: Graph, g_d: Graph, rel: RelationFile, reg: Registry, sv: dict, seed: int,
            dtype: str) -> tuple[dict, dict]:
    """Random G_d inputs, stored as for ``dtype``, made consistent with R_i (an input with a stated value range
    drawn in it), and each G_s input's expression over them (built when first read)."""
    rng = np.random.default_rng(seed)
    d_env = {t: _random(_shape(g_d, t, sv), g_d.tensors[t].dtype, rng, dtype) for t in g_d.inputs}
    fixed: dict = {}  # G_d input -> which of its elements a relation has set
    first = {}
    for name in g_s.inputs:
        exprs = [_concrete_attrs(e, sv) for e in rel.inputs[name]]
        val = term_eval(exprs[0], d_env.__getitem__, reg)
        if name in rel.ranges:  # values drawn in the input's stated range (ranges:)
            val = rng.integers(*rel.ranges[name], size=np.shape(val)).astype(np.asarray(val).dtype)
        _assign(exprs[0], val, d_env, fixed, reg)  # the first relation: marks the parts it reads as set
        for e in exprs[1:]:
            _assign(e, val, d_env, fixed, reg)
        first[name] = exprs[0]
        del val
    return d_env, first


def _execute(g_s: Graph, g_d: Graph, reg: Registry, sv: dict, dtype: str, d_env: dict, first: dict,
             checks: list[Check], whole: bool = True) -> dict:
    """Run the schedule in ``dtype`` (the G_d inputs it reads converted to it), freeing each tensor after
    its last reader; returns what it held at most."""
    steps = schedule(g_s, g_d, first, checks, whole, reg)
    last = last_reads(steps)
    env = {"s": {}, "d": d_env}
    for t in list(d_env):
        if ("d", t) not in last:
            del d_env[t]  # read by nothing
        else:
            d_env[t] = _store(d_env[t], g_d.tensors[t].dtype, dtype)
    peak_n = peak_b = 0
    stored = {a.dtype.name for a in d_env.values() if a.dtype.kind == "f"}
    for i, st in enumerate(steps):
        if st.kind in ("s", "d"):
            done = frozenset(t for side, t in st.reads if last[side, t] == i)
            run_node(g_s if st.kind == "s" else g_d, st.item, env[st.kind], reg, sv, dtype, done)
            stored.update(env[st.kind][o].dtype.name for o in st.item.outputs if env[st.kind][o].dtype.kind == "f")
        elif st.kind == "in":
            env["s"][st.item] = _store(term_eval(first[st.item], d_env.__getitem__, reg), g_s.tensors[st.item].dtype,
                                       dtype)
        else:
            st.item.run(env["s"], env["d"])
        n = len(env["s"]) + len(env["d"])
        if n >= peak_n or i % 16 == 0:
            peak_b = max(peak_b, sum(a.nbytes for e in env.values() for a in e.values()))
        peak_n = max(peak_n, n)
        for side, t in st.reads + st.writes:
            if last.get((side, t)) == i:
                env[side].pop(t, None)
    return {"steps": len(steps), "peak_tensors": peak_n, "peak_bytes": peak_b, "stored_dtypes": sorted(stored)}


def _relation_checks(pairs, g_s: Graph, g_d: Graph, reg: Registry, sv: dict, dtype: str, data: set,
                     out: dict) -> list[Check]:
    """One check per (G_s tensor, expression over G_d): ``out[(t, e)]`` = compare's result."""
    s_eps, d_eps = precision(g_s, dtype), precision(g_d, dtype)

    def check(t: str, e: Term) -> Check:
        def run(s_env, d_env):
            got = term_eval(_concrete_attrs(e, sv), d_env.__getitem__, reg)
            out[t, e] = compare(got, s_env[t], max([s_eps[t]] + [d_eps[x] for x in leaves(e)]))
        return Check((t,), tuple(sorted(leaves(e))) + tuple(_symbol_needs(e, g_d, reg, data)), run)
    return [check(t, e) for t, e in pairs]


def replay(result: VerifyResult, g_s: Graph, g_d: Graph, rel: RelationFile, reg: Registry, seed: int = 0,
           dtype: str = "graph") -> dict:
    """Check ``result`` numerically; fills ``result.replay`` (and ``result.failure.replay``). ``dtype``: one of
    DTYPES; a relation beyond a narrower dtype's tolerance is computed again in float64 from the same inputs
    (only the operators it needs) and is a mismatch only if it misses there too (``rechecked``: those that held).
    The report counts the tensors held at once (``peak_tensors``, ``peak_bytes``) and names the float dtypes
    tensors were stored in (``stored_dtypes``)."""
    if dtype not in DTYPES:
        raise ReplayError(f"unknown replay dtype '{dtype}' (choose one of {', '.join(DTYPES)})")
    data = data_symbols(g_s, reg) | data_symbols(g_d, reg)
    sv = symbol_values(g_s, g_d, rel, data)
    d_env, first = _inputs(g_s, g_d, rel, reg, sv, seed, dtype)
    rels = result.relations if result.relations else {}
    pairs = [(t, e) for t, exprs in rels.items() for e in exprs]
    pairs += [(t, e) for t, exprs in result.r_o.items() for e in exprs if (t, e) not in pairs]
    outcome: dict = {}
    checks = _relation_checks(pairs, g_s, g_d, reg, sv, dtype, data, outcome)

    found: dict = {}  # failure evidence, computed when its tensors exist
    expected: dict = {}  # (G_s tensor, expected relation) -> compare's result
    f = result.failure
    all_missing = [m for m in (result.expect or {}).get("missing") or [] if m[0] in g_s.tensors]
    after: set = set()
    # the failing operator's outputs (each: a top-k's values may match where its indices do not), or the output
    # left as partial results
    outs = ([f.partial_output] if f.partial_output else list(f.outputs)) if f is not None and f.outputs else []
    outs = [o for o in outs if o in g_s.tensors]
    out = outs[0] if outs else None
    if outs:
        s_eps, d_eps = precision(g_s, dtype), precision(g_d, dtype)
        # an output left as partial results: compared with what the ranks hold, R_o with each sum or max taken
        # at one of its operands (never with a sum of the ranks' tensors)
        held = [_concrete_attrs(_one_operand(e, k), sv) for e in result.r_o.get(out, [])
                for k in range(_most_operands(e))] if f.partial_output else None
        pool = _pool(result, g_s, g_d, same_op=held is None)
        for o in outs:
            def closest(s_env, d_env, o=o, eps=max([s_eps[o]] + [d_eps[x] for x in pool])):
                found.setdefault("closest", {})[o] = _closest(o, pool, s_env, d_env, eps, held, reg)
            checks.append(Check((o,), tuple(pool), closest))
        after = _downstream(g_s, f.outputs)
        expectations = {}
        for m in (m for m in all_missing if m[0] in after):
            expectations[m[0], next(e for e in rel.expect[m[0]] if to_text(e) == m[1])] = m[:2]
        checks += _relation_checks(expectations, g_s, g_d, reg, sv, dtype, data, expected)

    ran = _execute(g_s, g_d, reg, sv, dtype, d_env, first, checks)
    beyond = [p for p in pairs if outcome[p][1] > 1]
    rechecked = []
    if beyond and dtype != "float64":  # rounding, or a relation that does not hold?
        sv64 = symbol_values(g_s, g_d, rel, data)
        exact: dict = {}
        d64, first64 = _inputs(g_s, g_d, rel, reg, sv64, seed, dtype)  # the same values, in float64 below
        _execute(g_s, g_d, reg, sv64, "float64", d64, first64,
                 _relation_checks(beyond, g_s, g_d, reg, sv64, "float64", data, exact), whole=False)
        rechecked = [f"{t} = {to_text(e)}" for t, e in beyond if exact[t, e][1] <= 1]
        beyond = [p for p in beyond if exact[p][1] > 1]
    mismatches = [f"{t} = {to_text(e)}: max |diff| {outcome[t, e][0]:.3g} beyond {outcome[t, e][2]}"
                  for t, e in beyond]
    worst = max(pairs, key=lambda p: outcome[p][1], default=None)
    report = {"ok": not mismatches, "checked": len(pairs),
              "max_abs_diff": max((outcome[p][0] for p in pairs), default=0.0),
              "tol_ratio": outcome[worst][1] if worst else 0.0,
              "closest_to_tolerance": f"{worst[0]} = {to_text(worst[1])}" if worst else None,
              "seed": seed, "dtype": dtype, "mismatches": mismatches, "rechecked": rechecked, "symbols": sv, **ran}
    if "closest" in found:
        # the output furthest from every reconstruction (one with no G_d tensor of its shape only if all are so)
        out = max(found["closest"], key=lambda o: (found["closest"][o]["max_abs_diff"] != float("inf"),
                                                   found["closest"][o]["max_abs_diff"], -outs.index(o)))
        f.replay = found["closest"][out]
        missing = [m for m in all_missing if m[0] == out]
        if not missing and f.replay["max_abs_diff"] == float("inf"):
            # no G_d tensor has the failing tensor's shape (e.g. a batch sharded over one axis of a 2-D mesh,
            # where concatenating every rank's piece is too long): the first expectation R_o misses for a G_s
            # output computed from the failing operator's outputs (where the failure shows)
            order = {t: i for i, t in enumerate(g_s.outputs)}
            missing = sorted((m for m in all_missing if m[0] in after),
                             key=lambda m: order.get(m[0], len(order)))[:1]
        if missing:  # the failure is an expectation: how far is the expected relation from the specification?
            t, text = missing[0][:2]
            d, frac, _ = next(v for (u, e), v in expected.items() if u == t and to_text(e) == text)
            f.replay = {"output": t, "candidate": f"{text} (expected)", "max_abs_diff": d, "tol_ratio": frac}
    result.replay = report
    return report


def _downstream(g: Graph, tensors: list[str]) -> set[str]:
    """The tensors of ``g`` computed from ``tensors`` (and those themselves)."""
    seen, todo = set(tensors), list(tensors)
    while todo:
        for n in g.consumers.get(todo.pop(), ()):
            for o in n.outputs:
                if o not in seen:
                    seen.add(o)
                    todo.append(o)
    return seen


def _pool(result: VerifyResult, g_s: Graph, g_d: Graph, same_op: bool = True) -> list[str]:
    """The G_d tensors a failing operator's output is compared with: those explored for it and (``same_op``)
    the outputs of G_d operators of its kind (every G_d tensor when there are none)."""
    f = result.failure
    node = g_s.producer.get(f.outputs[0])
    pool = set(f.explored)
    if same_op:
        pool |= {o for n in g_d.nodes if node is not None and n.op == node.op for o in n.outputs}
    return sorted(pool or g_d.tensors)


PARTIAL_OPS = frozenset({"core.sum", "core.max"})


def _most_operands(e: Term) -> int:
    """The most operands of a cross-rank sum or max in ``e`` (1 if none)."""
    if isinstance(e, Leaf):
        return 1
    own = len(flat_args(e)) if e.op in PARTIAL_OPS else 1
    return max([own] + [_most_operands(a) for a in e.args])


def _one_operand(e: Term, k: int) -> Term:
    """``e`` with each sum or max replaced by its ``k``-th operand (modulo its count): one rank's share."""
    if isinstance(e, Leaf):
        return e
    if e.op in PARTIAL_OPS:
        xs = flat_args(e)
        return _one_operand(xs[k % len(xs)], k)
    return App(e.op, tuple(_one_operand(a, k) for a in e.args), e.attrs)


def _closest(out: str, pool: list[str], s_env: dict, d_env: dict, eps: float, held: list[Term] | None = None,
             reg: Registry | None = None) -> dict:
    """How far the failing operator's output is from the best simple reconstruction out of G_d (``held``: the
    terms an output left as partial results is held as by the ranks; then no sum of the ranks' tensors)."""
    want = s_env[out]
    groups: dict[str, list[str]] = {}
    for t in sorted(pool, key=lambda x: (base_name(x), rank_of(x) or 0)):
        groups.setdefault(base_name(t), []).append(t)
    best = None
    for h in held or ():
        a = term_eval(h, d_env.__getitem__, reg)
        if a.shape == want.shape:
            d, frac, _ = compare(a, want, eps)
            if best is None or d < best[1]:
                best = (to_text(h), d, frac)
    for base, ts in groups.items():
        arrs = [d_env[t] for t in ts]
        cands = [(t, a) for t, a in zip(ts, arrs)]
        if len(ts) > 1 and all(a.ndim == want.ndim for a in arrs):
            for d in range(want.ndim):
                try:
                    cands.append((f"concat({', '.join(ts)}, dim={d})", np.concatenate(arrs, axis=d)))
                except ValueError:
                    pass
            if all(a.shape == arrs[0].shape for a in arrs) and held is None:
                cands.append((f"sum({', '.join(ts)})", np.sum(arrs, axis=0)))
                if arrs[0].ndim == 2 and want.shape == tuple(len(arrs) * n for n in arrs[0].shape):
                    # the ranks' tensors as the diagonal blocks (what sharding both operands computes)
                    diag = np.zeros(want.shape, dtype=np.result_type(*arrs))
                    r0, c0 = arrs[0].shape
                    for i, a in enumerate(arrs):
                        diag[i * r0:(i + 1) * r0, i * c0:(i + 1) * c0] = a
                    cands.append((f"block_diag({', '.join(ts)})", diag))
        for text, a in cands:
            if a.shape == want.shape:
                d, frac, _ = compare(a, want, eps)
                if best is None or d < best[1]:
                    best = (text, d, frac)
    if best is None:
        return {"output": out, "candidate": "(no G_d tensor of a matching shape)", "max_abs_diff": float("inf"),
                "tol_ratio": float("inf")}
    return {"output": out, "candidate": best[0], "max_abs_diff": best[1], "tol_ratio": best[2]}
