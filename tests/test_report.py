"""graphguard report / verify --html: one self-contained HTML page per result (graphguard/report.py).

(a) render_html on a stored failure (HF Llama with a forgotten all-reduce, tests/data/report-failure.json) and
on results verified here in-process (paper-fig1 and its missing reduction): the verdict, R_o, the failure,
the timings, and the drawing -- one SVG group per neighbourhood operator, collectives marked, ranks in lanes,
every user string escaped; (b) the CLI; (c) the page opened in a headless chromium: the drawing is in the DOM
chromium built, the page finished loading, and chromium's network log holds no request the page made.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import run_cli, write_example

from graphguard.errors import InputError
from graphguard.report import render_html

DATA = Path(__file__).parent / "data"
FAILURE = DATA / "report-failure.json"
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def failure_doc() -> dict:
    return json.loads(FAILURE.read_text())


def _verify_dict(tmp_path: Path, variant: str) -> dict:
    import graphguard
    d = write_example(tmp_path, 2, variant)
    r = graphguard.verify(d / "spec.gg.json", d / "impl.gg.json", d / "relation.yaml")
    return json.loads(json.dumps(r.to_dict(), default=str))  # what verify --json writes


def _svg(page: str) -> ET.Element:
    """The drawing of a page, parsed as XML (it must be well formed: escaping holds)."""
    m = re.search(r"<svg .*?</svg>", page, re.S)
    assert m, "no drawing in the page"
    return ET.fromstring(m.group(0))


def _groups(svg: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG_NS}g") if cls in g.get("class", "").split()]


def _box(g: ET.Element) -> tuple[float, float, float, float]:
    """x0, y0, x1, y1 of a node group's shape."""
    shape = g.find(f"{SVG_NS}rect")
    if shape is not None:
        x, y = float(shape.get("x")), float(shape.get("y"))
        return x, y, x + float(shape.get("width")), y + float(shape.get("height"))
    pts = [tuple(map(float, p.split(","))) for p in g.find(f"{SVG_NS}polygon").get("points").split()]
    return min(p[0] for p in pts), min(p[1] for p in pts), max(p[0] for p in pts), max(p[1] for p in pts)


def _check_drawing(page: str, failure: dict) -> ET.Element:
    """The drawing shows every neighbourhood operator once, collectives marked, laid out in layers."""
    nb = failure["neighbourhood"]
    svg = _svg(page)
    nodes = _groups(svg, "node")
    assert len(nodes) == len(nb["spec"]) + len(nb["impl"])
    assert sorted(g.get("data-name") for g in _groups(svg, "spec") if "node" in g.get("class"))\
        == sorted(r["name"] for r in nb["spec"])
    assert sorted(g.get("data-name") for g in _groups(svg, "impl") if "node" in g.get("class"))\
        == sorted(r["name"] for r in nb["impl"])
    colls = {g.get("data-name") for g in _groups(svg, "collective")}
    assert colls == {r["name"] for r in nb["impl"] if r["collective"]}
    for g in _groups(svg, "collective"):  # a distinct shape: a hexagon
        assert g.find(f"{SVG_NS}polygon") is not None and len(g.find(f"{SVG_NS}polygon").get("points").split()) == 6
    assert [g.get("data-name") for g in _groups(svg, "focus")] == [nb["focus"]]
    for g in nodes:  # a tooltip with the full source and module
        rec = next(r for r in nb["spec"] + nb["impl"] if r["name"] == g.get("data-name"))
        title = g.find(f"{SVG_NS}title").text
        assert rec["op"] in title and (rec["loc"] or "") in title and (rec["module"] or "") in title
    # one lane per rank on the G_d side, plus one for the operators across ranks (collectives)
    ranks = {r["ranks"][0] for r in nb["impl"] if len(r["ranks"]) == 1}
    lanes = {g.get("data-ranks") for g in _groups(svg, "lane")}
    assert {str(r) for r in ranks} <= lanes
    # edges by tensor name, each with an arrowhead, every edge pointing down a layer (Sugiyama), no two boxes
    # of one graph overlapping
    edges = _groups(svg, "edge")
    assert edges and all(e.find(f"{SVG_NS}polyline").get("marker-end") == "url(#gg-arrow)" for e in edges)
    for r in nb["spec"] + nb["impl"]:
        producers = {t for q in nb["spec"] + nb["impl"] for t in q["outputs"]}
        for t in r["inputs"]:
            if t in producers:
                assert any(e.get("data-tensor") == t for e in edges), t
    for e in edges:
        pts = [tuple(map(float, p.split(","))) for p in e.find(f"{SVG_NS}polyline").get("points").split()]
        assert pts[0][1] < pts[-1][1], e.get("data-tensor")
    for side in ("spec", "impl"):
        boxes = [_box(g) for g in _groups(svg, side) if "node" in g.get("class") or "tensor" in g.get("class")]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    # a dashed edge from each G_s input to each G_d tensor its relation names
    rels = {(g.get("data-spec"), g.get("data-impl")) for g in _groups(svg, "rel")}
    for t, exprs in failure["input_relations"].items():
        for e in exprs:
            named = set(re.findall(r"[A-Za-z_][\w.]*@\d+", e))
            assert named and all((t, u) in rels for u in named), (t, e, rels)
    return svg


