"""A corpus of malformed and hostile inputs for every reader, and the worker that runs it.

Every case is built deterministically (fixed seeds) from a valid input shipped with the project:

* ``gg.json`` graphs and the relation file of ``examples/paper-fig1``;
* the HLO text modules and the ``HloModuleProto`` of ``tests/test_hlo_frontend.py`` (an MLP, tensor parallel on
  two ranks), bare and wrapped in ``HloProto`` / ``HloSnapshot``;
* the ``torch.export`` archives of ``tests/data/pt2`` (``make.py`` there writes them);
* the command line itself.

A case writes its files into a fresh folder and returns the ``graphguard`` arguments and the strings the error
line must contain (the file, and the node/op where the reader knows it). The expected outcome is exit code 2
with exactly one stderr line ``graphguard: error: ...`` and no traceback; cases of kind ``pb-bitflip`` may
instead give a verdict (a flipped bit can leave a valid, different program) but never an internal error.

Cases run in-process (``graphguard.cli.main``) in a few worker processes (``python3 bad_input_corpus.py
worker``), each under ``RLIMIT_AS`` (:data:`MEMORY_LIMIT`) and a per-case timer (:data:`CASE_SECONDS`); a
worker that dies or hangs is replaced and the case it was running recorded as such. ``run_corpus`` returns
one result per case; ``tests/test_bad_input.py`` asserts on them and ``bench/bad_input_corpus.py`` prints the
corpus size and timings.
"""
from __future__ import annotations

import copy
import io
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
FIG1 = ROOT / "examples" / "paper-fig1"
PT2 = TESTS / "data" / "pt2"

MEMORY_LIMIT = 2 << 30  # RLIMIT_AS of a worker, bytes
CASE_SECONDS = 5.0  # a case's CPU time limit (a CPU timer interrupts it: wall time varies with the machine's load)
HANG_SECONDS = 180.0  # a worker silent this long (wall) on one case is killed (a case stuck outside Python)
SEED = 11


# =================================================================================================
# Cases
# =================================================================================================

@dataclass
class Case:
    name: str
    kind: str
    build: Callable[[Path], "tuple[list[str], list[str]]"]
    expect: str = "error"  # "error": exit 2 and one line; "any": a verdict (0, 1, 3) is fine too; "refines": 0


CASES: dict[str, Case] = {}


def add(name: str, kind: str, build, strict: bool = True, expect: "str | None" = None) -> None:
    assert name not in CASES, name
    assert re.fullmatch(r"[A-Za-z0-9_.\-]+", name), name
    CASES[name] = Case(name, kind, build, expect or ("error" if strict else "any"))


def case(name: str, kind: str):
    def deco(fn):
        add(name, kind, fn)
        return fn
    return deco


def put(d: Path, name: str, data) -> Path:
    p = d / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    elif isinstance(data, str):
        p.write_text(data, encoding="utf-8")
    else:
        p.write_text(json.dumps(data) + "\n")
    return p


# -- the valid bases ------------------------------------------------------------------------------

SPEC_TEXT = (FIG1 / "spec.gg.json").read_text()
IMPL_TEXT = (FIG1 / "impl.gg.json").read_text()
REL_TEXT = (FIG1 / "relation.yaml").read_text()
SPEC = json.loads(SPEC_TEXT)
IMPL = json.loads(IMPL_TEXT)


def hlo_bases() -> tuple[str, str, str, bytes]:
    """(spec text, impl text, relation, impl HloModuleProto bytes), from the HLO frontend's tests."""
    sys.path.insert(0, str(TESTS))
    import test_hlo_frontend as t
    return t.SPEC, t.IMPL, t.RELATION, t._impl_proto().SerializeToString()


def fig1(d: Path, spec=None, impl=None, rel=None, extra=()) -> tuple[list[str], dict[str, Path]]:
    """Write paper-fig1 with any of its three files replaced (dict: JSON, str: text, bytes: raw)."""
    f = {"spec": put(d, "spec.gg.json", SPEC_TEXT if spec is None else spec),
         "impl": put(d, "impl.gg.json", IMPL_TEXT if impl is None else impl),
         "rel": put(d, "relation.yaml", REL_TEXT if rel is None else rel)}
    return ["verify", "--spec", str(f["spec"]), "--impl", str(f["impl"]), "--relation", str(f["rel"]),
            *extra], f


def node(doc: dict, name: str) -> dict:
    return next(n for n in doc["nodes"] if n["name"] == name)


def inp(doc: dict, name: str) -> dict:
    return next(t for t in doc["inputs"] if t["name"] == name)


def offsets(n: int, k: int, rng: random.Random) -> list[int]:
    """k distinct cut points in [0, n): both ends, evenly spaced ones and random ones."""
    out = {0, n - 1} | {n * i // (k // 2) for i in range(k // 2)}
    while len(out) < min(k, n):
        out.add(rng.randrange(n))
    return sorted(out)[:k]


def paths(doc, prefix=()):
    """Every (path, value) in a JSON document, depth first."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from paths(v, prefix + (i,))


def set_path(doc, path, value):
    doc = copy.deepcopy(doc)
    at = doc
    for k in path[:-1]:
        at = at[k]
    if value is DELETE:
        del at[path[-1]]
    else:
        at[path[-1]] = value
    return doc


DELETE = object()


def wrong_values(v) -> list:
    """Values of a JSON type other than ``v``'s (never one a reader could take for ``v``)."""
    if isinstance(v, bool):
        return [1, "true", None]
    if isinstance(v, int):
        return [1.5, True, None, [v], {"v": v}]
    if isinstance(v, str):
        return [7, None, [v], {"v": v}, True]
    if isinstance(v, list):
        return [{"0": 1}, "x", 3, None]
    if isinstance(v, dict):
        return [[], "x", 3, None]
    return ["x", [], {}]


def pathname(path) -> str:
    return ".".join(str(p) for p in path) or "root"


# -- gg.json: truncations, wrong types at every field, missing fields -----------------------------

def _gg_generated():
    rng = random.Random(SEED)
    for role, text in (("spec", SPEC_TEXT), ("impl", IMPL_TEXT)):
        body = text.rstrip()
        for k, at in enumerate(offsets(len(body), 24, rng)):
            def build(d, role=role, cut=body[:at]):
                argv, f = fig1(d, **{role: cut})
                return argv, [str(f[role])]
            add(f"gg-{role}-truncated-{at}", "gg.json-truncated", build)
    # optional fields: absent (or null for loc) is valid, so removing them is no error
    optional = {("name",), ("loc",), ("dtype",), ("attrs",)}
    for role, doc in (("spec", SPEC), ("impl", IMPL)):
        for path, v in paths(doc):
            if not path:
                continue
            # one node of each kind in the impl is enough: the others are read by the same code
            if role == "impl" and len(path) > 1 and path[0] == "nodes" and path[1] not in (0, 4):
                continue
            if role == "impl" and len(path) > 1 and path[0] in ("inputs", "outputs") and path[1] not in (0, 5):
                continue
            wrong = wrong_values(v)
            if (path[-1],) in optional:  # null means absent
                wrong = [x for x in wrong if x is not None]
            for w in rng.sample(wrong, min(3, len(wrong))):
                def build(d, role=role, doc=set_path(doc, path, w)):
                    argv, f = fig1(d, **{role: doc})
                    return argv, [str(f[role])]
                add(f"gg-{role}-type-{pathname(path)}-{type(w).__name__}", "gg.json-wrong-type", build)
            if isinstance(path[-1], str) and (path[-1],) not in optional:
                def build(d, role=role, doc=set_path(doc, path, DELETE)):
                    argv, f = fig1(d, **{role: doc})
                    return argv, [str(f[role])]
                add(f"gg-{role}-missing-{pathname(path)}", "gg.json-missing-field", build)


_gg_generated()


# -- gg.json: hostile and hand-written ------------------------------------------------------------

def _gg(name: str, role: str, mutate: Callable[[dict], "dict | str | bytes"], *needles: str, extra=()):
    """A case from a mutation of the spec or impl document; the error must name the file and ``needles``."""
    def build(d):
        doc = mutate(copy.deepcopy(SPEC if role == "spec" else IMPL))
        argv, f = fig1(d, **{role: doc}, extra=extra)
        return argv, [str(f[role]), *needles]
    add(f"gg-{name}", "gg.json-hostile", build)


def _set(doc, fn):
    fn(doc)
    return doc


_gg("not-json", "spec", lambda doc: "this is not JSON\n", "JSON")
_gg("truncated-half", "impl", lambda doc: IMPL_TEXT[: len(IMPL_TEXT) // 2], "JSON")
_gg("empty", "spec", lambda doc: b"")
_gg("whitespace", "spec", lambda doc: b"  \n\t\n")
_gg("not-utf8", "spec", lambda doc: b"PK\x03\x04\xff\xfe binary, e.g. a .pt file given to the ir frontend")
_gg("utf16", "spec", lambda doc: SPEC_TEXT.encode("utf-16"))
_gg("bom", "spec", lambda doc: b"\xef\xbb\xbf" + SPEC_TEXT.encode())
_gg("nul-bytes", "impl", lambda doc: IMPL_TEXT.encode().replace(b'"sub@0"', b'"sub\x00@0"'))
_gg("json-list", "spec", lambda doc: "[1, 2, 3]\n", "JSON object")
_gg("no-version", "spec", lambda doc: _set(doc, lambda d: d.pop("graphguard")), '"graphguard"')
_gg("no-nodes", "impl", lambda doc: _set(doc, lambda d: d.pop("nodes")), "'nodes'")
_gg("json-null", "spec", lambda doc: "null\n", "JSON object")
_gg("json-string", "impl", lambda doc: '"graphguard"\n', "JSON object")
_gg("deep-list", "spec", lambda doc: "[" * 200000 + "]" * 200000, "deep")
_gg("deep-object", "impl", lambda doc: '{"a":' * 200000 + "1" + "}" * 200000, "deep")
_gg("deep-attr", "impl", lambda doc: IMPL_TEXT.replace('"dim": 0', '"dim": ' + "[" * 100000 + "]" * 100000),
    "deep")
_gg("deep-loc", "spec", lambda doc: SPEC_TEXT.replace('"model.py:3"', '{"a":' * 50000 + "1" + "}" * 50000),
    "deep")
_gg("huge-int-literal", "spec", lambda doc: SPEC_TEXT.replace("8,", "9" * 5000 + ",", 1))
_gg("huge-float-literal", "spec", lambda doc: SPEC_TEXT.replace("8,", "1e999999,", 1))
_gg("nan-dim", "spec", lambda doc: SPEC_TEXT.replace("8,", "NaN,", 1), "NaN")
_gg("infinity-dim", "spec", lambda doc: SPEC_TEXT.replace("8,", "Infinity,", 1), "Infinity")
_gg("minus-infinity-dim", "impl", lambda doc: IMPL_TEXT.replace("8,", "-Infinity,", 1))
_gg("nan-world-size", "impl", lambda doc: IMPL_TEXT.replace('"world_size": 2', '"world_size": NaN'), "NaN")
_gg("nan-attr", "impl", lambda doc: IMPL_TEXT.replace('"dim": 0', '"dim": NaN'), "NaN")
_gg("infinity-version", "spec", lambda doc: SPEC_TEXT.replace('"graphguard": 1', '"graphguard": Infinity'),
    "Infinity")
for _i, _dim in enumerate([10 ** 12, 2 ** 62, 2 ** 63, 2 ** 64, 10 ** 100, -1, -(2 ** 63)]):
    _gg(f"dim-{_i}-spec", "spec", lambda doc, v=_dim: _set(doc, lambda d: inp(d, "A")["shape"].__setitem__(0, v)))
    _gg(f"dim-{_i}-impl", "impl", lambda doc, v=_dim: _set(doc, lambda d: inp(d, "E@1")["shape"].__setitem__(1, v)))
_gg("huge-shape-declared-output", "spec",
    lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("outputs", [{"name": "C", "shape": [2 ** 62, 4]}])),
    "matmul")
_gg("huge-rank-shape", "spec", lambda doc: _set(doc, lambda d: inp(d, "E").__setitem__("shape", [1] * 100000)))
_gg("huge-attr-int", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].__setitem__(
    "dim", 10 ** 100)), "reduce_scatter")
