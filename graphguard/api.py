"""The Python API: ``graphguard.verify(spec, impl, relation)``."""
from __future__ import annotations

import dataclasses

import time
from pathlib import Path

from .engine.lemma import relevant_rules, term_ops
from .engine.egraph import Budget, EGraph
from .engine.explain import diverging_ranks, explain
from .engine.infer import Context, compute_out_rel
from .engine.outputs import is_held
from .engine.layers import layer_table
from .engine.result import VerifyResult
from .errors import InputError, ShapeError
from .gcpause import collector_paused
from .frontends import LoadRequest
from .ir import scalar as S
from .ir.expr import leaves, to_text
from .ir.graph import Graph
from .ir.ops import fmt_shape
from .ir.relation import RelationFile, exact_conversions, load_relation, parse_relation_text, relation_yaml
from .ir.semantics import normalize_term, term_dtype, term_shape
from .ir.values import implied_ranges, value_ranges
from .passes import run_pipeline
from .plugins import Plugins, load_plugins

PathLike = str | Path
CHECK_SCOPES = ("outputs", "all", "off")  # verify(check=...): graphguard/check.py


def _as_list(x) -> list[str]:
    if isinstance(x, (str, Path)):
        return [str(x)]
    return [str(p) for p in x]




def load_inputs(spec, impl, relation, *, frontend: str = "ir", spec_frontend: str | None = None,
                impl_frontend: str | None = None, world_size: int | None = None,
                plugins: Plugins | None = None) -> tuple[Graph, Graph, RelationFile, Plugins]:
    plugins = plugins or load_plugins()
    reg = plugins.registry
    if isinstance(relation, RelationFile):
        rel = relation
    elif isinstance(relation, dict):
        rel = parse_relation_text(relation_yaml(relation, sort_keys=True), "<relation>", reg)
    else:
        rel = load_relation(relation, reg)
    cx = rel.constraints()
    graphs = []
    for role, g, fe in (("spec", spec, frontend if spec_frontend is None else spec_frontend),
                        ("impl", impl, frontend if impl_frontend is None else impl_frontend)):
        if isinstance(g, Graph):
            graphs.append(g)
        else:
            req = LoadRequest(_as_list(g), role, reg, cx, world_size)
            with collector_paused():
                graphs.append(plugins.frontend(fe).load(req))
    g_s, g_d = graphs
    # convert(p@0, dtype=t) in an input relation: G_d's input p@0 built as the exact conversion of a new t input
    exact_conversions(rel, g_d, reg, cx)
    # the graph passes (graphguard/passes: the pipeline, and those the loaded bridge packs add), on G_s then G_d
    run_pipeline(plugins.passes, g_s, g_d, reg, cx, rel)
    check_relation(g_s, g_d, rel, plugins, cx)
    return g_s, g_d, _with_implied_ranges(rel, g_s, reg), plugins


def _with_implied_ranges(rel: RelationFile, g_s: Graph, reg) -> RelationFile:
    """``rel`` with the value ranges G_s's own operators imply for its inputs (an index G_s reads must lie in
    its table: :func:`~graphguard.ir.values.implied_ranges`) beside the stated ones, each narrowing noted among
    G_s's assumptions (printed with the certificate)."""
    implied = implied_ranges(g_s, reg)
    if not implied:
        return rel
    ranges = dict(rel.ranges)
    notes = getattr(g_s, "assumed", None)
    if notes is None:
        notes = g_s.assumed = []
    for name, (lo, hi, why) in implied.items():
        old = ranges.get(name)
        new = (lo, hi) if old is None else (max(old[0], lo), min(old[1], hi))
        if new == old or new[0] >= new[1]:
            continue  # (stated no wider; or no value fits both: the stated range stands)
        ranges[name] = new
        note = f"{name} in [{new[0]}, {new[1]}) (implied: {why})"
        if note not in notes:
            notes.append(note)
    return dataclasses.replace(rel, ranges=ranges)