# -------------------------------------------------------------------------------------------- (a) pages --

def test_failure_page(failure_doc):
    page = render_html(failure_doc)
    f = failure_doc["failure"]
    assert page.startswith("<!DOCTYPE html>") and "DOES NOT REFINE" in page and "#cf222e" in page
    for text in (f["op"], "modeling_llama.py:65", "model.norm", f["reason"], "a missing all-reduce?",
                 "sum(add_9@0, _unsafe_view_9@1)", "model.py:14 in _no_allreduce"):
        assert text in page, text
    _check_drawing(page, f)
    # the timings: the 30 slowest of 108 G_s operators, slowest first, and the totals
    table = re.search(r'<table class="sortable">.*?</table>', page, re.S).group(0)
    secs = [float(x) for x in re.findall(r'<td class="n" data-v="([0-9.e-]+)">[0-9.]+</td><td class="n" data-v='
                                         r'"[0-9.]+">[0-9.]+ %', table)]
    assert len(secs) == 30 and secs == sorted(secs, reverse=True)
    assert secs[0] == max(n["seconds"] for n in failure_doc["nodes"])
    assert f"all {len(failure_doc['nodes'])} operators" in table
    assert "lemmas_loaded" in page and "aten:305" in page  # the statistics


def test_refines_page(tmp_path):
    doc = _verify_dict(tmp_path, "ok")
    page = render_html(doc)
    assert "REFINES" in page and "DOES NOT" not in page and "#1a7f37" in page
    assert "concat(F@0, F@1, dim=0)" in page and "<svg" not in page
    assert all(n["node"] in page for n in doc["nodes"])


def test_failure_verified_here(tmp_path):
    """The neighbourhood the engine reports now (not a stored file) draws the same way."""
    doc = _verify_dict(tmp_path, "missing-reduction")
    assert doc["verdict"] == "does-not-refine" and doc["failure"]["neighbourhood"]
    _check_drawing(render_html(doc), doc["failure"])


def test_hostile_names_are_escaped(failure_doc):
    doc = copy.deepcopy(failure_doc)
    bad = "<script>alert(1)</script>"
    nb = doc["failure"]["neighbourhood"]
    nb["impl"][0]["name"] = bad + "@0"
    nb["impl"][0]["module"] = '" onmouseover="alert(2)'
    nb["spec"][0]["outputs"] = [bad]
    nb["spec"][1]["inputs"] = [bad]
    doc["failure"]["input_relations"] = {bad: [f"sum({bad}@0, add_9@1)"]}
    doc["failure"]["sources"][bad + "@0"] = "x.py:1\x1b[31m in f"
    doc["nodes"][0]["node"] = bad
    page = render_html(doc)
    assert page.count("<script>") == 1  # the page's own (sorting the table)
    assert "alert(1)" in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'onmouseover="' not in page and "\x1b" not in page
    svg = _svg(page)  # still well-formed, the hostile names as plain text
    assert any(g.get("data-name") == bad + "@0" for g in _groups(svg, "node"))
    assert (bad, bad + "@0") in {(g.get("data-spec"), g.get("data-impl")) for g in _groups(svg, "rel")}


def test_page_is_self_contained(failure_doc):
    page = render_html(failure_doc)
    assert set(re.findall(r"https?://[^\s\"'<>)]*", page)) == {"http://www.w3.org/2000/svg"}  # the xmlns only
    assert not re.search(r"\b(src|href)\s*=", page) and "@import" not in page and "@font-face" not in page
    assert set(re.findall(r"url\(([^)]*)\)", page)) <= {"#gg-arrow", "#gg-rel"}
    assert "default-src 'none'" in page  # and the browser is told to load nothing


@pytest.mark.parametrize("doc, why", [
    ([], "a JSON list"),
    ({"verdict": "maybe"}, "no 'verdict'"),
    ({"verdict": "refines", "nodes": {}}, "'nodes'"),
    ({"verdict": "does-not-refine", "failure": {"node": "x"}}, "'failure'"),
    ({"verdict": "does-not-refine", "failure": {"op": "a", "node": "x", "neighbourhood": {"spec": [1]}}},
     "neighbourhood.spec"),
])
def test_not_a_result(doc, why):
    with pytest.raises(InputError, match="not a graphguard result") as e:
        render_html(doc, "r.json")
    assert why in str(e.value) and str(e.value).startswith("r.json: ")


