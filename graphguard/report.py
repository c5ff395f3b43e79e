"""``graphguard report``: a verification result (``verify --json``) as one self-contained HTML page.

The page holds the verdict, the certificate R_o (when G_d refines G_s), the failure (operator, source line,
function and module, reason, hint, the relations known for its inputs, where the G_d tensors come from), the
per-operator timings (slowest first), the statistics, and a drawing of the failure's neighbourhood: the G_s
operator and its neighbours beside the explored G_d operators of every rank, laid out by grandalf's Sugiyama
(layered) layout and written as inline SVG. Nothing is fetched: no script, font or style sheet from the
network; the only script is a few lines that sort the timings table.

Every string from the result (tensor and node names, source locations, expressions) is user data: it is
escaped (``html.escape`` after :func:`graphguard.errors.printable`) and never evaluated.
"""
from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

from .errors import InputError, printable

VERDICTS = {  # verdict -> headline, colour
    "refines": ("REFINES", "#1a7f37"),
    "does-not-refine": ("DOES NOT REFINE", "#cf222e"),
    "inconclusive": ("INCONCLUSIVE", "#9a6700"),
}
TOP_NODES = 30  # rows of the timings table
MAX_DRAWN = 150  # operators drawn per graph (the neighbourhood is small; a hostile file is not)
MAX_LABEL = 36  # characters of a label line in the drawing (the tooltip has all of it)
RANK_COLOURS = ["#0969da", "#bf3989", "#1a7f37", "#9a6700", "#8250df", "#0a7ea4", "#bc4c00", "#57606a"]
SPEC_COLOUR = "#24292f"
COLLECTIVE_COLOUR = "#d4a72c"
FOCUS_COLOUR = "#cf222e"


def esc(x) -> str:
    """Any value as HTML text: printable (control characters escaped), then HTML-escaped (quotes too)."""
    return html.escape(printable(x if isinstance(x, str) else str(x)), quote=True)


def short(text: str, n: int = MAX_LABEL) -> str:
    return text if len(text) <= n else text[: n - 1] + "\u2026"


# ---------------------------------------------------------------------------------------------- checking --

def check_result(doc, source: str = "result") -> dict:
    """``doc`` if it has the shape of ``VerifyResult.to_dict()`` (the fields the page reads); else one
    InputError naming ``source``."""
    def bad(why: str):
        raise InputError(f"{source}: not a graphguard result ({why})")

    if not isinstance(doc, dict):
        bad(f"a JSON {type(doc).__name__}, not an object")
    if not isinstance(doc.get("verdict"), str) or doc["verdict"] not in VERDICTS:
        bad("no 'verdict' of " + ", ".join(VERDICTS))
    for key, typ in (("r_o", dict), ("timings", dict), ("stats", dict), ("nodes", list), ("layers", list), ("checked", dict),
                     ("repeat", dict), ("sizes", list), ("provenance", dict)):
        if doc.get(key) is not None and not isinstance(doc[key], typ):
            bad(f"'{key}' is not a JSON {'object' if typ is dict else 'array'}")
    if any(not isinstance(n, dict) for n in doc.get("nodes") or []):
        bad("an entry of 'nodes' is not an object")
    f = doc.get("failure")
    if f is not None:
        if not isinstance(f, dict) or not isinstance(f.get("op"), str) or not isinstance(f.get("node"), str):
            bad("'failure' is not an object with 'op' and 'node'")
        for key, typ in (("input_relations", dict), ("sources", dict), ("explored", list), ("outputs", list),
                         ("neighbourhood", dict)):
            if f.get(key) is not None and not isinstance(f[key], typ):
                bad(f"'failure.{key}' is not a JSON {'object' if typ is dict else 'array'}")
        nb = f.get("neighbourhood")
        if nb is not None:
            for side in ("spec", "impl"):
                if not isinstance(nb.get(side, []), list) or any(not isinstance(n, dict) or "name" not in n
                                                                 for n in nb.get(side, [])):
                    bad(f"'failure.neighbourhood.{side}' is not an array of node records")
    return doc


def load_result(path: str | Path) -> dict:
    """Read a result file written by ``verify --json``; a file that is not one is one InputError."""
    from .inputfile import load_json, read_text
    return check_result(load_json(read_text(str(path), hint="a file written by graphguard verify --json?"),
                                  str(path)), str(path))


def write_report(doc: dict, path: str | Path, source: str = "result") -> None:
    """Render ``doc`` (a result dict) and write the page to ``path``."""
    page = render_html(doc, source)
    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot write the HTML report ({e.strerror})") from None


