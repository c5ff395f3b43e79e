"""The independent checker: every R_o line re-established numerically, outside the engine.

What it is for. The engine (the search, its memo of solved problems, the relayout rules, the e-graph and its
lemmas) may return REFINES with an R_o that is numerically false (issue 39, "Trust"). This module re-checks
the answer with none of that machinery: it imports no search, memo, relayout, e-graph, lemma or family
module (``tests/test_checker.py`` reads its import closure), only the graphs' NumPy references
(``ir.semantics.term_eval``) and replay's evaluation schedule (``engine/replay.py``, which imports ``ir/`` and
``engine/result.py`` alone). ``graphguard.verify`` runs it on every REFINES (``check="outputs"``, the default;
``--check`` on the command line); an R_o line it does not confirm -- or a check that cannot run (an operator
without a reference, inputs R_i cannot be built for) -- makes the verdict ``inconclusive`` (exit 3), the
failure naming the line and why. It never turns a verdict into ``refines``.

What it promises. A probabilistic identity check: for each R_o line ``t = e``, both graphs are evaluated in
float64 at ``POINTS`` (2) independent random points and ``e``, evaluated over the G_d tensors, must equal
G_s's ``t`` at each. A point: G_d inputs drawn -- floats uniform in [-1/2, 1/2), integers in [0, 4), bools
fair, each seed its own draw -- and made consistent with R_i: an input R_i relates by data movement alone
(a sharded or replicated input) is drawn in G_s's shape and its G_d tensors are the pieces of that value;
an input with a stated ``ranges:`` is drawn in its range; any other (a slice, a sum) is built as replay
builds it (its expression's value, or assigned back through every expression). Two points: a coincidence at
one (a mask that happens to keep everything, an index that happens to be right) does not confirm.
Tolerance: floats elementwise |got - want| <= 1e-8 + 1e-6 |want| (replay's float64 ``compare``: both graphs in
float64, every rounding to a narrower dtype skipped, so the identity is checked, not one precision's
rounding); NaN and infinities must sit in the same places; integers and bools exactly. The report's
``max_error_ratio`` is the largest difference as a fraction of its tolerance (confirmed: <= 1).

What it cannot check. An identity that holds at the drawn points only: exact ties and zeros of continuous
values are practically never drawn, but small integers are (four values): an R_o right only where an integer
input takes one of them can pass both points. Symbolic sizes take one assignment (as replay's: the smallest
values >= 4 the constraints allow) at both points, so an identity that holds at those sizes only passes;
data-decided sizes (``nonzero``) are what the drawn data gives. Rounding: a G_d right in exact arithmetic but
losing precision in float16 passes (``--replay`` computes in the graphs' dtypes). An R_o that holds only under
the relation's ``assume:`` is checked at points that may not meet it. ``check="all"`` also checks every
intermediate relation the engine recorded (``result.relations``); a ``scale(...)`` term (a tensor known up to a
constant factor) is checked as the scaled value it denotes; a term with an operator that has no NumPy
reference is skipped and counted (``skipped``).

Cost. Per point, only the G_s operators the checked tensors are computed from and the G_d operators the
checked expressions read (replay's schedule with ``whole=False``), each tensor freed after its last reader:
for ``outputs`` about one float64 evaluation of each graph per point, and the R_o expressions (data
movement). Inputs are drawn once (a sharded weight's pieces are views of the G_s value, not copies of it;
uniform draws take a quarter of normal ones' time), the second point draws into the first point's buffers,
and while checking NumPy's transparent-huge-page advice is off (:func:`_hugepages`). ``bench/checker_cost.py``
(this shared 2-core machine): milliseconds for the shipped examples, at most 1.5 % of their verification. The
Llama-3.2-1B cross-framework layer (TP 2), whose G_d inputs hold 323 million numbers (the LM head's
2048 x 128256 weight), is bound by memory: 5-6 CPU s of drawing and float64 products plus 1-11 s of system
time faulting in the G_d's copies of every weight (the NeuronX ring transfer's reference copies its input;
without that copy 6.6 CPU s in all), against about 20 CPU s of verification; the first version, with
replay's inputs (normal draws, every input assigned back through R_i, huge pages), took 31.5 CPU s.
"""
from __future__ import annotations

import time

import numpy as np

