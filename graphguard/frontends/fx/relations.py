"""The input relation of a captured pair: what the program states, what the user wrote, and the tangents.

``input_relation(spec, impl, user)`` starts from the relations the distributed capture derived (DTensor
placements, dynamic dims' constraints), lets the user's relation override them tensor by tensor (and
narrow the symbols' ranges), keeps only G_s inputs, and completes the tangents of a backward capture:

A tangent is the gradient fed into an output, and a gradient is laid out like the tensor it is the gradient
of. Where a DTensor output states its placements the capture already derived the tangent's relation (see
:mod:`.dtensor`). For a plain output (``to_local()``, ``use_local_output=True``) whose expected relation is
stated (``expect:`` in the model file's relation), the tangent is laid out as expected: the verification
checks that expectation in R_o, so nothing is assumed that the run does not prove. Otherwise the layout is
what the forward certificate proves: graphguard verifies the forward alone and reads R_o for the output. Each
``out@r`` becomes ``tangent.out@r``; a concat stays a concat; a replicated output (``out = out@r`` for every
r) and a partial sum (``out = sum(out@0, ...)``, whose gradient is the same on every rank) give the list
form. If the forward does not refine, no tangent is derived: :class:`~graphguard.errors.ForwardVerdict` carries
the forward's report (the forward bug is reported, exit 1, not a relation to write).

The expectations (``expect:``, checked against R_o) are what the program states about its outputs: the
placements of DTensor outputs and of the gradients DTensor leaves on parameters (see :mod:`.dtensor`), and
otherwise, for the gradient ``grad.p`` of an input p, p's own layout -- a gradient is laid out like its
parameter, so a replicated parameter's gradient must be the same on every rank (all-reduced), never its
ranks' partial sums. The user's ``expect`` overrides them tensor by tensor; their ``allow_partial`` is kept.
"""
from __future__ import annotations

import itertools

from graphguard.errors import ForwardVerdict, InputError
from graphguard.ir.expr import App, Leaf, Term, leaves, to_text

from .symints import merge_symbols


def input_relation(spec, impl, user: dict | None = None, plugins=None, where: str = "<capture>",
                   check: str | None = None) -> dict:
    """A relation-file dict for verifying ``impl`` (a :class:`Captured` G_d) against ``spec`` (G_s). ``check``
    (where the user's relation was written, e.g. ``model.py: relation(world=2, backward=True)``): the relation
    is checked against the captured programs (names, shapes, dtypes: :func:`check_captured`) before the
    tangents are derived, so that a wrong one is reported by the capture, not by a verification after it."""
    user = user or {}
    if check is not None:
        check_names(spec, user, check)
    names = [i["name"] for i in spec.doc["inputs"]]
    derived = impl.relation.get("inputs", {})
    inputs = {**{k: v for k, v in derived.items() if k in names}, **user.get("inputs", {})}  # typos: reported
    rel = {"inputs": inputs}
    symbols = merge_symbols(spec.relation.get("symbols", {}), impl.relation.get("symbols", {}),
                            user.get("symbols", {}))
    if symbols:
        rel["symbols"] = symbols
    outputs = spec.doc["outputs"]
    stated = {k: v for k, v in impl.relation.get("expect", {}).items() if k in outputs}
    expect = {**gradient_expectations(inputs, outputs, impl.doc["outputs"], plugins), **stated,
              **user.get("expect", {})}
    if expect:
        rel["expect"] = expect
    if user.get("ranges"):  # (value ranges of integer inputs: kept as the user wrote them)
        rel["ranges"] = dict(user["ranges"])
    partial = user.get("allow_partial")
    if partial:  # (kept as the user wrote it)
        rel["allow_partial"] = [partial] if isinstance(partial, str) else list(partial)
    if check is not None:
        check_captured(spec, impl, rel, plugins, check)
    missing = [n for n in names if n not in inputs and not n.startswith("tangent.")]
    if missing:
        raise InputError(f"{where}: no relation for input(s) {', '.join(missing)}: no DTensor placement states "
                         f"them; write them in relation(world, backward)")
    tangents = [n for n in names if n not in inputs]
    if tangents:
        inputs.update(_tangents_from_expect(tangents, expect, plugins)
                      or _tangents_from_forward(spec, impl, rel, tangents, plugins, where))
    return rel