def test_minimal_result():
    page = render_html({"verdict": "inconclusive"})
    assert "INCONCLUSIVE" in page and "<svg" not in page


# ----------------------------------------------------------------------------------------------- (b) CLI --

def test_cli_report(tmp_path):
    out = tmp_path / "r.html"
    p = run_cli("report", FAILURE, "-o", out)
    assert p.returncode == 0, p.stderr
    assert out.read_text(encoding="utf-8") == render_html(json.loads(FAILURE.read_text()), str(FAILURE))


@pytest.mark.parametrize("content, why", [("{not json", "not valid JSON"), ('{"verdict": 1}', "not a graphguard result")])
def test_cli_report_bad_input(tmp_path, content, why):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    p = run_cli("report", bad, "-o", tmp_path / "r.html")
    assert p.returncode == 2 and p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphguard: error: ") and why in lines[0], p.stderr
    assert not (tmp_path / "r.html").exists()


def test_cli_verify_html(tmp_path):
    d = write_example(tmp_path, 2, "missing-reduction")
    out, js = tmp_path / "v.html", tmp_path / "v.json"
    p = run_cli("verify", "--spec", d / "spec.gg.json", "--impl", d / "impl.gg.json", "--relation",
                d / "relation.yaml", "--json", js, "--html", out, "-q")
    assert p.returncode == 1, p.stderr
    page = out.read_text(encoding="utf-8")
    assert page == render_html(json.loads(js.read_text()))  # the same page graphguard report writes
    _check_drawing(page, json.loads(js.read_text())["failure"])


# ----------------------------------------------------------------------------------- (c) headless browser --

@pytest.fixture(scope="module")
def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("GG_REQUIRE_BROWSER") == "1":
            pytest.fail("GG_REQUIRE_BROWSER=1 but there is no chromium on PATH (apt-get install chromium)")
        pytest.skip("no chromium on PATH: the headless-browser test of the HTML report needs Debian's chromium "
                    "(apt-get install chromium); CI (.ci/run) installs it and sets GG_REQUIRE_BROWSER=1")
    return exe


def _open(chromium: str, page: Path, tmp_path: Path) -> tuple[str, list[str]]:
    """Load ``page`` in a headless chromium with every host name unresolvable; return the DOM chromium
    built (dumped after the load event) and the URLs of the requests the page made (its network log:
    requests with an initiator, not chromium's own background ones)."""
    log = tmp_path / f"{page.stem}.netlog.json"
    p = subprocess.run([chromium, "--headless", "--disable-gpu", "--no-sandbox", "--disable-dev-shm-usage",
                        f"--user-data-dir={tmp_path / 'profile'}", "--no-first-run", "--disable-sync",
                        "--disable-background-networking", "--disable-component-update",
                        "--host-resolver-rules=MAP * ~NOTFOUND", f"--log-net-log={log}", "--dump-dom",
                        page.as_uri()], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    net = json.loads(log.read_text())
    start = net["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = [e["params"]["url"] for e in net["events"] if e["type"] == start and "url" in e.get("params", {})
            and e["params"].get("initiator") != "not an origin"]
    return p.stdout, [u for u in urls if not u.startswith("file:")]


def test_browser_draws_report_offline(chromium, failure_doc, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_html(failure_doc), encoding="utf-8")
    dom, requests = _open(chromium, page, tmp_path)
    assert re.search(r'<body[^>]*data-loaded="complete"', dom), "the page did not finish loading"
    assert re.search(r'<svg [^>]*class="gg-graph"', dom) and dom.rstrip().endswith("</html>")
    nb = failure_doc["failure"]["neighbourhood"]
    assert len(re.findall(r'<g class="node[ "]', dom)) == len(nb["spec"]) + len(nb["impl"])
    assert len(re.findall(r'<g class="node [^"]*collective', dom)) == sum(r["collective"] for r in nb["impl"])
    assert requests == []
    # the check sees a page's requests: the same browser on a page that asks for a remote image and script
    probe = tmp_path / "probe.html"
    probe.write_text('<!DOCTYPE html><html><head><script src="http://cdn.invalid/x.js"></script></head>'
                     '<body><img src="https://example.invalid/x.png"></body></html>')
    _, requests = _open(chromium, probe, tmp_path)
    assert set(requests) == {"http://cdn.invalid/x.js", "https://example.invalid/x.png"}
