"""Certificate replay: an independent numeric check of a verdict with the NumPy references.

Random G_d inputs are drawn, made consistent with R_i (a replicated input gets the same values on every
rank), the G_s inputs are built through R_i, both graphs run, and every relation found -- R_o and the
intermediate ones -- is evaluated and compared. For a "does not refine" verdict the failing operator's
output is compared with the closest reconstruction from the G_d tensors explored for it.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphGuardError
from ..ir import scalar as S
from ..ir.expr import App, Leaf, Term, base_name, flat_args, leaves, rank_of, to_text
from ..ir.graph import Graph
from ..ir.ops import Registry
from ..ir.relation import RelationFile
from ..ir.semantics import term_eval
from .result import VerifyResult

RTOL, ATOL = 1e-6, 1e-8


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


def _random(shape, dtype: str, rng) -> np.ndarray:
    if "int" in dtype:
        return rng.integers(0, 4, size=shape).astype(np.int64)
    if "bool" in dtype or dtype == "pred":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.standard_normal(shape)


def _assign(t: Term, value: np.ndarray, env: dict, fixed: dict, reg: Registry, mask=None) -> None:
    """Make ``t`` evaluate to ``value`` (where ``mask`` is true; everywhere when None) by setting G_d inputs
    (clean expressions are invertible enough). ``fixed`` holds, per G_d input, which of its elements are
    already set: slices of one tensor may be set by different relations, an element only once."""
    value = np.asarray(value)
    mask = np.ones(value.shape, bool) if mask is None else mask
    if isinstance(t, Leaf):
        old = fixed.get(t.name)
        if old is None:
            env[t.name] = np.array(env[t.name], copy=True)
            old = fixed[t.name] = np.zeros(value.shape, bool)
        both = old & mask
        if both.any() and not np.allclose(env[t.name][both], value[both], rtol=RTOL, atol=ATOL):
            raise ReplayError(f"the input relation constrains {t.name} twice inconsistently")
        env[t.name][mask] = value[mask]
        fixed[t.name] = old | mask
        return
    op, a = t.op, t.attrd
    if op == "core.concat":
        sizes = np.cumsum([term_eval(x, env.__getitem__, reg).shape[a["dim"]] for x in t.args])[:-1]
        for x, p, m in zip(t.args, np.split(value, sizes, axis=a["dim"]), np.split(mask, sizes, axis=a["dim"])):
            _assign(x, p, env, fixed, reg, m)
    elif op == "core.slice":
        cur = np.array(term_eval(t.args[0], env.__getitem__, reg), copy=True)
        m = np.zeros(cur.shape, bool)
        idx = [slice(None)] * cur.ndim
        idx[a["dim"]] = slice(a["start"], a["end"])
        cur[tuple(idx)] = value
        m[tuple(idx)] = mask
        _assign(t.args[0], cur, env, fixed, reg, m)
    elif op == "core.permute":
        inv = np.argsort(a["dims"])
        _assign(t.args[0], np.transpose(value, inv), env, fixed, reg, np.transpose(mask, inv))
    elif op == "core.reshape":
        shape = term_eval(t.args[0], env.__getitem__, reg).shape
        _assign(t.args[0], np.reshape(value, shape), env, fixed, reg, np.reshape(mask, shape))
    elif op == "core.identity":
        _assign(t.args[0], value, env, fixed, reg, mask)
    elif op == "core.sum":
        def is_set(x):
            return any(fixed.get(n) is not None and fixed[n].any() for n in leaves(x))
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


def run_graph(g: Graph, env: dict, reg: Registry, sv: dict) -> dict:
    """Run ``g`` on ``env``; a size the data decides gets its value here (``sv``), where it is first computed
    -- and a size two graphs share (proved equal) must come out the same in both."""
    memo: dict = {}
    for n in g.topo_order():
        op = reg.get(n.op)
        sized = dict(op.data_sizes) if op is not None else {}
        free = {a for a in sized if S.free_symbols(n.attrs[a]) - set(sv)}
        for o, term in zip(n.outputs, g.node_terms(n)):
            env[o] = term_eval(_concrete_attrs(term, sv, frozenset(free)), env.__getitem__, reg, memo)
        for a, dim in sized.items():
            x, got = n.attrs[a], env[n.outputs[0]].shape[dim]
            if a in free and isinstance(x, S.sp.Symbol):
                sv[x.name] = got
            elif S.substitute(x, sv) != got:
                raise ReplayError(f"{g.where(n)}: size {S.text(x)} is {got} here, {S.substitute(x, sv)} elsewhere")
    return env


def _diff(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("inf")
    if not a.size:
        return 0.0
    a, b = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):  # equal infinities (masks) differ by 0, not by nan
        d = np.where(a == b, 0.0, np.abs(a - b))
    return float(np.max(d))


def replay(result: VerifyResult, g_s: Graph, g_d: Graph, rel: RelationFile, reg: Registry, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    sv = symbol_values(g_s, g_d, rel, data_symbols(g_s, reg) | data_symbols(g_d, reg))
    d_env = {t: _random(_shape(g_d, t, sv), g_d.tensors[t].dtype, rng) for t in g_d.inputs}
    fixed: dict[str, np.ndarray] = {}  # G_d input -> which of its elements a relation has set
    s_env: dict = {}
    for name in g_s.inputs:
        exprs = [_concrete_attrs(e, sv) for e in rel.inputs[name]]
        val = term_eval(exprs[0], d_env.__getitem__, reg)
        _assign(exprs[0], val, d_env, fixed, reg)  # the first relation: marks the parts it reads as set
        for e in exprs[1:]:
            _assign(e, val, d_env, fixed, reg)
        s_env[name] = val
    run_graph(g_d, d_env, reg, sv)
    run_graph(g_s, s_env, reg, sv)
    checked, worst, mismatches = 0, 0.0, []
    rels = result.relations if result.relations else {}
    pairs = [(t, e) for t, exprs in rels.items() for e in exprs]
    pairs += [(t, e) for t, exprs in result.r_o.items() for e in exprs if (t, e) not in pairs]
    for t, e in pairs:
        got = term_eval(_concrete_attrs(e, sv), d_env.__getitem__, reg)
        want = s_env[t]
        d = _diff(got, want)
        checked += 1
        worst = max(worst, d)
        if not np.allclose(got, want, rtol=RTOL, atol=ATOL):
            mismatches.append(f"{t} = {to_text(e)}: max |diff| {d:.3g}")
    report = {"ok": not mismatches, "checked": checked, "max_abs_diff": worst, "seed": seed,
              "mismatches": mismatches, "symbols": sv}
    if result.failure is not None and result.failure.outputs and result.failure.outputs[0] in s_env:
        result.failure.replay = _closest(result, g_s, g_d, s_env, d_env, reg, sv)
        all_missing = (result.expect or {}).get("missing") or []
        missing = [m for m in all_missing if m[0] == result.failure.outputs[0]]
        if not missing and result.failure.replay["max_abs_diff"] == float("inf"):
            # no G_d tensor has the failing tensor's shape (e.g. a batch sharded over one axis of a 2-D mesh,
            # where concatenating every rank's piece is too long): the first expectation R_o misses for a G_s
            # output computed from the failing operator's outputs (where the failure shows)
            after = _downstream(g_s, result.failure.outputs)
            order = {t: i for i, t in enumerate(g_s.outputs)}
            missing = sorted((m for m in all_missing if m[0] in s_env and m[0] in after),
                             key=lambda m: order.get(m[0], len(order)))[:1]
        if missing:  # the failure is an expectation: how far is the expected relation from the specification?
            t, exp_text, _ = missing[0]
            exp = next(e for e in rel.expect[t] if to_text(e) == exp_text)
            got = term_eval(_concrete_attrs(exp, sv), d_env.__getitem__, reg)
            result.failure.replay = {"output": t, "candidate": f"{exp_text} (expected)",
                                     "max_abs_diff": _diff(got, s_env[t])}
    result.replay = report
    return report


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


PARTIAL_OPS = frozenset({"core.sum", "core.max"})


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


def _closest(result: VerifyResult, g_s: Graph, g_d: Graph, s_env: dict, d_env: dict, reg: Registry,
             sv: dict) -> dict | None:
    """How far the failing operator's output is from the best simple reconstruction out of G_d (for an output
    left as partial results: from what the ranks hold, with no sum of the ranks' tensors)."""
    f = result.failure
    held_only = f.partial_output is not None
    out = f.partial_output or f.outputs[0]
    want = s_env[out]
    node = g_s.producer.get(out)
    pool = set(f.explored)
    if not held_only:
        pool |= {o for n in g_d.nodes if node is not None and n.op == node.op for o in n.outputs}
    if not pool:
        pool = set(g_d.tensors)
    groups: dict[str, list[str]] = {}
    for t in sorted(pool, key=lambda x: (base_name(x), rank_of(x) or 0)):
        groups.setdefault(base_name(t), []).append(t)
    best = None
    if held_only:  # what the ranks hold: R_o's expressions with each sum or max taken at one of its operands
        for e in result.r_o.get(out, []):
            for k in range(_most_operands(e)):
                held = _one_operand(e, k)
                d = _diff(term_eval(_concrete_attrs(held, sv), d_env.__getitem__, reg), want)
                if best is None or d < best[1]:
                    best = (to_text(held), d)
    for base, ts in groups.items():
        arrs = [d_env[t] for t in ts]
        cands = [(t, a) for t, a in zip(ts, arrs)]
        if len(ts) > 1 and all(a.ndim == want.ndim for a in arrs):
            for d in range(want.ndim):
                try:
                    cands.append((f"concat({', '.join(ts)}, dim={d})", np.concatenate(arrs, axis=d)))
                except ValueError:
                    pass
            if all(a.shape == arrs[0].shape for a in arrs) and not held_only:
                cands.append((f"sum({', '.join(ts)})", np.sum(arrs, axis=0)))
                if arrs[0].ndim == 2 and want.shape == tuple(len(arrs) * n for n in arrs[0].shape):
                    # the ranks' tensors as the diagonal blocks (what sharding both operands computes)
                    diag = np.zeros(want.shape, dtype=np.float64)
                    r0, c0 = arrs[0].shape
                    for i, a in enumerate(arrs):
                        diag[i * r0:(i + 1) * r0, i * c0:(i + 1) * c0] = a
                    cands.append((f"block_diag({', '.join(ts)})", diag))
        for text, a in cands:
            d = _diff(a, want)
            if d != float("inf") and (best is None or d < best[1]):
                best = (text, d)
    if best is None:
        return {"output": out, "candidate": "(no G_d tensor of a matching shape)", "max_abs_diff": float("inf")}
    return {"output": out, "candidate": best[0], "max_abs_diff": best[1]}