def check_names(spec, rel: dict, where: str) -> None:
    """Every tensor ``rel`` relates is an input of the specification (a typo: the closest name)."""
    import difflib
    names = [i["name"] for i in spec.doc["inputs"]]
    for name in rel.get("inputs") or {}:
        if name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            raise InputError(f"{where}: '{name}' is not an input of the specification"
                             + (f" (did you mean '{close[0]}'?)" if close else
                                f" (its inputs: {', '.join(names[:10])}{', ...' if len(names) > 10 else ''})"))


def check_captured(spec, impl, rel: dict, plugins, where: str) -> None:
    """``rel`` (a relation-file dict, its tangents not yet derived) against the captured programs, as
    ``verify`` will check it (:func:`graphguard.api.check_relation`): every name a tensor of the program it
    belongs to, every expression of the spec input's shape and dtype, ``expect:`` over G_d tensors, ``ranges:``
    and ``allow_partial:`` naming G_s inputs and outputs. An InputError naming ``where`` and the entry."""
    import dataclasses

    from graphguard.api import check_relation
    from graphguard.ir.relation import exact_conversions, parse_relation_text, relation_yaml
    from graphguard.ir.serde import graph_from_dict
    from graphguard.plugins import load_plugins
    pl = plugins or load_plugins()
    reg = pl.registry
    check_names(spec, rel, where)
    try:
        rf = parse_relation_text(relation_yaml(rel, sort_keys=True), where, reg)
        # (positions would point into the YAML written here, not into what the user wrote: the entry is named)
        rf = dataclasses.replace(rf, positions={}, range_positions={}, allow_partial={})
        for name in rel.get("allow_partial", ()):
            if name not in spec.doc["outputs"]:
                raise InputError(f"allow_partial: '{name}' is not an output of the specification (its outputs: "
                                 f"{', '.join(spec.doc['outputs'][:8])}{', ...' if len(spec.doc['outputs']) > 8 else ''})")
        cx = rf.constraints()
        g_s = graph_from_dict(spec.doc, f"<capture {spec.doc['name']}>", reg, cx)
        g_d = graph_from_dict(impl.doc, f"<capture {impl.doc['name']}>", reg, cx)
        exact_conversions(rf, g_d, reg, cx)
        check_relation(g_s, g_d, rf, pl, cx, inputs=False)
    except InputError as e:
        msg = str(e)
        raise InputError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def _tangents_from_expect(tangents: list[str], expect: dict, plugins) -> dict:
    """The tangents' relations from the outputs' *expected* relations (the user's, or the output placements
    DTensor states), when every tangent has one: the verification checks those relations in R_o (an expected
    relation missing there fails it), so the backward is verified under the gradient a training loop feeds
    exactly when the forward computes what is expected -- and a forward that does not is reported at its
    operator rather than here. Else {} (the forward's certificate decides: :func:`_tangents_from_forward`)."""
    from graphguard.ir.relation import parse_term
    from graphguard.plugins import load_plugins
    reg = (plugins or load_plugins()).registry
    out = {}
    for t in tangents:
        o = t[len("tangent."):]
        texts = expect.get(o)
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        try:
            exprs = [_tangent(parse_term(x, reg, "<expect>"), o) for x in texts]
        except InputError:  # (an expectation the verification will report; the forward decides here)
            return {}
        if not exprs or any(e is None for e in exprs):
            return {}
        out[t] = _one_relation(exprs)
    return out


def gradient_expectations(inputs: dict, s_outputs: list[str], d_outputs: list[str], plugins=None) -> dict:
    """``grad.p`` laid out like input ``p``: each ``p@r`` of p's relation becomes ``grad.p@r``, and a sum of
    partial values (the gradient of each is the whole gradient) one relation per operand. Only gradients
    that G_s computes and whose every piece G_d does."""
    from graphguard.ir.relation import parse_term
    from graphguard.plugins import load_plugins
    reg = (plugins or load_plugins()).registry
    have = set(d_outputs)
    out = {}
    for name, rel in inputs.items():
        g = f"grad.{name}"
        if g not in s_outputs:
            continue
        exprs = []
        for text in rel if isinstance(rel, list) else [rel]:
            exprs += _laid_out_like(parse_term(text, reg, "<relation>"))
        texts = list(dict.fromkeys(to_text(e) for e in exprs))
        if texts and all(leaf in have for e in exprs for leaf in leaves(e)):
            out[g] = texts if len(texts) > 1 else texts[0]
    return out