from .engine.replay import (Check, ReplayError, _assign, _concrete_attrs, _shape, _store, _symbol_needs, compare,
                            data_symbols, last_reads, run_node, schedule, symbol_values)
from .engine.result import Failure, VerifyResult
from .errors import GraphGuardError
from .ir.expr import App, Leaf, Term, leaves, to_text
from .ir.graph import Graph
from .ir.ops import Registry
from .ir.relation import RelationFile
from .ir.semantics import term_eval

SCOPES = ("outputs", "all", "off")  # verify(check=...): R_o lines, R_o and every intermediate relation, none
POINTS = 2  # independent random points a line must hold at
SEED_BASE = 0x6767  # the points' seeds: SEED_BASE + POINTS * seed + k (apart from replay's seed)
SHOWN = 5  # unconfirmed lines named in a failure's reason
POOL_MIN = 1 << 20  # float64 elements from which a drawn buffer is reused by the next point


class CheckError(GraphGuardError):
    pass


def _evaluable(t: Term, reg: Registry) -> str | None:
    """None if every operator of ``t`` has a NumPy reference; else the first that has none."""
    if not isinstance(t, App):
        return None
    op = reg.get(t.op)
    if op is None or getattr(op, "ref", None) is None:
        return t.op
    for a in t.args:
        why = _evaluable(a, reg)
        if why is not None:
            return why
    return None


def _line(t: str, e: Term) -> str:
    return f"{t} = {to_text(e)}"


def check(result: VerifyResult, g_s: Graph, g_d: Graph, rel: RelationFile, reg: Registry,
          scope: str = "outputs", seed: int = 0, points: int = POINTS) -> dict:
    """Re-establish ``result``'s R_o lines (``scope="all"``: and its intermediate relations) numerically
    (module docstring). Returns the report -- ``ok``, ``lines`` (checked), ``confirmed``, ``skipped``,
    ``points``, ``seeds``, ``max_error_ratio``, ``max_abs_diff``, ``seconds`` (wall; ``cpu_seconds``: this
    process's CPU time, every thread's), ``unconfirmed`` (one text per
    line not confirmed, with why), ``error`` (why the check could not run at all, or None) -- and stores it
    in ``result.checked``; the verdict is left as it is (:func:`apply`)."""
    if scope not in SCOPES or scope == "off":
        raise CheckError(f"unknown check scope '{scope}' (choose one of outputs, all)")
    t0, c0 = time.monotonic(), time.process_time()
    pairs = [(t, e) for t, exprs in result.r_o.items() for e in exprs]
    skipped: list[str] = []
    if scope == "all":
        seen = set(pairs)
        for t, exprs in result.relations.items():
            for e in exprs:
                if (t, e) in seen or t not in g_s.tensors:
                    continue
                seen.add((t, e))
                if any(x not in g_d.tensors for x in leaves(e)) or _evaluable(e, reg) is not None:
                    skipped.append(_line(t, e))
                    continue
                pairs.append((t, e))
    n_out = sum(len(v) for v in result.r_o.values())
    seeds = [SEED_BASE + points * seed + k for k in range(points)]
    worst: dict = {p: (0.0, 0.0) for p in pairs}  # (max |diff|, error ratio) over the points
    bad: dict = {}  # pair -> why it is not confirmed (the first point that showed it)
    error = None
    hugepages = _hugepages(False)
    try:
        data = data_symbols(g_s, reg) | data_symbols(g_d, reg)
        pool: dict = {}  # large float64 buffers drawn at one point, drawn into at the next
        drawn: list = []
        for k, sd in enumerate(seeds):
            todo = [p for p in pairs if p not in bad]
            if not todo:
                break
            out: dict = {}
            sv = symbol_values(g_s, g_d, rel, data)
            d_env, first, direct = _inputs(g_s, g_d, rel, reg, sv, sd, pool, drawn)
            _run(g_s, g_d, reg, sv, d_env, first, direct, _checks(todo, g_d, reg, sv, data, out))
            del d_env, first, direct
            for a in drawn:  # (every view of them dropped with the run's tensors)
                pool.setdefault(a.shape, []).append(a)
            drawn.clear()
            for p in todo:
                got = out.get(p)
                if isinstance(got, BaseException):
                    bad[p] = f"cannot be evaluated over G_d: {_why(got)}"
                elif got is None:
                    bad[p] = "was not evaluated (internal: no check ran for it)"
                else:
                    d, frac = got
                    worst[p] = (max(worst[p][0], d), max(worst[p][1], frac))
                    if not frac <= 1:  # (nan: not confirmed)
                        bad[p] = (f"max |diff| {d:.3g}, {frac:.3g} times the float64 tolerance, at point {k + 1} "
                                  f"(seed {sd})")
    except Exception as err:  # an operator with no reference, inputs R_i cannot be built for, ...
        error = _why(err)
    finally:
        _hugepages(hugepages)
    report = {
        "scope": scope, "ok": error is None and not bad,
        "lines": len(pairs), "outputs": n_out, "confirmed": 0 if error else len(pairs) - len(bad),
        "skipped": len(skipped), "points": points, "seeds": seeds, "dtype": "float64",
        "max_error_ratio": max((w[1] for w in worst.values()), default=0.0),
        "max_abs_diff": max((w[0] for w in worst.values()), default=0.0),
        "unconfirmed": [f"{_line(*p)}: {why}" for p, why in bad.items()],
        "unconfirmed_outputs": sorted({p[0] for p in bad} if not error else set(result.r_o)),
        "error": error, "seconds": time.monotonic() - t0, "cpu_seconds": time.process_time() - c0,
    }
    if skipped:
        report["skipped_lines"] = skipped
    if error is None and bad:  # the R_o lines first
        outs = set(result.r_o)
        order = sorted(bad, key=lambda p: p[0] not in outs or p[1] not in result.r_o[p[0]])
        report["unconfirmed"] = [f"{_line(*p)}: {bad[p]}" for p in order]
    result.checked = report
    return report