def check_relation(g_s: Graph, g_d: Graph, rel: RelationFile, plugins: Plugins, cx: S.Constraints,
                   inputs: bool = True) -> None:
    """Every G_s input is mapped (``inputs=False``: an expectation file, which need not), by expressions over
    G_d inputs of the same shape and dtype; expectations are over G_d tensors; ``allow_partial`` names G_s
    outputs."""
    def at(name: str) -> str:
        pos = rel.positions.get(name)
        return f"{rel.source}:{pos[0]}:{pos[1]}" if pos else rel.source

    src = rel.source
    for name in rel.inputs:
        if name not in g_s.tensors:
            raise InputError(f"{at(name)}: '{name}' is not a tensor of the specification {g_s.source}")
        if name not in g_s.inputs:
            raise InputError(f"{at(name)}: '{name}' is not an input of the specification (only inputs are related)")
    for name in g_s.inputs if inputs else ():
        if name not in rel.inputs:
            raise InputError(f"{src}: no relation for specification input '{name}'")
    d_inputs = set(g_d.inputs)
    for name, exprs in list(rel.inputs.items()) + list(rel.expect.items()):
        for i, e in enumerate(exprs):
            for leaf in leaves(e):
                if leaf not in g_d.tensors:
                    raise InputError(f"{at(name)}: '{leaf}' in the relation for {name} is not a tensor of the "
                                     f"implementation {g_d.source}")
                if name in rel.inputs and leaf not in d_inputs:
                    raise InputError(f"{at(name)}: '{leaf}' in the relation for {name} is not an input of the "
                                     f"implementation")
            try:
                e = exprs[i] = normalize_term(e, g_d.shape, plugins.registry, cx)  # dims as in the graphs
                shp = term_shape(e, g_d.shape, plugins.registry, cx)
            except Exception as err:
                raise InputError(f"{at(name)}: relation for {name}: {err}") from None
            want = g_s.shape(name) if name in g_s.tensors else None
            if want is None:
                raise InputError(f"{at(name)}: '{name}' is not a tensor of the specification")
            if len(shp) != len(want) or any(S.norm(a) != S.norm(b) for a, b in zip(shp, want)):
                raise InputError(f"{at(name)}: relation for {name} has shape {fmt_shape(shp)} but {name} has "
                                 f"{fmt_shape(want)}")
            try:
                dt = term_dtype(e, lambda t: g_d.tensors[t].dtype, plugins.registry)
            except ShapeError as err:
                raise InputError(f"{at(name)}: relation for {name}: {err}") from None
            if dt is not None and dt != g_s.tensors[name].dtype:
                raise InputError(f"{at(name)}: relation for {name} has dtype {dt} but {name} has "
                                 f"{g_s.tensors[name].dtype}")
    for name, (lo, hi) in rel.ranges.items():
        line, col = rel.range_positions.get(name, (0, 0))
        where = f"{src}:{line}:{col}" if line else src
        if name not in g_s.inputs:
            raise InputError(f"{where}: ranges: '{name}' is not an input of the specification {g_s.source}")
        dt = g_s.tensors[name].dtype
        if not dt.startswith(("int", "uint")):
            raise InputError(f"{where}: ranges: '{name}' has dtype {dt}; only integer inputs take a value range")
    for name, (line, col) in rel.allow_partial.items():
        if name not in g_s.outputs:
            raise InputError(f"{src}:{line}:{col}: allow_partial: '{name}' is not an output of the specification "
                             f"{g_s.source}")