def _laid_out_like(e: Term) -> list[Term]:
    """The relations of the gradient of a tensor whose relation is ``e``, ``grad.`` before every G_d name."""
    if isinstance(e, Leaf):
        return [Leaf(f"grad.{e.name}")]
    assert isinstance(e, App)
    if e.op == "core.max":
        return []  # the gradient of a max reaches the operand that is the max: no layout to state
    if e.op == "core.sum":
        return [g for a in e.args for g in _laid_out_like(a)]  # each partial value's gradient is the whole one
    return [App(e.op, args, e.attrs) for args in itertools.product(*(_laid_out_like(a) for a in e.args))]


def _forward_only(doc: dict) -> dict:
    """The forward part of a joint capture: the ``out*`` outputs and what they need."""
    outs = [o for o in doc["outputs"] if o.split("@")[0].startswith("out")]
    producer = {o: i for i, n in enumerate(doc["nodes"]) for o in n["outputs"]}
    need, keep, stack = set(outs), set(), list(outs)
    while stack:
        i = producer.get(stack.pop())
        if i is not None and i not in keep:
            keep.add(i)
            new = set(doc["nodes"][i]["inputs"]) - need
            need |= new
            stack.extend(new)
    return dict(doc, inputs=[i for i in doc["inputs"] if i["name"] in need],
                nodes=[n for i, n in enumerate(doc["nodes"]) if i in keep], outputs=outs)


def _tangents_from_forward(spec, impl, rel: dict, tangents: list[str], plugins, where: str) -> dict:
    import graphguard

    from .capture import Captured
    fs, fd = Captured(_forward_only(spec.doc), spec.relation), Captured(_forward_only(impl.doc), impl.relation)
    fwd_inputs = {i["name"] for i in fs.doc["inputs"]}
    frel = dict(rel, inputs={k: v for k, v in rel["inputs"].items() if k in fwd_inputs})
    frel.pop("expect", None)
    frel.pop("allow_partial", None)
    # (an output may be partial here: its tangent is then the same on every rank)
    r = graphguard.verify(fs.graph(plugins), fd.graph(plugins), frel, allow_partial=True, plugins=plugins)
    if r.verdict != "refines":  # the forward's bug, reported as such (not "write the tangent's relation")
        raise ForwardVerdict(where, r, tangents)
    out = {}
    for t in tangents:
        o = t[len("tangent."):]
        exprs = [e for e in (_tangent(e, o) for e in r.r_o.get(o, [])) if e is not None]
        if not exprs:
            why = f"R_o maps {o} to {', '.join(to_text(e) for e in r.r_o.get(o, [])) or 'nothing'}"
            raise InputError(f"{where}: cannot derive the relation of {t} from the forward certificate: {why}; "
                             f"write it in relation(world, backward)")
        out[t] = _one_relation(exprs)
    return out


def _one_relation(exprs: list):
    """One tangent's relation from :func:`_tangent`'s results (texts or lists of them): a text, or a list."""
    flat = list(dict.fromkeys(x for e in exprs for x in (e if isinstance(e, list) else [e])))
    return flat if len(flat) > 1 else flat[0]


def _tangent(e: Term, out: str):
    """The tangent's relation for one R_o expression of output ``out`` (text, a list of texts, or None)."""
    names = list(leaves(e))
    if any(n.split("@")[0] != out for n in names):
        return None
    if isinstance(e, Leaf):
        return f"tangent.{e.name}"
    if _only(e, "core.sum"):
        return [f"tangent.{n}" for n in names]  # d sum(y@r) / d y@r = 1: the same gradient on every rank

    def rename(t: Term) -> Term | None:
        if isinstance(t, Leaf):
            return Leaf(f"tangent.{t.name}")
        if isinstance(t, App) and t.op == "core.concat":
            args = [rename(a) for a in t.args]
            return None if None in args else App(t.op, tuple(args), t.attrs)
        return None
    r = rename(e)
    return None if r is None else to_text(r)


def _only(t: Term, op: str) -> bool:
    return isinstance(t, Leaf) or (isinstance(t, App) and t.op == op and all(_only(a, op) for a in t.args))