def _draw(shape, dtype: str, rng, pool: dict | None = None, drawn: list | None = None) -> np.ndarray:
    """A random input: floats uniform in [-1/2, 1/2) in float64 (a quarter of a normal draw's time: a production
    layer's inputs are hundreds of millions of numbers), integers in [0, 4) as int64, bools fair. ``pool``:
    large float buffers of an earlier point by shape, drawn into again (memory already mapped: a fresh GiB
    costs more to map than to fill); ``drawn``: where the large buffers drawn here are listed for the next."""
    if "int" in dtype:
        return rng.integers(0, 4, size=shape).astype(np.int64)
    if "bool" in dtype or dtype == "pred":
        return rng.integers(0, 2, size=shape).astype(bool)
    shape = tuple(int(d) for d in shape)
    free = pool.get(shape) if pool is not None else None
    x = free.pop() if free else np.empty(shape)
    rng.random(out=x)
    x -= 0.5
    if drawn is not None and x.size >= POOL_MIN:
        drawn.append(x)
    return x


class _NotViews(Exception):
    pass


MOVES = frozenset({"core.concat", "core.permute", "core.reshape", "core.identity"})


def _moved_shape(t: Term, leaf_shape) -> tuple[int, ...]:
    """The shape of a term of leaves, concat, permute, reshape and identity (attributes concrete)."""
    if isinstance(t, Leaf):
        return tuple(leaf_shape(t.name))
    if t.op not in MOVES:
        raise _NotViews
    a = t.attrd
    if t.op == "core.concat":
        shapes = [_moved_shape(x, leaf_shape) for x in t.args]
        out = list(shapes[0])
        out[a["dim"]] = sum(x[a["dim"]] for x in shapes)
        return tuple(out)
    if t.op == "core.permute":
        inner = _moved_shape(t.args[0], leaf_shape)
        return tuple(inner[i] for i in a["dims"])
    if t.op == "core.reshape":
        _moved_shape(t.args[0], leaf_shape)
        return tuple(int(d) for d in a["shape"])
    return _moved_shape(t.args[0], leaf_shape)


