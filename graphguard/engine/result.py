"""Verdicts, failure reports and their text/JSON renderings."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import printable
from ..ir.expr import Term, to_text
from ..ir.graph import source_text

EXIT_CODES = {"refines": 0, "does-not-refine": 1, "inconclusive": 3}


@dataclass
class Failure:
    """Where inference stopped: the G_s operator, what was known of its inputs, what of G_d was explored."""
    op: str
    node: str
    loc: str | None
    outputs: list[str]
    reason: str
    input_relations: dict[str, list[str]]
    explored: list[str]
    replay: dict | None = None  # numeric evidence, filled by --replay
    partial_output: str | None = None  # the G_s output left as partial results on the ranks (if that is the failure)
    func: str | None = None  # the function of the user's code at loc, and the module path whose forward ran it
    module: str | None = None
    hint: str | None = None  # what explains the mismatch, where one is found (explain.py): a missing collective...
    sources: dict[str, str] = field(default_factory=dict)  # G_d tensor named in the report -> where its producer is
    neighbourhood: dict | None = None  # the operators around the failure, in both graphs (for a drawing)

    def where(self) -> str:
        """``modeling_llama.py:65 in forward, module model.layers.0.post_attention_layernorm`` (what is known)."""
        return source_text(self)


@dataclass
class NodeStat:
    node: str
    op: str
    seconds: float
    explored: int
    reused: bool = False  # took the result of an earlier operator with the same local problem (memo.py)


@dataclass
class VerifyResult:
    verdict: str = "inconclusive"
    r_o: dict[str, list[Term]] = field(default_factory=dict)
    failure: Failure | None = None
    relations: dict[str, list[Term]] = field(default_factory=dict)
    node_stats: list[NodeStat] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    replay: dict | None = None
    checked: dict | None = None  # the independent checker's report (graphguard/check.py), where it ran
    expect: dict | None = None
    sizes: list[tuple[str, str]] = field(default_factory=list)  # data-decided sizes proved equal (old, new name)
    assumed: list[str] = field(default_factory=list)  # where a proof step rests on the relation's assume:
    layers: list[dict] = field(default_factory=list)  # per model layer: its G_s operators, reused, seconds (layers.py)
    repeat: dict = field(default_factory=dict)  # "spec" / "impl" -> (layers' path, count) traced once (fx repeat)
    provenance: dict[str, str] = field(default_factory=dict)  # "T = expr" (R and R_o) -> the prover that made it

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def refines(self) -> bool:
        return self.verdict == "refines"

    def r_o_lines(self) -> list[str]:
        return [f"{t} = {to_text(e)}" for t, exprs in self.r_o.items() for e in exprs]

    def explained(self, line: str) -> str:
        """``line`` with the prover that made it (engine/prover.py), where recorded."""
        by = self.provenance.get(line)
        return f"{line}    <- {by}" if by else line

    def relation_lines(self) -> list[str]:
        """Every line of R (intermediate relations and R_o's tensors), in the order R was extended, each with its prover."""
        return [self.explained(f"{t} = {to_text(e)}") for t, exprs in self.relations.items() for e in exprs]

    def layers_line(self) -> str:
        """One line of the certificate: per layer, how many of its operators took the result of an operator
        met before (the same local problem up to names: a repeated layer's)."""
        per = [f"{x['layer']} {x['reused']}/{x['ops']}" for x in self.layers]
        if len(per) > 6:
            per = per[:3] + [f"... ({len(per) - 5} more)"] + per[-2:]
        ops = sum(x["ops"] for x in self.layers)
        reused = sum(x["reused"] for x in self.layers)
        return (f"layers: {len(self.layers)}; operators that reused an earlier operator's result: {reused} of {ops} "
                f"({', '.join(per)})")

    def repeat_line(self, which: str) -> str:
        path, n, tpl, *compared = self.repeat[which]
        what = {"spec": "G_s", "impl": "G_d"}.get(which, which)
        before = f"layers 0-{tpl} of '{path}' traced" if tpl else f"layer 0 of '{path}' traced"
        line = (f"{what}: {before}; layers {tpl + 1}-{n - 1} are copies of layer {tpl}'s graph over their own "
                f"weights (capture checked each a copy of layer {tpl} and called like it)")
        if compared:
            line += (f"; attributes that differ from layer {tpl}'s: {', '.join(compared[0])} -- each such layer "
                     f"traced alone and its graph compared with layer {tpl}'s, operator by operator: equal")
        return line

    def checked_lines(self) -> list[str]:
        """The independent checker's lines of the text report (graphguard/check.py)."""
        c = self.checked
        what = "R_o line(s)" if c["scope"] == "outputs" else "relation(s), R_o and intermediate,"
        skipped = f", {c['skipped']} skipped (no NumPy reference)" if c.get("skipped") else ""
        if c["error"] is not None:
            return [f"checked: NOT RUN: {c['error']} ({c['seconds']:.2f} s)"]
        if c["ok"]:
            return [f"checked: {c['confirmed']} {what} confirmed at {c['points']} random points in float64 "
                    f"(max error {c['max_error_ratio']:.2g} of the tolerance{skipped}, {c['seconds']:.2f} s)"]
        return ([f"checked: NOT CONFIRMED: {len(c['unconfirmed'])} of {c['lines']} {what} at {c['points']} random "
                 f"points in float64{skipped} ({c['seconds']:.2f} s):"]
                + [f"  not confirmed: {u}" for u in c["unconfirmed"]])

    def to_dict(self) -> dict:
        d = {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "r_o": {t: [to_text(e) for e in exprs] for t, exprs in self.r_o.items()},
            "failure": asdict(self.failure) if self.failure else None,
            "timings": self.timings,
            "nodes": [asdict(n) for n in self.node_stats],
            "stats": self.stats,
        }
        if self.sizes:
            d["sizes"] = [f"{a} = {b}" for a, b in self.sizes]
        if self.provenance:
            d["provenance"] = self.provenance
        if self.layers:
            d["layers"] = self.layers
        if self.repeat:
            d["repeat"] = {k: {"path": r[0], "layers": r[1], "template": r[2],
                               **({"compared": list(r[3])} if len(r) > 3 else {})} for k, r in self.repeat.items()}
        if self.replay is not None:
            d["replay"] = self.replay
        if self.checked is not None:
            d["checked"] = self.checked
        if self.expect is not None:
            d["expect"] = self.expect
        return d

    def render(self, explain: bool = False) -> str:
        """The text report; with ``explain``, each R_o line with its prover, then every line of R with its."""
        head = {"refines": "REFINES", "does-not-refine": "DOES NOT REFINE", "inconclusive": "INCONCLUSIVE"}
        t = self.timings
        lines = [f"graphguard: {head[self.verdict]}  ({t.get('n_spec_ops', 0)} G_s ops, "
                 f"{t.get('n_impl_ops', 0)} G_d ops, {t.get('total', 0.0):.2f} s)"]
        if self.verdict == "refines":
            lines.append("output relation R_o:")
            lines += ["  " + (self.explained(x) if explain else x) for x in self.r_o_lines()]
            if self.sizes:  # part of the certificate: the sizes R_o's shapes take as equal
                lines.append("with sizes that equal data decides (nonzero counts, slice lengths at bounds read from "
                             "tensors):")
                lines += [f"  {a} = {b}" for a, b in self.sizes]
        if self.assumed:  # part of the certificate: what it rests on beyond the input relation
            lines.append("under these assumptions (the relation's assume:, value ranges G_s's own operators imply):")
            lines += [f"  {a}" for a in self.assumed]
        if self.layers:
            lines.append(self.layers_line())
        lines += [self.repeat_line(k) for k in self.repeat]
        if self.failure:
            f = self.failure
            loc = f" at {f.where()}" if f.loc or f.module else ""
            lines.append(f"stopped at G_s operator {f.op} (node '{f.node}' -> {', '.join(f.outputs)}){loc}")
            lines.append(f"  reason: {f.reason}")
            if f.hint:
                lines.append(f"  hint: {f.hint}")
            if f.input_relations:
                lines.append("  relations known for its inputs:")
            for t, exprs in f.input_relations.items():
                for e in exprs or ["(none)"]:
                    lines.append(f"    {t} = {e}")
            if f.explored:
                lines.append(f"  G_d tensors explored for it: {', '.join(f.explored)}")
            if f.sources:  # the G_d tensors named above, by where their producers are in the user's code
                lines.append("  where those G_d tensors come from:")
                by_src: dict[str, list[str]] = {}
                for t, src in f.sources.items():
                    by_src.setdefault(src, []).append(t)
                for src, ts in by_src.items():
                    lines.append(f"    {', '.join(ts[:6])}{f' (+{len(ts) - 6})' if len(ts) > 6 else ''}: {src}")
            if f.replay:
                r = f.replay
                what = (f"the expected {r['candidate'][:-len(' (expected)')]}" if r["candidate"].endswith("(expected)")
                        else f"closest G_d reconstruction {r['candidate']}")
                times = f" ({r['tol_ratio']:.3g} times the tolerance)" if "tol_ratio" in r else ""
                lines.append(f"  replay: {what} differs from {r['output']} by max |diff| = {r['max_abs_diff']:.3g}"
                             f"{times}")
        if self.replay is not None:
            r = self.replay
            status = "ok" if r["ok"] else "MISMATCH"
            frac = f", at most {r['tol_ratio']:.2g} of the tolerance" if "tol_ratio" in r else ""
            if r.get("rechecked"):
                frac = f"; {len(r['rechecked'])} beyond the {r['dtype']} tolerance hold in float64"
            lines.append(f"replay: {status}: {r['checked']} relation(s) checked numerically in "
                         f"{r.get('dtype', 'graph')} dtypes (max |diff| {r['max_abs_diff']:.3g}{frac}, "
                         f"seed {r['seed']})")
            for m in r.get("mismatches", []):
                lines.append(f"  mismatch: {m}")
        if self.checked is not None:
            lines += self.checked_lines()
        if self.expect is not None:
            e = self.expect
            if not self.r_o:
                lines.append(f"expected relations: {e['checked']} not checked (inference stopped before the outputs)")
            elif e["missing"]:
                lines.append("expected relations NOT in R_o:")
                for t, exp, got in e["missing"]:
                    lines.append(f"  {t}: expected {exp}; R_o has {', '.join(got) or 'nothing'}")
            else:
                lines.append(f"expected relations: all {e['checked']} found in R_o")
        if explain and self.relations:
            lines.append("relations R, each line with the prover that made it:")
            lines += ["  " + x for x in self.relation_lines()]
        return "\n".join(printable(x) for x in lines)  # one report line per line, whatever the names hold