_gg("negative-attr-int", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].__setitem__(
    "dim", -(2 ** 63))), "reduce_scatter")
_gg("duplicate-json-key", "impl", lambda doc: IMPL_TEXT.replace('"world_size": 2', '"world_size": 2, "world_size": 4'),
    "world_size")
_gg("duplicate-attr-key", "impl", lambda doc: IMPL_TEXT.replace('"dim": 0', '"dim": 0, "dim": 1'), "dim")
_gg("duplicate-node-name", "spec", lambda doc: _set(doc, lambda d: node(d, "sub").__setitem__("name", "matmul")),
    "matmul")
_gg("duplicate-input", "spec", lambda doc: _set(doc, lambda d: d["inputs"].append(copy.deepcopy(d["inputs"][0]))),
    "'A'")
_gg("self-cycle", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("inputs", ["A", "C"])),
    "cycle")
_gg("version-true", "spec", lambda doc: _set(doc, lambda d: d.__setitem__("graphguard", True)), '"graphguard"')
_gg("version-float", "impl", lambda doc: _set(doc, lambda d: d.__setitem__("graphguard", 1.0)), '"graphguard"')
_gg("version-string", "spec", lambda doc: _set(doc, lambda d: d.__setitem__("graphguard", "1")), '"graphguard"')
_gg("version-2", "impl", lambda doc: _set(doc, lambda d: d.__setitem__("graphguard", 2)), '"graphguard"')
_gg("world-size-huge", "impl", lambda doc: _set(doc, lambda d: d.__setitem__("world_size", 2 ** 62)), "world")
_gg("world-size-3", "impl", lambda doc: _set(doc, lambda d: d.__setitem__("world_size", 3)), "rank 2")
_gg("world-size-1", "impl", lambda doc: _set(doc, lambda d: d.__setitem__("world_size", 1)), "rank 1")
_gg("world-size-true", "impl", lambda doc: _set(doc, lambda d: d.__setitem__("world_size", True)), "world_size")
_gg("world-size-cli", "impl", lambda doc: doc, "--world-size", extra=["--world-size", "4"])
# shape expressions are read by graphguard's own scalar grammar (never evaluated): hostile, huge and deep text
for _i, _dim in enumerate(["9**9**9**9", "2**100000", "(" * 5000 + "K" + ")" * 5000, "K" + "+K" * 20000,
                           "(K+1)**64*(K+2)**64", "__import__('os').system('true')", "K.__class__", "lambda: 1",
                           "K if K else 1", "[K]", "f'{K}'", "1e400", "K**-1", "K**K", "floor", "Mod(K)", "K//0",
                           "\u0661\u0662", "K\n+1", "", "  ", "K;K"]):
    _gg(f"shape-expr-{_i}", "spec" if _i % 2 else "impl",
        lambda doc, v=_dim, i=_i: _set(doc, lambda d: inp(d, "A" if i % 2 else "A@0")["shape"].__setitem__(0, v)))
# dtypes: a closed set of names, one dtype on both sides of each relation
for _i, _dt in enumerate(["float33", "torch.float32", "Float32", "float32\n", "", "f32", "int", "object",
                          "float32; rm -rf /", "bfloat16 "]):
    _gg(f"dtype-name-{_i}", "spec" if _i % 2 else "impl",
        lambda doc, v=_dt, i=_i: _set(doc, lambda d: inp(d, "B" if i % 2 else "B@1").__setitem__("dtype", v)),
        "dtype")
_gg("dtype-mixed-at-a-matmul-and-collective", "impl", lambda doc: _set(doc, lambda d: inp(d, "A@1").__setitem__("dtype", "float16")),
    "dtype")


def _mixed_relation(d):  # the relation's concat joins a float64 and a float32 shard: named at the relation's line
    argv, f = fig1(d, impl=_set(copy.deepcopy(IMPL), lambda doc: inp(doc, "E@0").__setitem__("dtype", "float64")))
    return argv, [f"{f['rel']}:4:3", "float64 and float32"]


add("gg-dtype-mixed-across-a-relation", "gg.json-hostile", _mixed_relation)
_gg("group-outside-world", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].__setitem__(
    "group", [0, 1, 2])), "reduce_scatter")
_gg("group-duplicate-rank", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].__setitem__(
    "group", [0, 0])), "reduce_scatter")
_gg("group-huge-rank", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].__setitem__(
    "group", [0, 2 ** 62])), "reduce_scatter")
_gg("rank-huge", "impl", lambda doc: json.loads(json.dumps(doc).replace("@1", "@" + "9" * 30)))
_gg("rank-negative-ish", "impl", lambda doc: json.loads(json.dumps(doc).replace('"E@1"', '"E@-1"')), "E@-1")
_gg("newline-in-node-name", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").update(
    name="mat\nmul", inputs=["A"])), "mat\\nmul")
_gg("newline-in-loc", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").update(
    loc="model.py:3\nTraceback (most recent call last):", inputs=["A"])), "matmul")
_gg("escape-in-tensor-name", "impl", lambda doc: _set(doc, lambda d: node(d, "sub@1").__setitem__(
    "inputs", ["D@1", "\x1b[2J\rZ@1"])), "sub@1", "Z@1")
_gg("newline-in-op", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("op", "core.\nmatmul")),
    "core.\\nmatmul")
_gg("newline-in-output-name", "spec", lambda doc: _set(doc, lambda d: d.__setitem__("outputs", ["F\nG"])), "F\\nG")
_gg("surrogate-in-name", "spec", lambda doc: SPEC_TEXT.replace('"matmul"', '"\\udcff"'), "\\udcff")
_gg("long-name", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").update(
    name="n" * 1_000_000, inputs=["A"])))
_gg("many-nodes-dangling", "spec", lambda doc: _set(doc, lambda d: d["nodes"].extend(
    {"name": f"x{i}", "op": "core.relu", "inputs": [f"t{i}"], "outputs": [f"u{i}"]} for i in range(20000))), "'t0'")
_gg("many-outputs", "spec", lambda doc: _set(doc, lambda d: d.__setitem__("outputs", ["F"] + ["Q"] * 100000)),
    "'Q'")
_gg("unknown-op", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("op", "core.frobnicate")),
    "unknown operator 'core.frobnicate'", "node 'matmul'")
_gg("op-empty", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("op", "")), "matmul")
_gg("wrong-arity", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("inputs", ["A"])),
    "node 'matmul'", "core.matmul", "got 1")
_gg("wrong-arity-many", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("inputs", ["A"] * 1000)),
    "node 'matmul'")
_gg("too-many-outputs", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("outputs", ["C", "C2"])),
    "node 'matmul'")
_gg("empty-outputs", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("outputs", [])), "matmul")
_gg("no-graph-outputs", "spec", lambda doc: _set(doc, lambda d: d.__setitem__("outputs", [])))
_gg("shape-mismatch", "spec", lambda doc: _set(doc, lambda d: inp(d, "B").__setitem__("shape", [4, 4])),
    "node 'matmul'", "core.matmul")
_gg("cycle", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__("inputs", ["A", "F"])),
    "cycle", "matmul", "sub")
_gg("dangling-tensor", "impl", lambda doc: _set(doc, lambda d: node(d, "sub@1").__setitem__("inputs", ["D@1", "Z@1"])),
    "'Z@1'", "node 'sub@1'")
_gg("tensor-defined-twice", "spec", lambda doc: _set(doc, lambda d: (
    node(d, "sub").__setitem__("outputs", ["C"]), d.__setitem__("outputs", ["C"]))), "'C'", "twice")
_gg("output-not-defined", "spec", lambda doc: _set(doc, lambda d: d.__setitem__("outputs", ["F", "G"])), "'G'")
_gg("input-is-output-of-node", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__(
    "outputs", ["A"])), "'A'")
_gg("rank-mismatch-collective-group", "impl", lambda doc: _set(doc, lambda d: node(
    d, "reduce_scatter")["attrs"].__setitem__("group", [1, 0])),
    "node 'reduce_scatter'", "core.reduce_scatter", "rank mismatch")
_gg("rank-mismatch-non-collective", "impl", lambda doc: _set(doc, lambda d: node(d, "sub@0").__setitem__(
    "inputs", ["D@0", "E@1"])), "node 'sub@0'", "core.sub", "rank mismatch")
_gg("tensor-without-rank", "impl", lambda doc: _set(doc, lambda d: (
    node(d, "matmul@0").__setitem__("outputs", ["C"]), node(d, "reduce_scatter").__setitem__("inputs", ["C", "C@1"]))),
    "'C'", "NAME@RANK")
_gg("declared-shape", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__(
    "outputs", [{"name": "C", "shape": [8, 5]}])), "node 'matmul'", "'C'", "declared shape")
_gg("declared-shape-wrong-type", "spec", lambda doc: _set(doc, lambda d: node(d, "matmul").__setitem__(
    "outputs", [{"name": "C", "shape": "8x4"}])), "'C'")
_gg("bad-attribute-type", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].__setitem__(
    "dim", "x")), "node 'reduce_scatter'", "dim")
_gg("attribute-out-of-range", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].__setitem__(
    "dim", 5)), "node 'reduce_scatter'", "dim")
_gg("unknown-attribute", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].__setitem__(
    "frobnicate", 1)), "node 'reduce_scatter'", "frobnicate")
_gg("attribute-reduce-op", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].__setitem__(
    "op", "xor\n")), "node 'reduce_scatter'")