def _views(t: Term, value: np.ndarray, leaf_shape, out: dict) -> None:
    """Each leaf of ``t`` (data movement without slices) as the part of ``value`` it is: views where NumPy
    can (a split of a concat, a transpose of a permute), a copy where a reshape of a strided view needs one."""
    if isinstance(t, Leaf):
        out.setdefault(t.name, []).append(value)
        return
    a = t.attrd
    if t.op == "core.concat":
        sizes = np.cumsum([_moved_shape(x, leaf_shape)[a["dim"]] for x in t.args])[:-1]
        for x, part in zip(t.args, np.split(value, sizes, axis=a["dim"])):
            _views(x, part, leaf_shape, out)
    elif t.op == "core.permute":
        _views(t.args[0], np.transpose(value, np.argsort(a["dims"])), leaf_shape, out)
    elif t.op == "core.reshape":
        _views(t.args[0], np.reshape(value, _moved_shape(t.args[0], leaf_shape)), leaf_shape, out)
    elif t.op == "core.identity":
        _views(t.args[0], value, leaf_shape, out)
    else:
        raise _NotViews


def _laid_out(t: Term, leaf_shape, draw) -> np.ndarray:
    """A drawn value of ``t``'s shape laid out as the G_d tensors are: a permute's operand drawn contiguous and
    transposed (a view), so the G_d pieces are blocks of rows -- a rank's shard of a transposed weight is copied
    by rows, not gathered element by element."""
    while isinstance(t, App) and t.op in ("core.permute", "core.identity"):
        if t.op == "core.identity":
            t = t.args[0]
            continue
        return np.transpose(_laid_out(t.args[0], leaf_shape, draw), t.attrd["dims"])
    return draw(_moved_shape(t, leaf_shape))


def _inputs(g_s: Graph, g_d: Graph, rel: RelationFile, reg: Registry, sv: dict, seed: int, pool: dict,
            drawn: list) -> tuple[dict, dict, dict]:
    """Random inputs made consistent with R_i: (the G_d inputs, each G_s input's expression over them, the G_s
    inputs' values known directly).

    An input whose expressions move data only (concat, permute, reshape; no slice, sum or max) and share no
    G_d tensor with each other or another input's -- a sharded or replicated input -- is drawn in G_s's shape
    and its G_d tensors are views of that value (nothing evaluated, nothing copied). The G_d inputs left are
    drawn; then an input with one expression and no ``ranges:`` entry takes that expression's value
    (consistent by construction, evaluated once where G_s first reads it), and one with several expressions
    or a value range gets its value assigned through each expression, as replay does (``_assign``)."""
    rng = np.random.default_rng(seed)

    def leaf_shape(name):
        return tuple(int(d) for d in _shape(g_d, name, sv))
    exprs = {name: [_concrete_attrs(e, sv) for e in rel.inputs[name]] for name in g_s.inputs}
    claims: dict[str, int] = {}
    for es in exprs.values():
        for e in es:
            for x in leaves(e):
                claims[x] = claims.get(x, 0) + 1
    d_env: dict = {}
    direct: dict = {}
    for name, es in exprs.items():
        if any(claims[x] > 1 for e in es for x in leaves(e)):
            continue
        try:
            for e in es:
                _moved_shape(e, leaf_shape)
        except _NotViews:
            continue
        dtype = g_s.tensors[name].dtype
        val = _laid_out(es[0], leaf_shape, lambda shape: rng.integers(*rel.ranges[name], size=shape)
                        if name in rel.ranges else _draw(shape, dtype, rng, pool, drawn))
        parts: dict = {}
        for e in es:
            _views(e, val, leaf_shape, parts)
        d_env.update((x, v[0]) for x, v in parts.items())
        direct[name] = val
    for t in g_d.inputs:
        if t not in d_env:
            d_env[t] = _draw(_shape(g_d, t, sv), g_d.tensors[t].dtype, rng, pool, drawn)
    fixed: dict = {}  # G_d input -> which of its elements an assigned relation has set
    first = {name: es[0] for name, es in exprs.items()}
    for name, es in exprs.items():
        if name in direct or (len(es) == 1 and name not in rel.ranges):
            continue
        val = term_eval(es[0], d_env.__getitem__, reg)
        if name in rel.ranges:  # values drawn in the input's stated range
            val = rng.integers(*rel.ranges[name], size=np.shape(val)).astype(np.asarray(val).dtype)
        for e in es:
            _assign(e, val, d_env, fixed, reg)
        del val
    return d_env, first, direct