def verify(spec, impl, relation, *, frontend: str = "ir", spec_frontend: str | None = None,
           impl_frontend: str | None = None, world_size: int | None = None, budget: Budget | None = None,
           replay: bool = False, seed: int = 0, expect=None, allow_partial=False,
           plugins: Plugins | None = None, replay_dtype: str = "graph", progress=None,
           check: str = "outputs") -> VerifyResult:
    """Check that ``impl`` (G_d) refines ``spec`` (G_s) under the input relation ``relation``.

    ``spec``/``impl`` are paths (or lists of paths) read by the named frontends, or IR graphs;
    ``relation`` is a relation file path, a :class:`RelationFile` or a dict in the file's shape; ``expect``
    a file (or :class:`RelationFile`) of relations expected in R_o. Every output of G_s must be held by G_d
    (not left as the ranks' partial results) unless ``allow_partial`` is True or names it (as does the
    relation's ``allow_partial:`` or an expected sum). ``replay`` checks the verdict numerically
    (``replay_dtype``: "graph" computes in each tensor's dtype, "float32" / "float64" in that dtype; see
    :mod:`graphguard.engine.replay`).
    ``check``: a REFINES is re-checked by the independent checker (:mod:`graphguard.check`: no search, memo,
    relayout or e-graph; both graphs in float64 at two random points consistent with R_i): "outputs" (the
    default) every R_o line, "all" also every intermediate relation, "off" none. A line it does not confirm (or
    a check that cannot run) makes the verdict "inconclusive", the failure naming the line and why;
    ``result.checked`` holds its report.
    ``progress``, if given, is called with (G_s operators done, G_s operators in all, the next operator).
    Returns a :class:`VerifyResult` with the verdict, R_o, the failure localisation and timings."""
    if check not in CHECK_SCOPES:
        raise InputError(f"check: '{check}' is not one of {', '.join(CHECK_SCOPES)}")
    t0 = time.monotonic()
    g_s, g_d, rel, plugins = load_inputs(spec, impl, relation, frontend=frontend, spec_frontend=spec_frontend,
                                         impl_frontend=impl_frontend, world_size=world_size, plugins=plugins)
    if expect is not None:
        exp = expect if isinstance(expect, RelationFile) else load_relation(expect, plugins.registry, need_inputs=False)
        if not exp.expect:  # (an expectation file may list its relations under inputs:)
            exp = RelationFile(exp.source, expect=exp.inputs, symbols=exp.symbols, positions=exp.positions,
                               allow_partial=exp.allow_partial)
        check_relation(g_s, g_d, exp, plugins, rel.constraints(), inputs=False)
        rel.expect.update(exp.expect)
        rel.allow_partial.update(exp.allow_partial)
    for name in _named(allow_partial):
        if name not in g_s.outputs:
            raise InputError(f"allow_partial: '{name}' is not an output of the specification {g_s.source}")
    t_load = time.monotonic()
    cx = rel.constraints()
    ops = {o.name for o in plugins.registry.ops.values() if o.clean}
    for g in (g_s, g_d):
        for n in g.nodes:
            for t in g.node_terms(n):
                term_ops(t, ops)
    eg = EGraph(plugins.registry, relevant_rules(plugins.lemmas, ops), cx, g_d.shape, ops,
                lambda t: g_d.tensors[t].dtype, value_ranges(g_d, rel.leaf_ranges(), plugins.registry).get)
    ctx = Context(g_s, g_d, eg, budget or Budget(), progress=progress)
    result = compute_out_rel(ctx, rel.inputs, partial_allowed(rel, allow_partial))
    result.layers = layer_table(g_s, result.node_stats)
    result.assumed = [f"{role}: {a}" for role, g in (("G_s", g_s), ("G_d", g_d)) for a in getattr(g, "assumed", [])]
    result.repeat = {k: g.repeat for k, g in (("spec", g_s), ("impl", g_d)) if g.repeat is not None}
    t_end = time.monotonic()
    result.timings = {"load": t_load - t0, "infer": t_end - t_load, "total": t_end - t0,
                      "n_spec_ops": len(g_s.nodes), "n_impl_ops": len(g_d.nodes)}
    result.stats = {"lemma_hits": dict(sorted(ctx.stats.get("lemma_hits", {}).items(),  # by pack, then number
                                              key=lambda kv: (kv[0].rpartition(":")[0], int(kv[0].rpartition(":")[2])))),
                    "iterations": ctx.stats.get("iterations", 0), "egglog_commands": eg.commands,
                    "reused_results": ctx.memo.hits,
                    # operators searched again with the exists="tensor" lemmas (none clean without them), and
                    # those of such searches that ran out of budget (the first search's result stands)
                    "held_searches": ctx.stats.get("held_searches", 0), "held_budget": ctx.stats.get("held_budget", 0),
                    # operators searched again from their inputs' simplest expressions after the budget ran out
                    "narrowed": ctx.stats.get("narrowed", 0),
                    # operators whose outputs were read from a search cut short by its budget (partial_search)
                    "partial": ctx.stats.get("partial", 0),
                    # elementwise operators on interleaved rows matched on labels before any search
                    "labels_first": ctx.stats.get("labels_first", 0),
                    "scalar_queries": cx.queries, "z3_queries": cx.z3_queries,
                    "lemmas_loaded": len({r.lemma.key for r in plugins.lemmas})}
    unexpected = False  # (the failure is an expected output R_o maps otherwise)
    if rel.expect:
        result.expect = check_expect(result, rel, g_d.shape, plugins.registry)
        if result.expect["missing"] and result.verdict == "refines":
            from .engine.result import Failure
            def computed_by(t):  # the op that computed t, not the output's alias
                node = g_s.producer.get(t)
                while node is not None and node.op == "core.identity" and node.inputs[0] in g_s.producer:
                    node = g_s.producer[node.inputs[0]]
                return node
            order = {n.name: i for i, n in enumerate(g_s.topo_order())}
            # the first G_s operator (topological order) whose outputs are not as expected
            t, exp, got = min(result.expect["missing"],
                              key=lambda m: order.get(getattr(computed_by(m[0]), "name", None), -1))
            node = computed_by(t)
            result.verdict = "does-not-refine"
            unexpected = True
            result.failure = Failure(op=node.op if node else "(input)", node=node.name if node else t,
                                     loc=node.loc if node else None, outputs=[t],
                                     reason=f"R_o maps {t} to {', '.join(got) or 'nothing'}, not the expected {exp}",
                                     input_relations={}, explored=[])
    explain(result, g_s, g_d, plugins.registry, ctx.budget, ctx.partial_from, ctx.scaled_from,
                ctx.stats.get("range_wanted"))
    if unexpected:  # (after explain: where one rank computes an expected copy otherwise, that is the hint)
        diverging_ranks(result.failure, result.r_o, g_d, rel.expect)
    if replay:
        from .engine.replay import replay as do_replay
        t_replay = time.monotonic()
        do_replay(result, g_s, g_d, rel, plugins.registry, seed=seed, dtype=replay_dtype)
        result.timings["replay"] = time.monotonic() - t_replay
    if check != "off" and result.verdict == "refines":  # (after --replay: its report is the engine's verdict's)
        from .check import apply as apply_check, check as run_check
        t_check = time.monotonic()
        run_check(result, g_s, g_d, rel, plugins.registry, scope=check, seed=seed)
        apply_check(result, g_s)
        result.timings["check"] = time.monotonic() - t_check
    return result