_gg("attribute-missing", "impl", lambda doc: _set(doc, lambda d: node(d, "reduce_scatter")["attrs"].pop("group")),
    "node 'reduce_scatter'", "group")
_gg("sequential-collective", "spec", lambda doc: _set(doc, lambda d: d["nodes"].append(
    {"name": "rs", "op": "core.all_reduce", "inputs": ["F"], "outputs": ["G"], "attrs": {"op": "sum", "group": [0]}})),
    "node 'rs'", "collective")
_gg("dtype-not-a-string", "spec", lambda doc: _set(doc, lambda d: inp(d, "A").__setitem__("dtype", ["float32"])),
    "dtype")
_gg("shape-expression-garbage", "spec", lambda doc: _set(doc, lambda d: inp(d, "A")["shape"].__setitem__(0, "8 +")),
    "'A'")


@case("gg-spec-as-impl", "gg.json-hostile")
def _(d):
    argv, f = fig1(d)
    argv[argv.index("--impl") + 1] = str(f["spec"])
    return argv, [str(f["spec"]), "distributed"]


@case("gg-impl-as-spec", "gg.json-hostile")
def _(d):
    argv, f = fig1(d)
    argv[argv.index("--spec") + 1] = str(f["impl"])
    return argv, [str(f["impl"]), "sequential"]


for _role in ("spec", "impl", "rel"):
    flag = {"spec": "--spec", "impl": "--impl", "rel": "--relation"}[_role]

    def _missing(d, role=_role, flag=flag):
        argv, f = fig1(d)
        p = d / "no-such-file"
        argv[argv.index(flag) + 1] = str(p)
        return argv, [str(p)]

    def _directory(d, role=_role, flag=flag):
        argv, f = fig1(d)
        p = d / "a-folder.gg.json"
        p.mkdir()
        argv[argv.index(flag) + 1] = str(p)
        return argv, [str(p)]

    def _devnull(d, role=_role, flag=flag):
        argv, f = fig1(d)
        argv[argv.index(flag) + 1] = "/dev/zero"
        return argv, ["/dev/zero"]

    def _unreadable_name(d, role=_role, flag=flag):
        argv, f = fig1(d)
        p = d / "new\nline\x1b[0m.gg.json"
        argv[argv.index(flag) + 1] = str(p)
        return argv, ["new\\nline\\x1b[0m"]

    add(f"file-{_role}-missing", "files", _missing)
    add(f"file-{_role}-directory", "files", _directory)
    add(f"file-{_role}-dev-zero", "files", _devnull)
    add(f"file-{_role}-control-chars-in-name", "files", _unreadable_name)


# =================================================================================================
# Relation files
# =================================================================================================

REL_LINES = REL_TEXT.splitlines()
assert REL_LINES == ["inputs:", "  A: concat(A@0, A@1, dim=1)", "  B: concat(B@0, B@1, dim=0)",
                     "  E: concat(E@0, E@1, dim=0)"], "cases that point at a LINE:COL rely on the example's layout"


def lines(*ls: str) -> str:
    return "\n".join(ls) + "\n"


def _rel(name: str, text: "str | bytes | Callable[[Path], str]", *needles: str, where: str = "file"):
    """A case with the relation file replaced; ``needles`` may use ``{rel}`` for its path."""
    def build(d):
        argv, f = fig1(d, rel=text)
        return argv, [n.format(rel=f["rel"]) for n in (("{rel}",) if where == "file" else ()) + needles]
    add(f"rel-{name}", "relation", build)


def _rel_generated():
    rng = random.Random(SEED + 1)
    body = REL_TEXT.rstrip()
    for at in offsets(len(body), 20, rng):
        if body[:at].endswith("0, A@1, dim=1)\n  B: concat(B@0, B@1, dim=0)"):
            continue
        _rel(f"truncated-{at}", body[:at])
    # every character position replaced by a byte that breaks it
    for at in sorted(rng.sample(range(len(body)), 16)):
        _rel(f"garbled-{at}", body[:at] + "\x07" + body[at + 1:])


_rel_generated()

_rel("invalid-yaml", lines(REL_LINES[0], REL_LINES[1], REL_LINES[2][1:], REL_LINES[3]), "{rel}:3:", "YAML")
_rel("not-utf8", b"inputs:\n  A: \xff\xfe\n")
_rel("empty", b"")
_rel("utf16", REL_TEXT.encode("utf-16"))
_rel("nul-byte", REL_TEXT.replace("A@1", "A\x00@1"))
_rel("syntax-line2", lines(REL_LINES[0], "  A: concat(A@0, A@1, dim=)", *REL_LINES[2:]), "{rel}:2:27:")
_rel("syntax-unclosed-line4", lines(*REL_LINES[:3], "  E: concat(E@0, E@1, dim=0"), "{rel}:4:28:", "end")
_rel("unknown-op", lines(*REL_LINES[:2], "  B: frobnicate(B@0, B@1, dim=0)", REL_LINES[3]), "{rel}:3:", "frobnicate")
_rel("not-a-spec-input", REL_TEXT + "  C: concat(C@0, C@1, dim=0)\n", "'C'", "input")
_rel("spec-input-unmapped", lines(*REL_LINES[:3]), "'E'")
_rel("tensor-not-in-impl", REL_TEXT.replace("A@1", "A@7"), "'A@7'", "implementation")
_rel("shape-mismatch", REL_TEXT.replace("A@1, dim=1", "A@1, dim=0"), "relation for A", "shape")
_rel("unknown-section", REL_TEXT + "outputs:\n  F: concat(F@0, F@1, dim=0)\n", "{rel}:5:1:", "'outputs'")
_rel("duplicate-section", REL_TEXT + "inputs:\n  A: A@0\n", "{rel}:5:", "inputs")
_rel("duplicate-key", REL_TEXT + "  A: A@0\n", "'A'")
_rel("bad-symbol", REL_TEXT + 'symbols:\n  K: {min: "a"}\n', "{rel}:6:", "'K'")
_rel("bad-symbol-empty-range", REL_TEXT + "symbols:\n  K: {min: 8, max: 2}\n", "{rel}:6:", "'K'")
_rel("bad-symbol-multiple-of-zero", REL_TEXT + "symbols:\n  K: {min: 2, multiple_of: 0}\n", "{rel}:6:", "multiple_of")
_rel("unknown-assumption", REL_TEXT + "assume:\n  scores_are_small: 1\n", "{rel}:6:", "'scores_are_small'")
_rel("assumption-not-a-number", REL_TEXT + "assume:\n  masked_scores_within: -3\n", "{rel}:6:", "masked_scores_within")
_rel("symbol-huge-int", REL_TEXT + "symbols:\n  K: {min: " + "9" * 5000 + "}\n", "'K'")
_rel("symbol-nan", REL_TEXT + "symbols:\n  K: {min: .nan}\n", "'K'")
_rel("symbol-list", REL_TEXT + "symbols:\n  K: [1, 2]\n", "'K'")
_rel("symbol-bad-name", REL_TEXT + "symbols:\n  \"K K\": {min: 1}\n", "K K")
_rel("symbol-newline-name", REL_TEXT + "symbols:\n  \"K\\nL\": {min: 1}\n", "K\\nL")
_rel("symbols-not-mapping", REL_TEXT + "symbols: 5\n", "symbols")
_rel("inputs-not-mapping", "inputs: [A, B]\n", "inputs")
_rel("inputs-null", "inputs:\n", "inputs")
_rel("root-list", "- inputs\n")
_rel("root-scalar", "inputs\n")
_rel("multi-document", REL_TEXT + "---\n" + REL_TEXT)
_rel("tag-python-object", lines(*REL_LINES[:3], '  E: !!python/object/apply:os.system ["echo pwned"]'), "tag")
_rel("tag-in-symbols", REL_TEXT + 'symbols:\n  K: !!python/object/apply:os.system ["echo pwned"]\n', "tag")
_rel("tag-in-symbol-value", REL_TEXT + 'symbols:\n  K: {min: !!python/name:os.system }\n', "tag")
_rel("tag-custom", REL_TEXT + "symbols:\n  K: !custom {min: 1}\n", "tag")
_rel("tag-binary", REL_TEXT + "symbols:\n  K: !!binary aGVsbG8=\n", "tag")
_rel("tag-set", REL_TEXT + "symbols:\n  K: !!set {a, b}\n", "tag")
_rel("tag-on-section", "inputs: !!map\n" + "\n".join(REL_LINES[1:]) + "\n", "tag")
_rel("tag-on-expression", lines(*REL_LINES[:3], "  E: !!str concat(E@0, E@1, dim=0)"), "tag")
_rel("tag-timestamp", REL_TEXT + "symbols:\n  K: {min: 2001-12-14}\n", "'K'")
_rel("anchor-alias", lines(REL_LINES[0], "  A: &x concat(A@0, A@1, dim=1)", "  B: *x", REL_LINES[3]), "alias")
_rel("billion-laughs", "symbols:\n  a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)) + REL_TEXT,
    "alias")