def write_result_report(result, path: str | Path) -> None:
    """``verify --html``: a VerifyResult as the page ``graphguard report`` writes from its JSON."""
    write_report(json.loads(json.dumps(result.to_dict(), default=str)), path)


# ------------------------------------------------------------------------------------------------ drawing --

class _View:
    """A grandalf vertex view: size in, centre (``xy``) out."""

    def __init__(self, w: float, h: float):
        self.w, self.h, self.xy = w, h, (0.0, 0.0)


class _EdgeView:
    def __init__(self):
        self.pts: list = []

    def setpath(self, pts):
        self.pts = [tuple(p) for p in pts]


class _Box:
    """One drawn vertex: an operator record (kind "op") or a tensor with no producer in the drawing."""

    def __init__(self, key: str, kind: str, side: str, lines: list[str], title: str, rec: dict | None = None,
                 rank: int | None = None):
        self.key, self.kind, self.side, self.lines, self.title, self.rec, self.rank = \
            key, kind, side, lines, title, rec or {}, rank
        w = max(len(x) for x in lines) * 6.8 + (22 if kind == "op" else 16)
        self.w, self.h = max(w, 44.0), 14.0 * len(lines) + (10 if kind == "op" else 6)
        self.x = self.y = 0.0  # centre, after layout
        self.ranks = [r for r in self.rec.get("ranks") or [] if isinstance(r, int) and not isinstance(r, bool)] \
            if kind == "op" else [rank] if rank is not None else []


def _rank_of_name(name: str) -> int | None:
    m = re.search(r"@(\d+)$", name)
    return int(m.group(1)) if m else None


def _src_line(rec: dict) -> str:
    loc, func = rec.get("loc"), rec.get("func")
    return f"{loc}{f' in {func}' if func else ''}" if loc else ""


def _op_title(rec: dict, side: str) -> str:
    parts = [f"{'G_s' if side == 'spec' else 'G_d'} {rec.get('op', '?')} (node {rec.get('name')})",
             f"inputs: {', '.join(map(str, rec.get('inputs') or [])) or '-'}",
             f"outputs: {', '.join(map(str, rec.get('outputs') or [])) or '-'}"]
    if rec.get("loc"):
        parts.append(f"source: {_src_line(rec)}")
    if rec.get("module"):
        parts.append(f"module: {rec['module']}")
    if rec.get("ranks"):
        parts.append(f"ranks: {', '.join(map(str, rec['ranks']))}")
    if rec.get("collective"):
        parts.append("collective")
    return "\n".join(parts)


def _strs(xs) -> list[str]:
    return [str(x) for x in xs] if isinstance(xs, list) else []