def partial_allowed(rel: RelationFile, allow_partial=False) -> bool | frozenset[str]:
    """The outputs G_d may leave as partial results: all (``allow_partial=True``), or those named by
    ``allow_partial`` and the relation's ``allow_partial:``, and those whose expected relation is partial."""
    if allow_partial is True:
        return True
    expected = [t for t, exprs in rel.expect.items() if not all(is_held(e) for e in exprs)]
    return frozenset(_named(allow_partial)) | frozenset(rel.allow_partial) | frozenset(expected)


def _named(allow_partial) -> list[str]:
    if allow_partial is True or not allow_partial:
        return []
    return [allow_partial] if isinstance(allow_partial, str) else [str(x) for x in allow_partial]


def check_expect(result: VerifyResult, rel: RelationFile, shape_of=None, reg=None) -> dict:
    """Compare R_o with the relations the user expects (e.g. a gradient that must be all-reduced): an expected
    relation is met by the same text in R_o, or (given G_d's shapes and the registry) by an R_o expression of
    data movement and sums that holds the same entries in the same places (``labels.sums.same_entries``)."""
    from .engine.labels.sums import same_entries
    missing = []
    checked = 0
    for t, exprs in rel.expect.items():
        got = [to_text(e) for e in result.r_o.get(t, [])]
        for e in exprs:
            checked += 1
            if to_text(e) in got:
                continue
            if shape_of is not None and any(same_entries(e, g, shape_of, reg) for g in result.r_o.get(t, [])):
                continue
            missing.append((t, to_text(e), got))
    return {"checked": checked, "missing": missing}