def _run(g_s: Graph, g_d: Graph, reg: Registry, sv: dict, d_env: dict, first: dict, direct: dict,
         checks: list[Check]) -> None:
    """Replay's schedule, only what the checks need (``whole=False``), in float64, each tensor freed after its
    last reader; a G_s input known directly (``direct``) taken as it is, another built from its expression."""
    steps = schedule(g_s, g_d, first, checks, False, reg)
    last = last_reads(steps)
    env = {"s": {}, "d": d_env}
    for t in list(d_env):
        if ("d", t) not in last:
            del d_env[t]  # read by nothing checked
    for i, st in enumerate(steps):
        if st.kind in ("s", "d"):
            done = frozenset(t for side, t in st.reads if last[side, t] == i)
            run_node(g_s if st.kind == "s" else g_d, st.item, env[st.kind], reg, sv, "float64", done)
        elif st.kind == "in":
            val = direct.pop(st.item, None)
            if val is None:
                val = _store(term_eval(first[st.item], d_env.__getitem__, reg), g_s.tensors[st.item].dtype,
                             "float64")
            env["s"][st.item] = val
        else:
            st.item.run(env["s"], env["d"])
        for side, t in st.reads + st.writes:
            if last.get((side, t)) == i:
                env[side].pop(t, None)
    direct.clear()


def _hugepages(on: bool | None) -> bool | None:
    """Set NumPy's advice that large arrays use transparent huge pages (on by default); returns the setting
    before (None: this NumPy has no such switch). Off while checking: where the kernel compacts memory to
    fault huge pages in (defrag "madvise"), every fresh GiB costs about a second more to map than to fill,
    and the check allocates its inputs and the graphs' copies of them afresh (bench/checker_cost.py)."""
    if on is None:
        return None
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return None
    return bool(_set_madvise_hugepage(on))


def _why(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text if isinstance(err, (GraphGuardError, ReplayError)) else f"{type(err).__name__}: {text}"


def _checks(pairs, g_d: Graph, reg: Registry, sv: dict, data: set, out: dict) -> list[Check]:
    """One check per (G_s tensor, expression over G_d tensors): ``out[pair]`` = (max |diff|, error ratio),
    or the exception evaluating it raised."""
    def make(t: str, e: Term) -> Check:
        def run(s_env, d_env):
            try:
                got = np.asarray(term_eval(_concrete_attrs(e, sv), d_env.__getitem__, reg))
                want = np.asarray(s_env[t])
                d, frac, _ = compare(got, want)
                out[t, e] = (d, frac)
            except Exception as err:
                out[t, e] = err
        return Check((t,), tuple(sorted(set(leaves(e)))) + tuple(_symbol_needs(e, g_d, reg, data)), run)
    return [make(t, e) for t, e in pairs]


def apply(result: VerifyResult, g_s: Graph) -> None:
    """A REFINES whose check did not confirm every line becomes ``inconclusive``, its failure naming the G_s
    operator of the first output not confirmed, the lines and why."""
    rep = result.checked
    if rep is None or rep["ok"] or result.verdict != "refines":
        return
    outs = rep["unconfirmed_outputs"] or list(result.r_o) or list(g_s.outputs)
    order = {o: i for i, o in enumerate(g_s.outputs)}
    first = min(outs, key=lambda o: order.get(o, len(order))) if outs else None
    node = g_s.producer.get(first) if first is not None else None
    while node is not None and node.op == "core.identity" and node.inputs and node.inputs[0] in g_s.producer:
        node = g_s.producer[node.inputs[0]]  # the operator that computed it, not the output's alias
    if rep["error"] is not None:
        reason = f"the independent check could not run, so R_o is not confirmed: {rep['error']}"
        hint = "--check off takes the engine's REFINES unchecked"
    else:
        shown = rep["unconfirmed"][:SHOWN]
        more = len(rep["unconfirmed"]) - len(shown)
        reason = ("the independent check did not confirm " + "; ".join(shown)
                  + (f"; and {more} more" if more else ""))
        hint = ("the engine's R_o does not hold numerically at random inputs consistent with R_i (an engine "
                "error: please report it); --replay compares every relation it found")
    result.failure = Failure(op=node.op if node else "(input)", node=node.name if node else (first or "?"),
                             loc=node.loc if node else None, outputs=list(outs), reason=reason,
                             input_relations={}, explored=[], hint=hint,
                             func=node.func if node else None, module=node.module if node else None)
    result.verdict = "inconclusive"