class _Side:
    """One graph of the drawing (G_s or G_d): operator boxes, boxes of tensors produced outside it, edges
    by tensor name, laid out by grandalf's Sugiyama layout, component by component, left to right."""

    def __init__(self, side: str, records: list[dict]):
        self.side = side
        self.boxes: list[_Box] = []
        self.edges: list[tuple[_Box, _Box, str]] = []
        self.producer: dict[str, _Box] = {}
        self.omitted = max(0, len(records) - MAX_DRAWN)
        for rec in records[:MAX_DRAWN]:
            ranks = [r for r in rec.get("ranks") or [] if isinstance(r, int)]
            op = str(rec.get("op", "?"))
            lines = [short(op), short(str(rec.get("name")))]
            if rec.get("loc"):
                lines.append(short(str(rec["loc"])))
            box = _Box(f"op:{rec.get('name')}", "op", side, lines, _op_title(rec, side), rec,
                       ranks[0] if len(ranks) == 1 else None)
            self.boxes.append(box)
            for t in _strs(rec.get("outputs")):
                self.producer.setdefault(t, box)
        self.tensor_box: dict[str, _Box] = {}
        for box in [b for b in self.boxes if b.kind == "op"]:
            seen = set()
            for t in _strs(box.rec.get("inputs")):
                src = self.anchor(t)
                if (src, t) not in seen and src is not box:
                    seen.add((src, t))
                    self.edges.append((src, box, t))

    def anchor(self, tensor: str) -> _Box:
        """The box an edge of ``tensor`` starts at: its producer, else a box of its own."""
        if tensor in self.producer:
            return self.producer[tensor]
        if tensor not in self.tensor_box:
            box = _Box(f"t:{tensor}", "tensor", self.side, [short(tensor)],
                       f"{'G_s' if self.side == 'spec' else 'G_d'} tensor {tensor} (produced outside the drawing)",
                       rank=_rank_of_name(tensor) if self.side == "impl" else None)
            self.tensor_box[tensor] = box
            self.boxes.append(box)
        return self.tensor_box[tensor]

    def layout(self) -> tuple[float, float]:
        """Place every box (centres ``x``, ``y``) and route every edge; return the drawing's width, height."""
        from grandalf.graphs import Edge, Graph, Vertex
        from grandalf.layouts import SugiyamaLayout

        vs = {}
        for b in self.boxes:
            v = Vertex(b)
            v.view = _View(b.w, b.h)
            vs[id(b)] = v
        es = []
        for a, b, t in self.edges:
            e = Edge(vs[id(a)], vs[id(b)], data=t)
            e.view = _EdgeView()
            es.append(e)
        g = Graph(list(vs.values()), es)
        comps = []
        for c in g.C:
            sug = SugiyamaLayout(c)
            sug.xspace, sug.yspace = 24, 46
            sug.init_all()
            sug.draw()
            verts = list(c.sV)
            ranks = [r for v in verts for r in v.data.ranks]
            first = min(self.boxes.index(v.data) for v in verts)
            comps.append((tuple(sorted(set(ranks))), first, c, verts))
        # G_d: one lane (a row) per rank, then one per set of ranks a component spans (collectives)
        lanes: dict[tuple, list] = {}
        for key, first, c, verts in sorted(comps, key=lambda x: x[1]):
            lanes.setdefault(key if self.side == "impl" else (), []).append((c, verts))
        width, y0 = 0.0, 0.0
        self.paths: dict[int, list] = {}
        self.lanes = []  # [ranks, top, height] of each lane, for its band and label
        for key in sorted(lanes, key=lambda k: (len(k) != 1, len(k), k)):
            x0, height, lane_y = 12.0, 0.0, y0
            if self.side == "impl":
                y0 += 22  # the lane's label
            for c, verts in lanes[key]:
                left = min(v.view.xy[0] - v.view.w / 2 for v in verts)
                top = min(v.view.xy[1] - v.view.h / 2 for v in verts)
                right = max(v.view.xy[0] + v.view.w / 2 for v in verts)
                bottom = max(v.view.xy[1] + v.view.h / 2 for v in verts)
                dx, dy = x0 - left, y0 - top
                for v in verts:
                    v.data.x, v.data.y = v.view.xy[0] + dx, v.view.xy[1] + dy
                for e in c.sE:
                    self.paths[id(e)] = [(px + dx, py + dy) for px, py in e.view.pts]
                x0 += right - left + 30
                height = max(height, bottom - top)
            width = max(width, x0 - 30 + 12)
            y0 += height + 12
            self.lanes.append([key, lane_y, y0 - lane_y])
            y0 += 14
        self.width = width
        self.edge_paths = [(a, b, t, self.paths.get(id(e), [])) for (a, b, t), e in zip(self.edges, es)]
        return width, max(y0 - 14, 0.0)

    def shift(self, dx: float, dy: float) -> None:
        self.lanes = [[k, y + dy, h] for k, y, h in self.lanes]
        self.dx = dx
        for b in self.boxes:
            b.x, b.y = b.x + dx, b.y + dy
        self.edge_paths = [(a, b, t, [(x + dx, y + dy) for x, y in p]) for a, b, t, p in self.edge_paths]


def _clip(box: _Box, toward: tuple[float, float]) -> tuple[float, float]:
    """Where the segment from ``box``'s centre toward ``toward`` leaves the box."""
    dx, dy = toward[0] - box.x, toward[1] - box.y
    if dx == 0 and dy == 0:
        return box.x, box.y
    sx = (box.w / 2) / abs(dx) if dx else math.inf
    sy = (box.h / 2 + 2) / abs(dy) if dy else math.inf
    s = min(sx, sy, 1.0)
    return box.x + dx * s, box.y + dy * s


def _route(a: _Box, b: _Box, pts: list) -> list[tuple[float, float]]:
    """The polyline of an edge a -> b: grandalf's points (centre, dummies, centre), oriented a to b and
    clipped at the two boxes."""
    pts = list(pts) or [(a.x, a.y), (b.x, b.y)]
    if math.dist(pts[0], (a.x, a.y)) > math.dist(pts[-1], (a.x, a.y)):
        pts.reverse()
    inner = pts[1:-1]
    start = _clip(a, inner[0] if inner else (b.x, b.y))
    end = _clip(b, inner[-1] if inner else (a.x, a.y))
    return [start, *inner, end]


def _fmt(p) -> str:
    return f"{p[0]:.1f},{p[1]:.1f}"