_rel("billion-laughs-inputs", REL_TEXT + "expect:\n  a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)), "alias")
_rel("merge-key", REL_TEXT + "symbols:\n  K: &k {min: 1}\n  L: {<<: *k, max: 4}\n", "alias")
_rel("deep-yaml-list", REL_TEXT + "expect:\n  F: " + "[" * 100000 + "]" * 100000 + "\n", "deep")
_rel("deep-yaml-flow-map", REL_TEXT + "symbols:\n  K: " + "{a: " * 50000 + "1" + "}" * 50000 + "\n", "deep")
_rel("deep-yaml-block", "inputs:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 3000)) + "\n")
_rel("complex-key", "inputs:\n  ? [A, B]\n  : concat(A@0, A@1, dim=1)\n", "{rel}:2:")
_rel("null-key", REL_TEXT + "  ~: concat(A@0, A@1, dim=1)\n")
_rel("int-expression", lines(*REL_LINES[:3], "  E: 5"), "{rel}:4:")
_rel("empty-expression", lines(*REL_LINES[:3], '  E: ""'), "{rel}:4:")
_rel("null-expression", lines(*REL_LINES[:3], "  E:"), "{rel}:4:")
_rel("empty-list-expression", lines(*REL_LINES[:3], "  E: []"), "{rel}:4:")
_rel("nested-list-expression", lines(*REL_LINES[:3], "  E: [[E@0]]"), "{rel}:4:")
_rel("mapping-expression", lines(*REL_LINES[:3], "  E: {a: 1}"), "{rel}:4:")
_rel("deep-expression", lines(*REL_LINES[:3], "  E: " + "concat(" * 20000 + "E@0" + ", dim=0)" * 20000), "{rel}:4:",
     "deep")
_rel("deep-attr-expression", lines(*REL_LINES[:3], "  E: concat(E@0, E@1, dim=" + "(" * 20000 + "0" + ")" * 20000 +
                                   ")"),
     "{rel}:4:", "deep")
_rel("long-expression", lines(*REL_LINES[:3], "  E: concat(" + "E@0, " * 300 + "dim=0)"), "{rel}:4:", "E")
_rel("huge-attr", lines(*REL_LINES[:3], "  E: concat(E@0, E@1, dim=" + "9" * 3000 + ")"), "{rel}:4:")
_rel("huge-int-attr-digits", lines(*REL_LINES[:3], "  E: concat(E@0, E@1, dim=" + "9" * 6000 + ")"), "{rel}:4:")
_rel("huge-float-attr", lines(*REL_LINES[:3], "  E: concat(E@0, E@1, dim=1" + "0" * 400 + ".5e99999999)"), "{rel}:4:")
_rel("negative-attr", lines(*REL_LINES[:3], "  E: concat(E@0, E@1, dim=-" + str(2 ** 63) + ")"), "{rel}:4:")
_rel("slice-huge", lines(*REL_LINES[:3], "  E: concat(E@0, slice(E@1, dim=0, start=0, end=" + str(2 ** 62) +
                                             "), dim=0)"), "E")
_rel("pattern-variable", lines(*REL_LINES[:3], "  E: concat(?e, E@1, dim=0)"), "{rel}:4:6:", "?e")
_rel("newline-in-key", REL_TEXT + '  "C\\nD": concat(C@0, C@1, dim=0)\n', "C\\nD")
_rel("escape-in-key", REL_TEXT + '  "\\e[2J\\rX": X@0\n', "\\x1b[2J\\rX")
_rel("string-attr", lines(*REL_LINES[:3], '  E: concat(E@0, E@1, dim="0\\n")'), "{rel}:4:")
_rel("tab-indent", "inputs:\n\tA: concat(A@0, A@1, dim=1)\n", "{rel}:2:")
_rel("huge-rank-name", REL_TEXT.replace("A@1", "A@" + "9" * 5000), "A@")
_rel("expect-bad", REL_TEXT + "expect:\n  F: concat(F@0, F@7, dim=0)\n", "'F@7'")
_rel("expect-not-output", REL_TEXT + "expect:\n  Q: concat(F@0, F@1, dim=0)\n", "'Q'")
_rel("expect-tag", REL_TEXT + "expect:\n  F: !!python/object/apply:os.system [x]\n", "tag")


def _expect_file(name: str, content, *needles: str):
    def build(d):
        argv, f = fig1(d)
        p = put(d, "expect.yaml", content) if content is not None else d / "no-expect.yaml"
        if name == "directory":
            p = d / "expect-dir.yaml"
            p.mkdir()
        return argv + ["--expect", str(p)], [str(p), *needles]
    add(f"expect-file-{name}", "relation", build)


_expect_file("missing", None)
_expect_file("directory", None)
_expect_file("not-yaml", "expect: [\n")
_expect_file("tag", "expect:\n  F: !!python/object/apply:os.system [x]\n", "tag")
_expect_file("unknown-op", "inputs:\n  A: A@0\nexpect:\n  F: frob(F@0)\n", "frob")


# =================================================================================================
# HLO text and HloModuleProto binaries
# =================================================================================================

HLO_SPEC, HLO_IMPL, HLO_REL, HLO_PB = hlo_bases()


def hlo(d: Path, impl: "str | bytes | None" = None, spec: "str | bytes | None" = None, impl_name: str = "impl.hlo",
        spec_name: str = "spec.hlo", extra=()) -> tuple[list[str], dict[str, Path]]:
    f = {"spec": put(d, spec_name, HLO_SPEC if spec is None else spec),
         "impl": put(d, impl_name, HLO_IMPL if impl is None else impl),
         "rel": put(d, "relation.yaml", HLO_REL)}
    return ["verify", "--frontend", "hlo", "--spec", str(f["spec"]), "--impl", str(f["impl"]), "--relation",
            str(f["rel"]), *extra], f


def _hlo(name: str, role: str, text, *needles: str, kind: str = "hlo-text", suffix: str = ".hlo", extra=(),
         strict: bool = True):
    def build(d):
        argv, f = hlo(d, **{role: text, f"{role}_name": f"{role}{suffix}"}, extra=extra)
        return argv, [str(f[role]), *needles]
    add(f"hlo-{name}", kind, build, strict)


def _hlo_generated():
    rng = random.Random(SEED + 2)
    for role, text in (("impl", HLO_IMPL), ("spec", HLO_SPEC)):
        body = text.rstrip()
        for at in offsets(len(body), 24 if role == "impl" else 12, rng):
            _hlo(f"{role}-truncated-{at}", role, body[:at], kind="hlo-text-truncated")
    # every instruction line of the impl: removed, duplicated, opcode/shape/operands broken
    ls = HLO_IMPL.split("\n")
    instr = [i for i, l in enumerate(ls) if re.match(r"\s+(ROOT )?%?\w+ = ", l)]
    for i in instr:
        nm = re.match(r"\s+(?:ROOT )?%?(\w+) = ", ls[i]).group(1)
        muts = {
            "removed": ls[:i] + ls[i + 1:] if "ROOT" not in ls[i] else ls,  # (no ROOT: the last one is)
            "duplicated": ls[:i + 1] + [ls[i].replace("ROOT ", "")] + ls[i + 1:],
            "unknown-opcode": ls[:i] + [re.sub(r"([\]}]) (\w[\w-]*)\(", r"\1 frobnicate(", ls[i], count=1)]
                              + ls[i + 1:],
            "huge-dim": ls[:i] + [re.sub(r"\[(\d+)", "[1000000000000", ls[i], count=1)] + ls[i + 1:],
            "huge-dim-2-62": ls[:i] + [re.sub(r"\[(\d+)", f"[{2 ** 62}", ls[i], count=1)] + ls[i + 1:],
            "huge-dim-digits": ls[:i] + [re.sub(r"\[(\d+)", "[" + "9" * 5000, ls[i], count=1)] + ls[i + 1:],
            "negative-dim": ls[:i] + [re.sub(r"\[(\d+)", "[-4", ls[i], count=1)] + ls[i + 1:],
            "bad-dtype": ls[:i] + [re.sub(r"= f32\[", "= q99[", ls[i], count=1)] + ls[i + 1:],
            "extra-operand": ls[:i] + [re.sub(r"\(([^()]*)\)", lambda m: f"({m.group(1)}, %x)" if m.group(1) else
                                              "(%x)", ls[i].split("=", 1)[0] + "=" + ls[i].split("=", 1)[1], count=1)]
                             + ls[i + 1:],
            "self-operand": ls[:i] + [re.sub(r"%?\b(x|w1|w2|h|e|p|y)\)", f"%{nm})", ls[i], count=1)] + ls[i + 1:],
        }
        for mname, new in muts.items():
            text = "\n".join(new)
            if text == HLO_IMPL:
                continue
            _hlo(f"impl-{nm}-{mname}", "impl", text, kind="hlo-text-mutated")


_hlo_generated()

_H = HLO_IMPL
_hlo("not-utf8", "impl", b"\xff\xfe\x00garbage")
_hlo("empty", "impl", b"")
_hlo("header-only", "impl", "HloModule m\n")
_hlo("no-header-txt", "impl", "ENTRY main {\n}\n", suffix=".txt")
_hlo("nul-bytes", "impl", _H.replace("exponential", "expo\x00nential"))
_hlo("control-chars", "impl", _H.replace("%e = ", "%e\x1b[2J = "))
_hlo("bad-dot", "impl", _H.replace("%h = f32[4,4]{1,0} dot(", "%h = f32[4,4]{1,0} dot"), ":13:")
_hlo("num-partitions-huge", "impl", _H.replace("num_partitions=2", f"num_partitions={2 ** 62}"), "2")
_hlo("num-partitions-digits", "impl", _H.replace("num_partitions=2", "num_partitions=" + "9" * 5000))
_hlo("num-partitions-zero", "impl", _H.replace("num_partitions=2", "num_partitions=0"))
_hlo("num-partitions-negative", "impl", _H.replace("num_partitions=2", "num_partitions=-2"))
_hlo("num-partitions-text", "impl", _H.replace("num_partitions=2", "num_partitions=two"))
_hlo("num-partitions-3", "impl", _H.replace("num_partitions=2", "num_partitions=3"))
_hlo("replica-groups-outside", "impl", _H.replace("replica_groups={{0,1}}", "replica_groups={{0,5}}"), "y")
_hlo("replica-groups-huge", "impl", _H.replace("replica_groups={{0,1}}", "replica_groups={{0," + str(2 ** 62) + "}}"),
     "y")
_hlo("replica-groups-duplicate", "impl", _H.replace("replica_groups={{0,1}}", "replica_groups={{0,0}}"), "y")
_hlo("replica-groups-negative", "impl", _H.replace("replica_groups={{0,1}}", "replica_groups={{0,-1}}"), "y")
_hlo("replica-groups-iota-huge", "impl", _H.replace("replica_groups={{0,1}}",
                                                    f"replica_groups=[1,{2 ** 40}]<=[{2 ** 40}]"),
     "y")
_hlo("replica-groups-deep", "impl", _H.replace("replica_groups={{0,1}}", "replica_groups=" + "{" * 50000 + "}" * 50000))
_hlo("deep-tuple-shape", "impl", _H.replace("%z = f32[4,6]{1,0} exponential", "%z = " + "(" * 50000 + "f32[4,6]" +
                                            ")" * 50000 + " exponential"))
_hlo("deep-attribute", "impl", _H.replace("channel_id=1", "channel_id=" + "{" * 50000 + "}" * 50000))
_hlo("long-line", "impl", _H.replace('op_name="w1"', 'op_name="' + "w" * 2_000_000 + '"'), strict=False)
_hlo("newline-in-loc", "impl", _H.replace('%e = f32[4,4]{1,0} exponential(f32[4,4]{1,0} %h)',
                                          '%e = f32[4,4]{1,0} frobnicate(f32[4,4]{1,0} %h), metadata={op_name="a\\nb" '
                                          'source_file="x\\ny.py" source_line=3}'), "frobnicate")
_hlo("unknown-custom-call", "impl", _H.replace("%e = f32[4,4]{1,0} exponential(f32[4,4]{1,0} %h)",
                                               '%e = f32[4,4]{1,0} custom-call(f32[4,4]{1,0} %h), '
                                               'custom_call_target="Evil\\n\\x1b[0m"'), "Evil\\n")
_hlo("call-cycle", "impl", _H.replace("ROOT %add = f32[] add(f32[] %a, f32[] %b)",
                                      "ROOT %add = f32[] call(f32[] %a, f32[] %b), to_apply=%sum"), "sum")
_hlo("two-entries", "impl", _H.replace("%sum (a", "ENTRY %sum (a"))
_hlo("no-root", "impl", _H.replace("ROOT %z", "%z"), strict=False)
_hlo("root-twice", "impl", _H.replace("%y = f32[4,6]{1,0} all-reduce", "ROOT %y = f32[4,6]{1,0} all-reduce"))
_hlo("parameter-duplicate", "impl", _H.replace("parameter(2)", "parameter(1)"))
_hlo("parameter-huge", "impl", _H.replace("parameter(2)", f"parameter({2 ** 62})"))
_hlo("parameter-negative", "impl", _H.replace("parameter(2)", "parameter(-1)"))
_hlo("dot-dims-out-of-range", "impl", _H.replace("lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                                                 "lhs_contracting_dims={7}, rhs_contracting_dims={0}", 1), "h")
_hlo("dot-dims-huge", "impl", _H.replace("lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                                         f"lhs_contracting_dims={{{2 ** 62}}}, rhs_contracting_dims={{0}}", 1), "h")
# a valid program (it does not refine the impl) whose constant folding must not allocate 10**12 values
_hlo("constant-huge-broadcast", "spec", HLO_SPEC.replace(
    "  ROOT z = f32[4,6] exponential(y)",
    "  c = f32[] constant(1)\n  b = f32[1000000000000,6] broadcast(c), dimensions={}\n"
    "  s = f32[4,6] slice(b), slice={[0:4], [0:6]}\n  ROOT z = f32[4,6] add(y, s)"), strict=False)
_hlo("iota-huge", "spec", HLO_SPEC.replace(
    "  ROOT z = f32[4,6] exponential(y)",
    f"  i = f32[{2 ** 40},6] iota(), iota_dimension=0\n  ROOT z = f32[4,6] add(y, i)"), "z")
_hlo("constant-too-few-values", "spec", HLO_SPEC.replace(
    "  ROOT z = f32[4,6] exponential(y)",
    f"  c = f32[{2 ** 40}] constant({{1, 2}})\n  ROOT z = f32[4,6] exponential(y)"), "c")
_hlo("constant-deep-literal", "spec", HLO_SPEC.replace(
    "  ROOT z = f32[4,6] exponential(y)",
    "  c = f32[1] constant(" + "{" * 50000 + "1" + "}" * 50000 + ")\n  ROOT z = f32[4,6] exponential(y)"))
_hlo("constant-nan-literal", "spec", HLO_SPEC.replace(
    "  ROOT z = f32[4,6] exponential(y)",
    "  c = s32[2] constant({nan, inf})\n  ROOT z = f32[4,6] exponential(y)"), "c")
_hlo("slice-stride-zero", "spec", HLO_SPEC.replace(
    "  ROOT z = f32[4,6] exponential(y)",
    "  s = f32[4,6] slice(y), slice={[0:4:0], [0:6]}\n  ROOT z = f32[4,6] exponential(s)"), "s")
_hlo("slice-huge", "spec", HLO_SPEC.replace(
    "  ROOT z = f32[4,6] exponential(y)",
    f"  s = f32[4,6] slice(y), slice={{[0:{2 ** 62}], [0:6]}}\n  ROOT z = f32[4,6] exponential(s)"), "s")
_hlo("reshape-huge", "spec", HLO_SPEC.replace(
    "  ROOT z = f32[4,6] exponential(y)",
    f"  r = f32[{2 ** 62},{2 ** 62}] reshape(y)\n  ROOT z = f32[4,6] exponential(r)"), "r")
_hlo("spec-with-collective", "spec", HLO_IMPL.replace("HloModule mlp_impl", "HloModule mlp_spec"), "collective")
_hlo("world-size-mismatch", "impl", HLO_IMPL, "--world-size", extra=["--world-size", "4"])
_hlo("no-world-size", "impl", HLO_IMPL.replace(", num_partitions=2", ""), "--world-size")
_hlo("pb-as-text", "impl", HLO_PB, suffix=".hlo")
_hlo("gg-json-as-hlo", "impl", IMPL_TEXT, suffix=".hlo")


@case("hlo-two-files-for-spec", "hlo-text")
def _(d):
    argv, f = hlo(d)
    i = argv.index("--spec")
    return argv[:i + 2] + [str(f["spec"])] + argv[i + 2:], ["specification", "HLO module"]


@case("hlo-file-per-rank-mismatch", "hlo-text")
def _(d):
    argv, f = hlo(d)
    i = argv.index("--impl")
    return argv[:i + 2] + [str(f["impl"]), str(f["impl"])] + argv[i + 2:] + ["--world-size", "2"], ["--world-size"]


# -- HloModuleProto binaries -----------------------------------------------------------------------

def _wrapped(kind: str) -> bytes:
    from graphguard.frontends.hlo.proto import HloModuleProto, HloProto, HloSnapshot
    m = HloModuleProto.FromString(HLO_PB)
    if kind == "HloProto":
        msg = HloProto()
        msg.hlo_module.CopyFrom(m)
    elif kind == "HloSnapshot":
        msg = HloSnapshot()
        msg.hlo.hlo_module.CopyFrom(m)
    else:
        msg = m
    return msg.SerializeToString()


def _pb(name: str, data: "bytes | Callable[[], bytes]", *needles: str, kind: str = "hlo-pb", strict: bool = True,
        extra=()):
    def build(d):
        argv, f = hlo(d, impl=data() if callable(data) else data, impl_name="impl.pb", extra=extra)
        return argv, [str(f["impl"]), *needles]
    add(f"pb-{name}", kind, build, strict)


def _pb_generated():
    rng = random.Random(SEED + 3)
    for wrap in ("HloModuleProto", "HloProto", "HloSnapshot"):
        n = len(HLO_PB) + {"HloModuleProto": 0, "HloProto": 3, "HloSnapshot": 6}[wrap]
        for at in offsets(n, 16 if wrap == "HloModuleProto" else 6, rng):
            _pb(f"{wrap}-truncated-{at}", lambda w=wrap, at=at: _wrapped(w)[:at], kind="hlo-pb-truncated")
    for k in range(40):
        at, bit = rng.randrange(len(HLO_PB) * 8), 0
        at, bit = divmod(at, 8)
        def flip(at=at, bit=bit):
            b = bytearray(HLO_PB)
            b[at] ^= 1 << bit
            return bytes(b)
        _pb(f"bitflip-{at}-{bit}", flip, kind="hlo-pb-bitflip", strict=False)
    for k in range(8):
        def garble(seed=k):
            r = random.Random(seed)
            b = bytearray(HLO_PB)
            for _ in range(8):
                b[r.randrange(len(b))] = r.randrange(256)
            return bytes(b)
        _pb(f"garbled-{k}", garble, kind="hlo-pb-bitflip", strict=False)


_pb_generated()


def _mutated_pb(fn) -> Callable[[], bytes]:
    def make():
        from graphguard.frontends.hlo.proto import HloModuleProto
        m = HloModuleProto.FromString(HLO_PB)
        main = next(c for c in m.computations if c.name == "main")
        ins = {i.name: i for i in main.instructions}
        fn(m, main, ins)
        return m.SerializeToString()
    return make


def _pbm(name: str, fn, *needles: str, extra=()):
    _pb(name, _mutated_pb(fn), *needles, kind="hlo-pb-hostile", extra=extra)


def _dims(i, dims):
    del i.shape.dimensions[:]
    i.shape.dimensions.extend(dims)


def _deep_tuple(s, depth):
    for _ in range(depth):
        s.element_type = 13
        s = s.tuple_shapes.add()
    s.element_type = 11


_pb("random-bytes", random.Random(SEED).randbytes(300))
_pb("png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
_pb("empty", b"")
_pb("zip", b"PK\x05\x06" + bytes(18))
_pbm("dim-huge", lambda m, c, i: _dims(i["x"], [10 ** 12, 6]), "h@0")
_pbm("dim-2-62", lambda m, c, i: _dims(i["h"], [2 ** 62, 4]), "h")
_pbm("dim-negative", lambda m, c, i: _dims(i["h"], [-4, 4]), "h")
_pbm("dim-int64-min", lambda m, c, i: _dims(i["e"], [-(2 ** 63), 4]), "e")
_pbm("rank-huge", lambda m, c, i: _dims(i["e"], [1] * 100000), "e")
_pbm("element-type-unknown", lambda m, c, i: setattr(i["e"].shape, "element_type", 999), "e")
_pbm("element-type-tuple-param", lambda m, c, i: setattr(i["x"].shape, "element_type", 13), "x")
_pbm("element-type-token", lambda m, c, i: setattr(i["e"].shape, "element_type", 17), "e")
_pbm("deep-tuple-shape", lambda m, c, i: _deep_tuple(i["z"].shape, 5000))
_pbm("operand-dangling", lambda m, c, i: i["e"].operand_ids.__setitem__(0, 12345), "e")
_pbm("operand-self", lambda m, c, i: i["e"].operand_ids.__setitem__(0, i["e"].id), "e")
_pbm("operand-cycle", lambda m, c, i: i["h"].operand_ids.__setitem__(0, i["z"].id))
_pbm("operand-too-many", lambda m, c, i: i["e"].operand_ids.extend([i["x"].id] * 5), "e")
_pbm("operand-none", lambda m, c, i: i["h"].ClearField("operand_ids"), "h")
_pbm("opcode-unknown", lambda m, c, i: setattr(i["e"], "opcode", "frobnicate"), "frobnicate")
_pbm("opcode-newline", lambda m, c, i: setattr(i["e"], "opcode", "exp\nonential"), "exp\\nonential")
_pbm("name-newline", lambda m, c, i: (setattr(i["e"], "name", "e\nSecond line"), setattr(i["e"], "opcode", "frob")),
     "e\\nSecond line")
_pbm("name-empty", lambda m, c, i: setattr(i["e"], "name", ""))
_pbm("name-duplicate", lambda m, c, i: setattr(i["e"], "name", "h"), "h")
_pbm("id-duplicate", lambda m, c, i: setattr(i["e"], "id", i["h"].id))
_pbm("called-computation-dangling", lambda m, c, i: i["y"].called_computation_ids.__setitem__(0, 77), "y")
_pbm("called-computation-self", lambda m, c, i: i["y"].called_computation_ids.__setitem__(0, c.id), "y")
_pbm("reducer-calls-itself", lambda m, c, i: (m.computations[0].instructions[2].__setattr__("opcode", "call"),
                                              m.computations[0].instructions[2].called_computation_ids.append(
                                                  m.computations[0].id)))
_pbm("entry-missing", lambda m, c, i: (setattr(m, "entry_computation_name", "nope"),
                                       setattr(m, "entry_computation_id", 99)))
_pbm("no-instructions", lambda m, c, i: c.ClearField("instructions"))
_pbm("partitions-huge", lambda m, c, i: setattr(m.device_assignment, "computation_count", 2 ** 31 - 1))
_pbm("partitions-3", lambda m, c, i: setattr(m.device_assignment, "computation_count", 3))
_pbm("partitions-and-replicas", lambda m, c, i: setattr(m.device_assignment, "replica_count", 2))
_pbm("parameter-number-huge", lambda m, c, i: setattr(i["w2"], "parameter_number", 2 ** 62), "w2")
_pbm("parameter-number-duplicate", lambda m, c, i: setattr(i["w2"], "parameter_number", 0), "w2")
_pbm("replica-group-outside", lambda m, c, i: i["y"].collective_device_list.replica_groups[0].replica_ids.__setitem__(
    1, 7), "y")
_pbm("replica-group-huge", lambda m, c, i: i["y"].collective_device_list.replica_groups[0].replica_ids.__setitem__(
    1, 2 ** 62), "y")
_pbm("replica-group-negative", lambda m, c, i: i["y"].collective_device_list.replica_groups[0].replica_ids.__setitem__(
    1, -1), "y")
_pbm("iota-groups-huge", lambda m, c, i: (
    i["y"].ClearField("collective_device_list"),
    setattr(i["y"].iota_collective_device_list, "num_replica_groups", 2 ** 40),
    setattr(i["y"].iota_collective_device_list, "num_devices_per_group", 2 ** 40),
    i["y"].iota_collective_device_list.iota_reshape_dims.extend([2 ** 40, 2 ** 40])), "y")
_pbm("iota-groups-inconsistent", lambda m, c, i: (
    i["y"].ClearField("collective_device_list"),
    setattr(i["y"].iota_collective_device_list, "num_replica_groups", 3),
    setattr(i["y"].iota_collective_device_list, "num_devices_per_group", 2),
    i["y"].iota_collective_device_list.iota_reshape_dims.extend([2])), "y")
_pbm("dot-dims-huge", lambda m, c, i: i["h"].dot_dimension_numbers.lhs_contracting_dimensions.__setitem__(
    0, 2 ** 62), "h")
_pbm("dot-dims-negative", lambda m, c, i: i["h"].dot_dimension_numbers.lhs_contracting_dimensions.__setitem__(
    0, -1), "h")
_pbm("dot-dims-duplicate", lambda m, c, i: i["h"].dot_dimension_numbers.lhs_contracting_dimensions.append(1), "h")
_pbm("constant-huge", lambda m, c, i: (setattr(i["e"], "opcode", "constant"), i["e"].ClearField("operand_ids"),
                                       _dims(i["e"], [2 ** 20, 2 ** 20]), i["e"].literal.f32s.extend([1.0] * 4)), "e")
_pbm("constant-huge-dims", lambda m, c, i: (setattr(i["e"], "opcode", "constant"), i["e"].ClearField("operand_ids"),
                                            _dims(i["e"], [2 ** 62, 2 ** 62]), i["e"].literal.f32s.extend([1.0])), "e")
_pbm("constant-bf16-odd-bytes", lambda m, c, i: (
    setattr(i["e"], "opcode", "constant"), i["e"].ClearField("operand_ids"), setattr(i["e"].shape, "element_type", 16),
    _dims(i["e"], [1]), setattr(i["e"].literal, "bf16s", b"\x01\x02\x03")), "e")
_pbm("constant-f16-odd-bytes", lambda m, c, i: (setattr(i["e"], "opcode", "constant"), i["e"].ClearField("operand_ids"),
                                                setattr(i["e"].shape, "element_type", 10), _dims(i["e"], [2]),
                                                setattr(i["e"].literal, "f16s", b"\x01\x02\x03")), "e")
_pbm("constant-layout-bad", lambda m, c, i: (setattr(i["e"], "opcode", "constant"), i["e"].ClearField("operand_ids"),
                                             _dims(i["e"], [4, 4]), i["e"].literal.f32s.extend([1.0] * 16),
                                             i["e"].shape.layout.ClearField("minor_to_major"),
                                             i["e"].shape.layout.minor_to_major.extend([5, 9])), "e")
_pbm("slice-stride-negative", lambda m, c, i: (setattr(i["e"], "opcode", "slice"),
                                               i["e"].slice_dimensions.add(start=0, limit=4, stride=-1),
                                               i["e"].slice_dimensions.add(start=0, limit=4, stride=1)), "e")
_pbm("metadata-newline-loc", lambda m, c, i: (setattr(i["e"].metadata, "source_file", "a\nb.py"),
                                              setattr(i["e"].metadata, "source_line", 3),
                                              setattr(i["e"], "opcode", "frob")), "frob")
_pbm("stack-frame-dangling", lambda m, c, i: (setattr(i["e"].metadata, "stack_frame_id", 10 ** 9),
                                              setattr(i["e"], "opcode", "frob")), "frob")
_pbm("backend-config-binary", lambda m, c, i: (setattr(i["e"], "backend_config", bytes(range(256))),
                                               setattr(i["e"], "opcode", "frob")), "frob")



def _option(name: str, argv: Callable[[Path], list[str]], *needles: str):
    """A bad option value with valid files: the line names the option, not a file."""
    add(name, "cli", lambda d: (argv(d), list(needles)))


for _v in ("0", "-3", str(2 ** 62), str(10 ** 30)):
    _option(f"hlo-world-size-{_v[:8]}", lambda d, v=_v: hlo(d, impl=HLO_IMPL.replace(", num_partitions=2", ""),
                                                          extra=["--world-size", v])[0], "--world-size")
    _option(f"pb-world-size-{_v[:8]}", lambda d, v=_v: hlo(d, impl=HLO_PB, impl_name="impl.pb",
                                                         extra=["--world-size", v])[0], "--world-size")
    _option(f"pt2-world-size-{_v[:8]}", lambda d, v=_v: pt2(d, extra=["--world-size", v], world=False)[0],
            "--world-size")


# =================================================================================================
# torch.export archives (.pt2)
# =================================================================================================

def _pt2_base() -> tuple[list[tuple[zipfile.ZipInfo, bytes]], str, dict]:
    with zipfile.ZipFile(PT2 / "r0.pt2") as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    model = next(i.filename for i, _ in members if i.filename.endswith("/models/model.json"))
    return members, model, json.loads(dict((i.filename, b) for i, b in members)[model])


PT2_MEMBERS, PT2_MODEL, PT2_DOC = _pt2_base()
PT2_BYTES = (PT2 / "r0.pt2").read_bytes()


def write_zip(path: Path, members: list[tuple["zipfile.ZipInfo | str", bytes]]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for info, data in members:
            z.writestr(info, data)
    return path


def with_model(data: bytes) -> list:
    return [(i, data if i.filename == PT2_MODEL else b) for i, b in PT2_MEMBERS]


def pt2(d: Path, r0: "bytes | list | None" = None, extra=(), world: bool = True) -> tuple[list[str], dict[str, Path]]:
    """The row-parallel archives, with rank 0's replaced: bytes (the file) or a member list."""
    f = {"spec": PT2 / "spec.pt2", "rel": PT2 / "relation.yaml"}
    if r0 is None:
        f["r0"] = PT2 / "r0.pt2"
    elif isinstance(r0, bytes):
        f["r0"] = put(d, "r0.pt2", r0)
    else:
        f["r0"] = write_zip(d / "r0.pt2", r0)
    argv = ["verify", "--frontend", "fx", "--spec", str(f["spec"]), "--impl", str(f["r0"])]
    argv += [str(PT2 / "r1.pt2")] if world else []
    return argv + ["--relation", str(f["rel"]), *extra], f


def _pt2(name: str, r0, *needles: str, kind: str = "pt2", extra=(), world: bool = True, strict: bool = True):
    def build(d):
        argv, f = pt2(d, r0() if callable(r0) else r0, extra=extra, world=world)
        return argv, [str(f["r0"]), *needles]
    add(f"pt2-{name}", kind, build, strict)


def _pt2_doc(name: str, fn, *needles: str, kind: str = "pt2-json-hostile"):
    def make():
        doc = copy.deepcopy(PT2_DOC)
        out = fn(doc)
        data = out if isinstance(out, bytes) else json.dumps(out if out is not None else doc).encode()
        return with_model(data)
    _pt2(name, make, *needles, kind=kind)


READ_PREFIXES = (("graph_module", "graph", "nodes"), ("graph_module", "graph", "tensor_values"),
                 ("graph_module", "signature"))
UNREAD_KEYS = {"metadata", "is_hop_single_tensor_return", "name", "requires_grad", "device", "strides",
               "storage_offset", "layout", "parameter_name", "buffer_name", "kind"}


# the unmodified inputs verify (exit 0): each error above comes from its case's change. Every worker runs these
# first, untimed, so that imports (torch for the .pt2 op schemas) are done before the first timed case.
add("base-gg-json", "base", lambda d: (fig1(d)[0], []), expect="refines")
add("base-hlo-text", "base", lambda d: (hlo(d)[0], []), expect="refines")
add("base-hlo-pb", "base", lambda d: (hlo(d, impl=HLO_PB, impl_name="impl.pb")[0], []), expect="refines")
add("base-pt2", "base", lambda d: (pt2(d)[0], []), expect="refines")
BASES = ["base-gg-json", "base-hlo-text", "base-hlo-pb", "base-pt2"]


def _pt2_generated():
    rng = random.Random(SEED + 4)
    for at in offsets(len(PT2_BYTES), 16, rng):
        _pt2(f"truncated-{at}", PT2_BYTES[:at], kind="pt2-truncated")
    model = dict((i.filename, b) for i, b in PT2_MEMBERS)[PT2_MODEL]
    for at in offsets(len(model.rstrip()), 16, rng):
        _pt2(f"model-json-truncated-{at}", with_model(model[:at]), kind="pt2-truncated")
    read = [(p, v) for p, v in paths(PT2_DOC)
            if any(p[:len(r)] == r for r in READ_PREFIXES) and not UNREAD_KEYS & set(map(str, p))
            and len(p) > 3]
    for p, v in rng.sample(read, 60):
        w = rng.choice(wrong_values(v))
        _pt2_doc(f"json-type-{pathname(p)}-{type(w).__name__}", lambda doc, p=p, w=w: set_path(doc, p, w),
                 kind="pt2-json-wrong-type")
    keyed = [(p, v) for p, v in read if isinstance(p[-1], str) and p[-1] not in ("as_int",)]
    for p, v in rng.sample(keyed, 25):
        _pt2_doc(f"json-missing-{pathname(p)}", lambda doc, p=p: set_path(doc, p, DELETE),
                 kind="pt2-json-missing-field")


_pt2_generated()

_pt2("not-a-zip", b"not a zip", "not a torch.export archive")
_pt2("empty-zip", b"PK\x05\x06" + bytes(18), "no models/*.json")
_pt2("empty-file", b"")
_pt2("gg-json-as-pt2", IMPL_TEXT.encode())
_pt2_doc("json-list", lambda doc: [1, 2])
_pt2_doc("json-null", lambda doc: b"null")
_pt2_doc("json-not-utf8", lambda doc: b"\xff\xfe{}")
_pt2_doc("json-nan", lambda doc: json.dumps(doc).replace('{"as_int": 4}', "NaN", 1).encode())
_pt2_doc("json-deep", lambda doc: b"[" * 200000 + b"]" * 200000, "deep")
_pt2_doc("json-deep-args", lambda doc: json.dumps(doc).replace('{"as_ints": [1, 0]}', '{"as_ints": ' + "[" * 100000 +
                                                                "]" * 100000 + "}").encode(), "deep")
_pt2_doc("json-huge-int", lambda doc: json.dumps(doc).replace('{"as_int": 4}', '{"as_int": ' + "9" * 5000 + "}",
                                                              1).encode())
_pt2_doc("size-2-62", lambda doc: json.loads(json.dumps(doc).replace('{"as_int": 4}', '{"as_int": ' + str(2 ** 62) +
                                                                     "}", 1)))
_pt2_doc("size-negative", lambda doc: json.loads(json.dumps(doc).replace('{"as_int": 4}', '{"as_int": -4}', 1)))
_pt2_doc("size-float", lambda doc: json.loads(json.dumps(doc).replace('{"as_int": 4}', '{"as_int": 4.5}', 1)))
_pt2_doc("size-expr-garbage", lambda doc: json.loads(json.dumps(doc).replace(
    '{"as_int": 4}', '{"as_expr": {"expr_str": "__import__(\'os\')"}}', 1)))
_pt2_doc("size-unsupported", lambda doc: json.loads(json.dumps(doc).replace('{"as_int": 4}', '{"as_sym": 4}', 1)))
_pt2_doc("dtype-unknown", lambda doc: json.loads(json.dumps(doc).replace('"dtype": 7', '"dtype": 999', 1)))
_pt2_doc("target-unknown", lambda doc: json.loads(json.dumps(doc).replace("torch.ops.aten.mm.default",
                                                                          "torch.ops.aten.frobnicate.default")),
         "frobnicate")
_pt2_doc("target-newline", lambda doc: json.loads(json.dumps(doc).replace("torch.ops.aten.mm.default",
                                                                          "torch.ops.aten.mm\\nx.default")), "mm\\nx")
_pt2_doc("target-not-string", lambda doc: json.loads(json.dumps(doc).replace('"torch.ops.aten.mm.default"', "5")))
_pt2_doc("arg-kind-unknown", lambda doc: json.loads(json.dumps(doc).replace('"as_ints"', '"as_frobs"')), "as_frobs")
_pt2_doc("arg-empty", lambda doc: json.loads(json.dumps(doc).replace('{"as_ints": [1, 0]}', "{}")))
_pt2_doc("arg-two-kinds", lambda doc: json.loads(json.dumps(doc).replace('{"as_ints": [1, 0]}',
                                                                         '{"as_ints": [1, 0], "as_int": 3}')))
_pt2_doc("tensor-dangling", lambda doc: json.loads(json.dumps(doc).replace(
    '"arg": {"as_tensor": {"name": "x"}}', '"arg": {"as_tensor": {"name": "nope"}}', 1)), "nope")
_pt2_doc("tensor-defined-twice", lambda doc: json.loads(json.dumps(doc).replace(
    '"outputs": [{"as_tensor": {"name": "mm"}}]', '"outputs": [{"as_tensor": {"name": "permute"}}]')))
_pt2_doc("cycle", lambda doc: json.loads(json.dumps(doc).replace(
    '"arg": {"as_tensor": {"name": "p_w"}}', '"arg": {"as_tensor": {"name": "relu"}}', 1)), "relu")
_pt2_doc("input-spec-unknown-kind", lambda doc: json.loads(json.dumps(doc).replace('"user_input"', '"frob_input"')))
_pt2_doc("input-spec-two-kinds", lambda doc: _set(doc, lambda d: d["graph_module"]["signature"][
    "input_specs"][0].update(user_input={"arg": {"as_tensor": {"name": "x"}}})))
_pt2_doc("output-spec-not-tensor", lambda doc: json.loads(json.dumps(doc).replace(
    '"user_output": {"arg": {"as_tensor": {"name": "relu"}}}', '"user_output": {"arg": {"as_int": 3}}')))
_pt2_doc("no-outputs", lambda doc: _set(doc, lambda d: d["graph_module"]["signature"].__setitem__("output_specs", [])))
_pt2_doc("permute-dims-out-of-range", lambda doc: json.loads(json.dumps(doc).replace('{"as_ints": [1, 0]}',
                                                                                      '{"as_ints": [5, 0]}')))
_pt2_doc("permute-dims-short", lambda doc: json.loads(json.dumps(doc).replace('{"as_ints": [1, 0]}',
                                                                              '{"as_ints": [1]}')))
_pt2_doc("reduce-op-unknown", lambda doc: json.loads(json.dumps(doc).replace('{"as_string": "sum"}',
                                                                             '{"as_string": "xor"}')))
_pt2_doc("arg-missing", lambda doc: _set(doc, lambda d: d["graph_module"]["graph"]["nodes"][1]["inputs"].pop()), "mm")
_pt2_doc("arg-extra", lambda doc: _set(doc, lambda d: d["graph_module"]["graph"]["nodes"][1]["inputs"].append(
    {"name": "extra", "arg": {"as_int": 3}, "kind": 1})), "mm")
_pt2_doc("kwarg-unknown", lambda doc: _set(doc, lambda d: d["graph_module"]["graph"]["nodes"][1]["inputs"].append(
    {"name": "frobnicate", "arg": {"as_int": 3}, "kind": 2})), "frobnicate")
_pt2_doc("lifted-constant", lambda doc: json.loads(json.dumps(doc).replace(
    '"parameter": {"arg": {"name": "p_b"}', '"tensor_constant": {"arg": {"name": "p_b"}')),
         "lifted constant")
_pt2_doc("many-nodes", lambda doc: _set(doc, lambda d: d["graph_module"]["graph"]["nodes"].extend(
    [{"target": "torch.ops.aten.relu.default", "inputs": [{"name": "self", "arg": {"as_tensor": {"name": f"q{k}"}}}],
      "outputs": [{"as_tensor": {"name": f"q{k + 1}"}}]} for k in range(20000)])), "'q0'")


def _raw_zip(entries: list[tuple[str, bytes, int, int, int, int]], shift: int = 0) -> bytes:
    """A zip file written by hand: (name, stored data, uncompressed size, crc, method, flags) per member; the
    central directory places each member ``shift`` bytes after where it is."""
    out, central = b"", b""
    for name, data, usize, crc, method, flags in entries:
        nb = name.encode()
        head = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, flags, method, 0, 0, crc, len(data), usize, len(nb), 0)
        central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, flags, method, 0, 0, crc, len(data), usize,
                               len(nb), 0, 0, 0, 0, 0, len(out) + shift) + nb
        out += head + nb + data
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central), len(out), 0)
    return out + central + end


def _deflated(data_size: int, fill: bytes = b" ") -> bytes:
    co = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = fill * (1 << 20)
    return b"".join([co.compress(chunk) for _ in range(data_size >> 20)] + [co.flush()])


_BOMB_64M = None


def _bomb_64m() -> bytes:
    global _BOMB_64M
    if _BOMB_64M is None:
        _BOMB_64M = _deflated(64 << 20)
    return _BOMB_64M


_pt2("zip-bomb-declared", lambda: _raw_zip([("r0/models/model.json", _bomb_64m(), 3 << 30, 0, 8, 0)]), "model.json")
_pt2("zip-bomb-understated", lambda: _raw_zip([("r0/models/model.json", _bomb_64m(), 1000, 0, 8, 0)]))
_pt2("zip-bomb-brackets", lambda: _raw_zip(
    [("r0/models/model.json", _deflated(32 << 20, b"["), 32 << 20, zlib.crc32(b"[" * (32 << 20)), 8, 0)]), "deep")
_pt2("encrypted-member", lambda: _raw_zip([("r0/models/model.json", b"x" * 40, 40, 0, 0, 1)]), "model.json")
_pt2("unknown-compression", lambda: _raw_zip([("r0/models/model.json", b"x" * 40, 40, 0, 99, 0)]), "model.json")
_pt2("bad-crc", lambda: _raw_zip([("r0/models/model.json", b"{}", 2, 12345, 0, 0)]), "model.json")
_pt2("member-offset-outside", lambda: _raw_zip([("r0/models/model.json", b"{}", 2, zlib.crc32(b"{}"), 0, 0)],
                                               shift=10 ** 9), "model.json")
_pt2("nested-zip", lambda: _raw_zip([("r0/models/model.json", PT2_BYTES, len(PT2_BYTES), zlib.crc32(PT2_BYTES), 0, 0)]),
     "model.json")
_pt2("only-inner-archive", lambda: _raw_zip([("inner.pt2", PT2_BYTES, len(PT2_BYTES), zlib.crc32(PT2_BYTES), 0, 0)]),
     "models")
_pt2("path-traversal", [(zipfile.ZipInfo("../../../../tmp/gg-corpus/models/model.json"), b"{")], "model.json")
_pt2("absolute-path", [(zipfile.ZipInfo("/tmp/gg-corpus/models/model.json"), b"{}")], "model.json")
_pt2("directory-member", [(zipfile.ZipInfo("r0/models/model.json/"), b"")], "models")
_option("pt2-world-size-mismatch", lambda d: pt2(d, extra=["--world-size", "3"])[0], "world size 3")


@case("pt2-spec-two-archives", "pt2")
def _(d):
    argv, f = pt2(d)
    i = argv.index("--spec")
    return argv[:i + 2] + [str(PT2 / "spec.pt2")] + argv[i + 2:], ["specification"]


@case("pt2-directory", "pt2")
def _(d):
    argv, f = pt2(d)
    p = d / "dir.pt2"
    p.mkdir()
    argv[argv.index("--impl") + 1] = str(p)
    return argv, [str(p)]


@case("pt2-missing", "pt2")
def _(d):
    argv, f = pt2(d)
    p = d / "missing.pt2"
    argv[argv.index("--impl") + 1] = str(p)
    return argv, [str(p)]


# =================================================================================================
# The command line
# =================================================================================================

def _cli(name: str, argv: "list[str] | Callable[[Path], list[str]]", *needles: str):
    def build(d):
        base, f = fig1(d)
        args = argv(d) if callable(argv) else argv
        fill = dict(spec=f["spec"], impl=f["impl"], rel=f["rel"], d=d)
        return [a.format(**fill) for a in args], [n.format(**fill) for n in needles]
    add(f"cli-{name}", "cli", build)


V = ["verify", "--spec", "{spec}", "--impl", "{impl}", "--relation", "{rel}"]
_cli("no-arguments-verify", ["verify"], "--spec")
_cli("replay-dtype-without-replay", [*V, "--replay-dtype", "float64"], "--replay")
_cli("unknown-command", ["verfy"], "verfy")
_cli("unknown-option", [*V, "--specs", "x"], "--specs")
_cli("missing-relation", V[:5], "--relation")
_cli("option-without-value", [*V, "--seed"], "--seed")
_cli("spec-without-value", ["verify", "--spec", "--impl", "{impl}", "--relation", "{rel}"], "--impl")
_cli("world-size-text", [*V, "--world-size", "two"], "--world-size")
_cli("world-size-zero", [*V, "--world-size", "0"], "--world-size")
_cli("world-size-negative", [*V, "--world-size", "-2"], "--world-size")
_cli("world-size-huge", [*V, "--world-size", str(10 ** 30)], "world")
_cli("world-size-float", [*V, "--world-size", "2.0"], "--world-size")
_cli("seed-text", [*V, "--seed", "x"], "--seed")
_cli("seed-negative-replay", [*V, "--seed", "-1", "--replay"], "--seed")
_cli("timeout-zero", [*V, "--timeout", "0"], "--timeout")
_cli("timeout-nan", [*V, "--timeout", "nan"], "--timeout")
_cli("timeout-negative", [*V, "--timeout", "-5"], "--timeout")
_cli("timeout-text", [*V, "--timeout", "soon"], "--timeout")
_cli("max-iterations-zero", [*V, "--max-iterations", "0"], "--max-iterations")
_cli("max-iterations-negative", [*V, "--max-iterations", "-1"], "--max-iterations")
_cli("max-enodes-text", [*V, "--max-enodes", "many"], "--max-enodes")
_cli("frontend-unknown", [*V, "--frontend", "nope"], "frontend 'nope'")
_cli("spec-frontend-unknown", [*V, "--spec-frontend", "nope\n"], "nope\\n")
_cli("impl-frontend-unknown", [*V, "--impl-frontend", ""], "frontend ''")
_cli("plugin-option-bad", ["-p", "foo", *V], "-p")
_cli("plugin-option-unknown", ["-p", "no:nonexistent-plugin", *V], "nonexistent-plugin")
_cli("json-unwritable", [*V, "--json", "{d}/no/such/dir/out.json"], "out.json", "cannot write")
_cli("json-directory", [*V, "--json", "{d}"], "cannot write")
_cli("json-dev-full", [*V, "--json", "/dev/full"], "/dev/full")
_cli("two-specs-ir", ["verify", "--spec", "{spec}", "{spec}", "--impl", "{impl}", "--relation", "{rel}"], "one")
_cli("dump-missing", ["dump", "{d}/nope.gg.json"], "nope.gg.json")
_cli("dump-directory", ["dump", "{d}"], "{d}")
_cli("dump-bad-role", ["dump", "--role", "both", "{spec}"], "--role")
_cli("dump-truncated", lambda d: ["dump", str(put(d, "t.gg.json", SPEC_TEXT[:100]))], "t.gg.json")
_cli("dump-dev-zero", ["dump", "/dev/zero"], "/dev/zero")
_cli("dump-json-number", lambda d: ["dump", str(put(d, "n.gg.json", "5\n"))], "n.gg.json")
_cli("dump-unknown-frontend", ["dump", "--frontend", "nope", "{spec}"], "nope")
_cli("lemmas-check-unknown-ref", ["lemmas", "check", "--ref", "987654321"], "987654321")
_cli("lemmas-check-ref-text", ["lemmas", "check", "--ref", "x"], "--ref")
_cli("lemmas-check-trials-negative", ["lemmas", "check", "--trials", "-1", "--ref", "987654321"], "--trials")
_cli("capture-frontend-unknown", ["capture", "model.py", "--frontend", "nope", "--world-size", "2", "-o", "{d}/o"],
     "nope")
_cli("capture-frontend-cannot", ["capture", "model.py", "--frontend", "ir", "--world-size", "2", "-o", "{d}/o"],
     "capture")
_cli("capture-world-size-zero", ["capture", "model.py", "--world-size", "0", "-o", "{d}/o"], "--world-size")


# =================================================================================================
# Running the corpus
# =================================================================================================

class CaseTimeout(BaseException):
    """Raised in a case by the per-case timer (a BaseException, so that no handler in graphguard takes it)."""


def _on_alarm(signum, frame):
    raise CaseTimeout()


def main_exit_code(argv: list[str]) -> int:
    """``graphguard ARGV`` in this process (``graphguard.cli.main``): its exit code; the caller redirects its
    output."""
    from graphguard.cli import main
    try:
        main(argv)
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


def run_case(c: Case, d: Path, timed: bool = True) -> dict:
    d.mkdir(parents=True, exist_ok=True)
    b0 = time.monotonic()
    argv, needles = c.build(d)
    built = time.monotonic() - b0
    out, err = io.StringIO(), io.StringIO()
    t0, c0 = time.monotonic(), time.process_time()
    rc: "int | str"
    signal.setitimer(signal.ITIMER_PROF, CASE_SECONDS if timed else 0)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            rc = main_exit_code(argv)
    except CaseTimeout:
        rc = "timeout"
    except BaseException as e:  # noqa: BLE001 - recorded, the worker goes on
        rc = f"escaped: {type(e).__name__}: {e}"
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    return {"name": c.name, "rc": rc, "stdout": _clip(out.getvalue()), "stderr": _clip(err.getvalue()),
            "stderr_lines": len(err.getvalue().splitlines()), "needles": needles,
            "seconds": round(time.monotonic() - t0, 4), "cpu": round(time.process_time() - c0, 4),
            "build_seconds": round(built, 4)}


def _clip(s: str, n: int = 20000) -> str:
    return s if len(s) <= n else f"{s[:n // 2]}\n[... {len(s) - n} characters ...]\n{s[-n // 2:]}"


def worker(results: Path, workdir: Path) -> None:
    """Run the named cases (stdin, one per line), appending a JSON line per case to ``results``."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    signal.signal(signal.SIGPROF, _on_alarm)
    names = sys.stdin.read().split()
    warm = {}
    for n in BASES:  # untimed: imports and caches (torch only where a .pt2 case follows)
        if n != "base-pt2" or any(needs_torch(m) for m in names):
            warm[n] = run_case(CASES[n], workdir / f"warm-{os.getpid()}" / n, timed=False)
    with open(results, "a") as f:
        for n in names:
            f.write(json.dumps({"start": n}) + "\n")
            f.flush()
            res = warm[n] if n in warm else run_case(CASES[n], workdir / n)
            res["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            f.write(json.dumps(res) + "\n")
            f.flush()


def _read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break
    return out


def needs_torch(name: str) -> bool:
    """Whether a case reads a .pt2 archive (the fx frontend reads op schemas from torch)."""
    return name.startswith(("pt2-", "base-pt2"))


def run_corpus(names: list[str], workdir: Path, workers: int = 2) -> dict[str, dict]:
    """Run cases in ``workers`` worker processes; a dead or hung worker is replaced. Returns name -> result.
    The .pt2 cases all go to the first worker, so that only one imports torch."""
    workdir.mkdir(parents=True, exist_ok=True)
    torch_cases = [n for n in names if needs_torch(n)]
    rest = [n for n in names if not needs_torch(n)]
    first = max(0, len(names) // workers - len(torch_cases))
    chunks = [torch_cases + rest[:first]] + [rest[first:][k::workers - 1] for k in range(workers - 1)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    results: dict[str, dict] = {}
    procs = []

    def start(k: int, todo: list[str], gen: int):
        path = workdir / f"results-{k}-{gen}.jsonl"
        p = subprocess.Popen([sys.executable, str(Path(__file__)), "worker", str(path), str(workdir / "cases")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        p.stdin.write("\n".join(todo))
        p.stdin.close()
        return {"k": k, "proc": p, "path": path, "todo": todo, "gen": gen, "seen": 0, "last": time.monotonic()}

    procs = [start(k, c, 0) for k, c in enumerate(chunks) if c]
    while procs:
        time.sleep(0.05)
        for w in list(procs):
            lines = _read(w["path"])
            if len(lines) > w["seen"]:
                w["seen"], w["last"] = len(lines), time.monotonic()
            done = {r["name"] for r in lines if "name" in r}
            for r in lines:
                if "name" in r:
                    results[r["name"]] = r
            dead = w["proc"].poll() is not None
            hung = time.monotonic() - w["last"] > HANG_SECONDS
            if not dead and not hung:
                continue
            if hung:
                w["proc"].kill()
            w["proc"].wait()
            stderr = w["proc"].stderr.read()
            procs.remove(w)
            started = [r["start"] for r in lines if "start" in r]
            crashed = started[-1] if started and started[-1] not in done else None
            if crashed is not None:
                why = "hung" if hung else f"worker died (exit {w['proc'].returncode})"
                results[crashed] = {"name": crashed, "rc": why, "stdout": "", "stderr": stderr[-4000:],
                                    "needles": [], "seconds": None, "cpu": None}
            rest = [n for n in w["todo"] if n not in results]
            if rest:
                procs.append(start(w["k"], rest, w["gen"] + 1))
    return results


def problems(c: Case, r: dict) -> list[str]:
    """What is wrong with one case's result (empty: as expected)."""
    out, err, rc = r["stdout"], r["stderr"], r["rc"]
    bad = []
    if "Traceback" in out + err:
        bad.append("a Python traceback was printed")
    if not isinstance(rc, int):
        return bad + [f"no exit code: {rc}"]
    if c.expect == "refines":
        return bad + ([f"exit code {rc}: the unmodified input does not verify"] if rc != 0 else [])
    if rc == 4 or (c.expect == "error" and rc != 2) or rc not in (0, 1, 2, 3):
        bad.append(f"exit code {rc}, expected 2" + ("" if c.expect == "error" else " or a verdict (0, 1, 3)"))
    if rc == 2:
        ls = err.splitlines()
        if r["stderr_lines"] != 1:
            bad.append(f"{r['stderr_lines']} lines on stderr, expected exactly one")
        elif not ls[0].startswith("graphguard: error:"):
            bad.append("the line does not start with 'graphguard: error:'")
        else:
            bad += [f"the line does not mention {n!r}" for n in r["needles"] if n not in ls[0]]
    if r["cpu"] is not None and r["cpu"] > CASE_SECONDS:
        bad.append(f"took {r['cpu']} s of CPU")
    return bad


def describe(c: Case, r: dict) -> str:
    return (f"{c.name} [{c.kind}]: exit {r['rc']} in {r['cpu']} s of CPU ({r['seconds']} s)\n"
            f"--- stdout ---\n{r['stdout']}--- stderr ---\n{r['stderr']}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        worker(Path(sys.argv[2]), Path(sys.argv[3]))