def _box_svg(b: _Box, focus: str | None, explored: set[str]) -> str:
    rec = b.rec
    classes = ["node" if b.kind == "op" else "tensor", b.side]
    if b.kind == "op":
        coll = bool(rec.get("collective"))
        if coll:
            classes.append("collective")
        is_focus = b.side == "spec" and str(rec.get("name")) == focus
        if is_focus:
            classes.append("focus")
        if b.side == "impl" and any(t in explored for t in _strs(rec.get("outputs"))):
            classes.append("explored")
        if b.side == "spec":
            colour = FOCUS_COLOUR if is_focus else SPEC_COLOUR
        elif coll:
            colour = COLLECTIVE_COLOUR
        else:
            colour = RANK_COLOURS[b.rank % len(RANK_COLOURS)] if b.rank is not None else "#57606a"
    else:
        colour = (RANK_COLOURS[b.rank % len(RANK_COLOURS)] if b.rank is not None else "#57606a")
    x0, y0, w, h = b.x - b.w / 2, b.y - b.h / 2, b.w, b.h
    out = [f'<g class="{" ".join(classes)}" data-name="{esc(rec.get("name", b.key[2:]))}">',
           f"<title>{esc(b.title)}</title>"]
    if b.kind == "tensor":
        out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{h / 2:.1f}" '
                   f'fill="#fff" stroke="{colour}" stroke-dasharray="3 2"/>')
    elif "collective" in classes:  # a hexagon: collectives stand out by shape as well as colour
        k = 10.0
        pts = [(x0, b.y), (x0 + k, y0), (x0 + w - k, y0), (x0 + w, b.y), (x0 + w - k, y0 + h), (x0 + k, y0 + h)]
        out.append(f'<polygon points="{" ".join(map(_fmt, pts))}" fill="#fff8c5" stroke="{colour}" '
                   f'stroke-width="2.5"/>')
    else:
        fill = "#ffebe9" if "focus" in classes else "#f6f8fa" if b.side == "spec" else "#ffffff"
        width = 3 if "focus" in classes else 1.6
        out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{w:.1f}" height="{h:.1f}" rx="4" fill="{fill}" '
                   f'stroke="{colour}" stroke-width="{width}"/>')
        if b.side == "impl":  # the rank's colour as a band on the left
            out.append(f'<rect x="{x0:.1f}" y="{y0:.1f}" width="6" height="{h:.1f}" rx="2" fill="{colour}"/>')
    for i, line in enumerate(b.lines):
        y = y0 + (8 if b.kind == "op" else 6) + 14 * i + 10
        cls = "l1" if i == 0 and b.kind == "op" else "l2"
        out.append(f'<text x="{b.x:.1f}" y="{y:.1f}" class="{cls}">{esc(line)}</text>')
    out.append("</g>")
    return "".join(out)


def _edge_svg(a: _Box, b: _Box, t: str, pts: list) -> str:
    route = _route(a, b, pts)
    mid = route[len(route) // 2 - 1] if len(route) > 2 else route[0]
    mid2 = route[len(route) // 2]
    lx, ly = (mid[0] + mid2[0]) / 2, (mid[1] + mid2[1]) / 2
    label = "" if a.kind == "tensor" else \
        f'<text x="{lx + 4:.1f}" y="{ly:.1f}" class="et">{esc(short(t, 24))}</text>'  # a tensor box names it
    return (f'<g class="edge" data-tensor="{esc(t)}"><title>{esc(t)}</title>'
            f'<polyline points="{" ".join(map(_fmt, route))}" marker-end="url(#gg-arrow)"/>{label}</g>')


def _relation_targets(expr: str, names: list[str]) -> list[str]:
    """The G_d tensors of ``names`` that the expression text names (as whole names)."""
    out = []
    for n in names:
        if n and re.search(rf"(?<![\w.@]){re.escape(n)}(?![\w@])", expr):
            out.append(n)
    return out


def render_svg(failure: dict) -> str:
    """The failure's neighbourhood as inline SVG ('' when the result has none)."""
    nb = failure.get("neighbourhood")
    if not isinstance(nb, dict) or not (nb.get("spec") or nb.get("impl")):
        return ""
    focus = str(nb.get("focus", failure.get("node")))
    explored = set(_strs(failure.get("explored")))
    spec, impl = _Side("spec", nb.get("spec") or []), _Side("impl", nb.get("impl") or [])
    # the relations of the failing operator's inputs: G_s input tensor -> the G_d tensors each names
    rels = failure.get("input_relations") or {}
    focus_rec = next((r for r in nb.get("spec") or [] if str(r.get("name")) == focus), {})
    spec_inputs = list(dict.fromkeys(_strs(focus_rec.get("inputs")) + [str(k) for k in rels]))
    known = list(dict.fromkeys([*impl.producer, *(t for b in impl.boxes if b.kind == "op"
                                                  for t in _strs(b.rec.get("inputs"))),
                                *explored, *map(str, failure.get("sources") or {})]))
    links = []  # (G_s tensor, G_d tensor, expression)
    for t in spec_inputs:
        for expr in _strs(rels.get(t) if isinstance(rels, dict) else None):
            for u in _relation_targets(expr, known):
                links.append((t, u, expr))
    anchors = {(t, u): (spec.anchor(t), impl.anchor(u)) for t, u, _ in links}
    ws, hs = spec.layout()
    wd, hd = impl.layout()
    pad, gap, head = 20.0, 150.0, 34.0
    spec.shift(pad, pad + head)
    impl.shift(pad + ws + gap, pad + head)
    width, height = pad * 2 + ws + gap + wd, pad * 2 + head + max(hs, hd)
    exprs: dict[tuple[str, str], list[str]] = {}
    for t, u, e in links:
        exprs.setdefault((t, u), []).append(e)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="gg-graph" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="failure neighbourhood">',
           '<defs><marker id="gg-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#57606a"/></marker>'
           '<marker id="gg-rel" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#cf222e"/></marker></defs>',
           f'<text x="{pad:.0f}" y="{pad + 12:.0f}" class="hd">G_s (specification)</text>',
           f'<text x="{pad + ws + gap:.0f}" y="{pad + 12:.0f}" class="hd">G_d (implementation, every rank)</text>',
           f'<line x1="{pad + ws + gap / 2:.0f}" y1="{pad:.0f}" x2="{pad + ws + gap / 2:.0f}" '
           f'y2="{height - pad:.0f}" class="sep"/>']
    for key, y, h in impl.lanes:
        colour = RANK_COLOURS[key[0] % len(RANK_COLOURS)] if len(key) == 1 else COLLECTIVE_COLOUR
        label = (f"rank {key[0]}" if len(key) == 1 else f"ranks {', '.join(map(str, key))}" if key
                 else "no rank")
        out.append(f'<g class="lane" data-ranks="{esc(",".join(map(str, key)))}"><rect x="{impl.dx:.1f}" '
                   f'y="{y:.1f}" width="{impl.width:.1f}" height="{h:.1f}" rx="6" fill="{colour}" '
                   f'fill-opacity="0.06" stroke="{colour}" stroke-opacity="0.35"/><text x="{impl.dx + 8:.1f}" '
                   f'y="{y + 16:.1f}" class="lane-l" style="fill:{colour}">{esc(label)}</text></g>')
    out += [_edge_svg(a, b, t, p) for side in (spec, impl) for a, b, t, p in side.edge_paths]
    for (t, u), (a, b) in anchors.items():
        (x1, y1), (x2, y2) = (a.x + a.w / 2, a.y), (b.x - b.w / 2, b.y)
        c = max(60.0, abs(x2 - x1) / 3)
        tip = "\n".join(f"{t} = {e}" for e in exprs[(t, u)])
        out.append(f'<g class="rel" data-spec="{esc(t)}" data-impl="{esc(u)}"><title>{esc(tip)}</title>'
                   f'<path d="M{x1:.1f},{y1:.1f} C{x1 + c:.1f},{y1:.1f} {x2 - c:.1f},{y2:.1f} {x2:.1f},{y2:.1f}" '
                   f'marker-end="url(#gg-rel)"/></g>')
    out += [_box_svg(b, focus, explored) for side in (spec, impl) for b in side.boxes]
    out.append("</svg>")
    notes = []
    for side, name in ((spec, "G_s"), (impl, "G_d")):
        if side.omitted:
            notes.append(f"{side.omitted} more {name} operators of the neighbourhood are not drawn")
    ranks = sorted({b.rank for b in impl.boxes if b.rank is not None})
    legend = ['<div class="legend">',
              f'<span><i style="border-color:{FOCUS_COLOUR};background:#ffebe9"></i>the failing G_s operator</span>',
              f'<span><i style="border-color:{SPEC_COLOUR};background:#f6f8fa"></i>G_s operator</span>']
    legend += [f'<span><i style="border-color:{RANK_COLOURS[r % len(RANK_COLOURS)]};border-left-width:6px"></i>'
               f'G_d rank {r}</span>' for r in ranks]
    legend += [f'<span><i class="hex" style="border-color:{COLLECTIVE_COLOUR};background:#fff8c5"></i>collective '
               '(hexagon)</span>',
               '<span><i style="border-style:dashed;border-radius:8px"></i>tensor produced outside the drawing</span>',
               '<span><b class="relkey"></b>relation of a G_s input to the G_d tensors it names</span>',
               "</div>"]
    return ("".join(legend) + "".join(f'<p class="note">{esc(n)}</p>' for n in notes)
            + '<div class="graph">' + "\n".join(out) + "</div>")


# --------------------------------------------------------------------------------------------------- page --

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:0;color:#24292f;
background:#fff}
main{max-width:1400px;margin:0 auto;padding:18px 28px 40px}
h1{font-size:20px;margin:0 0 10px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:12.5px}
pre{background:#f6f8fa;padding:8px 10px;border-radius:6px;overflow:auto;white-space:pre-wrap;word-break:break-all}
.verdict{display:flex;align-items:baseline;gap:18px;padding:12px 18px;border-radius:8px;color:#fff}
.verdict b{font-size:24px;letter-spacing:.04em}.verdict span{opacity:.95}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #d0d7de;padding:3px 9px;text-align:left;
vertical-align:top}th{background:#f6f8fa}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
table.kv th{width:190px}table.sortable th{cursor:pointer;user-select:none}table.sortable th:after{content:" \\2195";
color:#8c959f}tr.total td{font-weight:600;background:#f6f8fa}
.hint{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:8px 12px}
.graph{overflow:auto;border:1px solid #d0d7de;border-radius:6px;padding:4px;background:#fff}
svg.gg-graph text{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;
font-size:11px;text-anchor:middle;fill:#24292f}
svg.gg-graph text.l1{font-weight:600}svg.gg-graph text.l2{fill:#57606a}
svg.gg-graph text.et{text-anchor:start;font-size:10px;fill:#6e7781}svg.gg-graph text.hd{text-anchor:start;
font:600 13px system-ui,sans-serif}svg.gg-graph text.lane-l{text-anchor:start;font:600 12px system-ui,sans-serif}
svg.gg-graph .edge polyline{fill:none;stroke:#8c959f;stroke-width:1.3}
svg.gg-graph .rel path{fill:none;stroke:#cf222e;stroke-width:1.4;stroke-dasharray:6 4;opacity:.75}
svg.gg-graph .rel:hover path{stroke-width:3;opacity:1}svg.gg-graph .sep{stroke:#d0d7de;stroke-dasharray:2 4}
svg.gg-graph g.explored rect:first-of-type{stroke-width:2.6}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:6px 0;font-size:12.5px}
.legend i{display:inline-block;width:22px;height:12px;border:2px solid #57606a;border-radius:3px;
margin-right:6px;vertical-align:middle}.legend i.hex{clip-path:polygon(25% 0,75% 0,100% 50%,75% 100%,25% 100%,0 50%);
border-radius:0;background:#d4a72c!important}
.legend b.relkey{display:inline-block;width:26px;border-top:2px dashed #cf222e;margin-right:6px;vertical-align:middle}
.note,.muted{color:#57606a}
"""

SORT_JS = """
window.addEventListener("load", function () { document.body.setAttribute("data-loaded", "complete"); });
document.querySelectorAll("table.sortable").forEach(function (t) {
  t.querySelectorAll("th").forEach(function (th, i) {
    th.addEventListener("click", function () {
      var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var dir = th.getAttribute("data-dir") === "d" ? 1 : -1;
      th.setAttribute("data-dir", dir < 0 ? "d" : "a");
      rows.sort(function (a, b) {
        var x = a.cells[i].getAttribute("data-v"), y = b.cells[i].getAttribute("data-v");
        if (x !== null && y !== null) { return dir * (parseFloat(x) - parseFloat(y)); }
        return dir * a.cells[i].textContent.localeCompare(b.cells[i].textContent);
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def _num(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else 0.0


def _kv(rows: list[tuple[str, str]], cls: str = "kv") -> str:
    """A two-column table; values are HTML already."""
    return (f'<table class="{cls}">' + "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
            + "</table>")


def _code(x) -> str:
    return f"<code>{esc(x)}</code>"


def _where(d: dict) -> str:
    loc, func, mod = d.get("loc"), d.get("func"), d.get("module")
    parts = [f"{loc}{f' in {func}' if func else ''}"] if loc else []
    if mod:
        parts.append(f"module {mod}")
    return ", ".join(map(str, parts))


def _headline(doc: dict) -> str:
    head, colour = VERDICTS[doc["verdict"]]
    t = doc.get("timings") or {}
    return (f'<div class="verdict" style="background:{colour}"><b>{head}</b><span>'
            f'{esc(int(_num(t.get("n_spec_ops"))))} G_s operators, {esc(int(_num(t.get("n_impl_ops"))))} G_d '
            f'operators, {_num(t.get("total")):.2f} s; exit code {esc(doc.get("exit_code", "?"))}</span></div>')


def _certificate(doc: dict) -> str:
    r_o = doc.get("r_o") or {}
    if doc["verdict"] != "refines" and not r_o:
        return ""
    out = ["<h2>Certificate: the output relation R_o</h2>",
           '<p class="muted">Each G_s output as an expression over G_d tensors (slice / concat / permute / '
           "reshape of the ranks' outputs).</p>"]
    by = doc.get("provenance") or {}
    rows = [(str(t), "<br>".join(_code(e) + _prover(by.get(f"{t} = {e}")) for e in (v if isinstance(v, list) else [v])))
            for t, v in r_o.items()]
    out.append(_kv(rows, "kv mono") if rows else '<p class="muted">(no outputs)</p>')
    if doc.get("sizes"):
        out.append("<p>with sizes that equal data decides (nonzero counts, slice lengths at bounds read from tensors):</p>"
                   + "<br>".join(_code(s) for s in doc["sizes"]))
    return "".join(out)


def _prover(by) -> str:
    """The prover that made an R_o line (engine/prover.py), beside it."""
    return f' <span class="muted">&larr; {esc(by)}</span>' if isinstance(by, str) and by else ""


def _failure(doc: dict) -> str:
    f = doc.get("failure")
    if not f:
        return ""
    rows = [("operator", _code(f["op"])), ("node", _code(f["node"]) + " &rarr; "
                                          + ", ".join(_code(o) for o in _strs(f.get("outputs"))))]
    where = _where(f)
    rows.append(("source", _code(f.get("loc") or "?") + (f" in {_code(f['func'])}" if f.get("func") else "")))
    if f.get("module"):
        rows.append(("module", _code(f["module"])))
    rows.append(("reason", esc(f.get("reason", ""))))
    if f.get("partial_output"):
        rows.append(("partial output", _code(f["partial_output"])))
    out = ["<h2>Where inference stopped</h2>",
           f'<p>G_s operator {_code(f["op"])} at <b>{esc(where or "an unknown location")}</b></p>', _kv(rows)]
    if f.get("hint"):
        out.append(f'<p class="hint"><b>Hint:</b> {esc(f["hint"])}</p>')
    svg = render_svg(f)
    if svg:
        out.append("<h3>The failure's neighbourhood</h3>"
                   '<p class="muted">Left: the failing G_s operator and its neighbours; right: the G_d operators '
                   "around the tensors explored for it, on every rank (laid out by grandalf's Sugiyama layout). "
                   "Edges carry tensor names; hover a box for its full source and module, a dashed edge for "
                   "the relation it stands for.</p>" + svg)
    rels = f.get("input_relations") or {}
    if rels:
        out.append("<h3>Relations known for its inputs</h3>")
        out.append(_kv([(str(t), "<br>".join(_code(f"{t} = {e}") for e in _strs(v)) or '<span class="muted">'
                         "(none)</span>") for t, v in rels.items()], "kv mono"))
    if f.get("explored"):
        out.append(f"<h3>G_d tensors explored for it</h3><p>{', '.join(_code(t) for t in _strs(f['explored']))}</p>")
    src = f.get("sources") or {}
    if src:
        by: dict[str, list[str]] = {}
        for t, s in src.items():
            by.setdefault(str(s), []).append(str(t))
        out.append("<h3>Where those G_d tensors come from</h3>")
        out.append('<table><tr><th>source</th><th>G_d tensors</th></tr>' + "".join(
            f"<tr><td>{_code(s)}</td><td>{', '.join(_code(t) for t in ts)}</td></tr>" for s, ts in by.items())
            + "</table>")
    if f.get("replay"):
        out.append("<h3>Replay (numeric evidence)</h3>" + f"<pre>{esc(json.dumps(f['replay'], indent=1))}</pre>")
    return "".join(out)


def _timings(doc: dict) -> str:
    nodes = [n for n in doc.get("nodes") or [] if isinstance(n, dict)]
    if not nodes:
        return ""
    ranked = sorted(nodes, key=lambda n: -_num(n.get("seconds")))
    total = sum(_num(n.get("seconds")) for n in nodes)
    rows = []
    for i, n in enumerate(ranked[:TOP_NODES]):
        s, ex = _num(n.get("seconds")), _num(n.get("explored"))
        rows.append(f'<tr><td class="n" data-v="{i + 1}">{i + 1}</td><td>{_code(n.get("node", "?"))}</td>'
                    f'<td>{_code(n.get("op", "?"))}</td><td class="n" data-v="{s!r}">{s:.4f}</td>'
                    f'<td class="n" data-v="{100 * s / total if total else 0:.3f}">'
                    f'{100 * s / total if total else 0:.1f} %</td><td class="n" data-v="{ex:.0f}">{ex:.0f}</td>'
                    f'<td data-v="{int(bool(n.get("reused")))}">{"yes" if n.get("reused") else ""}</td></tr>')
    reused = sum(1 for n in nodes if n.get("reused"))
    foot = (f'<tfoot><tr class="total"><td></td><td>all {len(nodes)} operators</td><td></td><td class="n">'
            f'{total:.4f}</td><td class="n">100 %</td><td class="n">{sum(_num(n.get("explored")) for n in nodes):.0f}'
            f'</td><td>{reused} reused</td></tr></tfoot>')
    shown = f"the {min(TOP_NODES, len(nodes))} slowest of {len(nodes)}" if len(nodes) > TOP_NODES else "all"
    out = [f'<h2>Per-operator timings</h2><p class="muted">G_s operators, slowest first ({shown}); click a '
           "column to sort. Explored: G_d tensors considered; reused: the result of an earlier operator with "
           "the same local problem.</p>",
           '<table class="sortable"><thead><tr><th class="n">#</th><th>node</th><th>operator</th>'
           '<th class="n">seconds</th><th class="n">share</th><th class="n">explored</th><th>reused</th></tr>'
           "</thead><tbody>", "".join(rows), "</tbody>", foot, "</table>"]
    layers = [x for x in doc.get("layers") or [] if isinstance(x, dict)]
    if layers:
        out.append("<h3>Layers</h3><table><tr><th>layer</th><th class='n'>operators</th><th class='n'>reused</th>"
                   "<th class='n'>seconds</th></tr>" + "".join(
                       f"<tr><td>{_code(x.get('layer', '?'))}</td><td class='n'>{esc(x.get('ops', ''))}</td>"
                       f"<td class='n'>{esc(x.get('reused', ''))}</td><td class='n'>{_num(x.get('seconds')):.3f}"
                       "</td></tr>" for x in layers) + "</table>")
    return "".join(out)


def _scalar(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list)):
        return f"<code>{esc(json.dumps(v))}</code>"
    return esc(v)


def _stats(doc: dict) -> str:
    out = ["<h2>Statistics</h2>"]
    t = doc.get("timings") or {}
    if t:
        out.append("<h3>Timings</h3>" + _kv([(k, _scalar(v) + (" s" if isinstance(v, float) else ""))
                                             for k, v in t.items()]))
    st = doc.get("stats") or {}
    plain = [(k, _scalar(v)) for k, v in st.items() if k != "lemma_hits"]
    if plain:
        out.append("<h3>Search</h3>" + _kv(plain))
    hits = st.get("lemma_hits")
    if isinstance(hits, dict) and hits:
        top = sorted(hits.items(), key=lambda kv: -_num(kv[1]))
        out.append(f"<h3>Lemma hits</h3><p class='muted'>{len(hits)} lemmas applied, "
                   f"{sum(_num(v) for v in hits.values()):.0f} applications; the most used first.</p>"
                   + '<table class="sortable"><thead><tr><th>lemma</th><th class="n">hits</th></tr></thead><tbody>'
                   + "".join(f'<tr><td>{_code(k)}</td><td class="n" data-v="{_num(v):.0f}">{esc(v)}</td></tr>'
                             for k, v in top[:TOP_NODES]) + "</tbody></table>")
    for key, what in (("repeat", "Layers traced once"), ("replay", "Replay"), ("checked", "Independent check"),
                      ("expect", "Expected relations")):
        if doc.get(key) is not None:
            out.append(f"<h3>{what}</h3><pre>{esc(json.dumps(doc[key], indent=1, default=str))}</pre>")
    return "".join(out) if len(out) > 1 else ""


def render_html(doc: dict, source: str = "result") -> str:
    """The page for a result dict (``VerifyResult.to_dict()``, or the JSON ``verify --json`` wrote)."""
    from .inputfile import malformed
    with malformed(source, "graphguard result"):
        check_result(doc, source)
        head = VERDICTS[doc["verdict"]][0]
        f = doc.get("failure") or {}
        title = f"graphguard: {head}" + (f" at {f.get('op')} ({_where(f)})" if f else "")
        body = [_headline(doc), _certificate(doc), _failure(doc), _timings(doc), _stats(doc)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "script-src 'unsafe-inline'; img-src data:\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>"
            f"<h1>graphguard verification report</h1>{''.join(body)}"
            '<p class="muted" style="margin-top:30px">Written by <code>graphguard report</code>; one file, '
            "nothing loaded from the network.</p></main>"
            f"<script>{SORT_JS}</script></body></html>\n")
