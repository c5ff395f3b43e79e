#!/usr/bin/env python3
"""Benchmark (run by hand): long operator chains, end to end (gg.json load and lint, verification, R_o printed).

    python bench/verify_chain.py [--sizes 1000,10000,100000] [--variants relu,mix,collective,bug]
                                 [--world 2] [--every 50] [--bug-at 5000] [--limit 600]

Each case is written as spec.gg.json / impl.gg.json / relation.yaml in a temporary directory and verified in
a fresh process (so peak RSS is per case). Variants (n = number of G_s operators):

* ``relu``: x -> relu -> ... -> relu; every rank does the same on its row shard (``X: concat(X@0, X@1, dim=0)``);
* ``mix``: a cycle of aten.relu, aten.add.Tensor of a replicated bias (``b: [b@0, b@1]``), reshape to 1-D,
  aten.mul.Tensor by a constant (one aten.scalar_tensor node per multiplication), reshape back;
* ``collective``: the relu chain where G_d all-gathers every ``--every`` operators and each rank slices its
  own rows back (G_s has nothing there);
* ``bug``: the relu chain where rank 1 computes neg instead of relu at operator ``--bug-at`` (reported there).

``chain()`` is also what tests/test_chains.py builds its chains with.

Prints per case: verdict, where it stopped, G_s/G_d op counts, wall and CPU seconds of loading (read + lint +
shape inference of both graphs) and of verifying (inference + R_o rendering), whole-process CPU seconds and
peak RSS. Targets (issue 11, this 2-core machine): 10 000 ops in seconds, 100 000 ops in <= 2 min.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS, COLS = 8, 4


def chain(variant: str, n: int, world: int = 2, every: int = 50, bug_at: int | None = None):
    """(spec, impl, relation text) of a chain of ``n`` G_s operators; G_s operator i (1-based) is named ``op{i}``.
    With ``bug_at``, rank 1 is wrong at operator ``bug_at``: neg for relu; for ``mix``, also an add that skips
    the relu before it, and a multiplication by 0.25 instead of 0.5 (a reshape has no bug)."""
    from graphguard.ir.builder import GraphBuilder
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=world)
    rows = ROWS // world * world
    s.input("X", [rows, COLS])
    for r in range(world):
        d.input(f"X@{r}", [rows // world, COLS])
    rel = "inputs:\n  X: concat(" + ", ".join(f"X@{r}" for r in range(world)) + ", dim=0)\n"
    if variant == "mix":
        s.input("b", [COLS])
        for r in range(world):
            d.input(f"b@{r}", [COLS])
        rel += "  b: [" + ", ".join(f"b@{r}" for r in range(world)) + "]\n"
    before_d = prev_d = [f"X@{r}" for r in range(world)]
    prev_s = "X"
    for i in range(1, n + 1):
        out_s, out_d = f"t{i}", [f"t{i}@{r}" for r in range(world)]
        wrong = [bug_at == i and r == 1 for r in range(world)]
        kind = (i - 1) % 5 if variant == "mix" else -1
        if kind == 0:
            s.op("aten.relu", [prev_s], out_s, name=f"op{i}")
            for r in range(world):
                d.op("aten.neg" if wrong[r] else "aten.relu", [prev_d[r]], out_d[r])
        elif kind == 1:
            s.op("aten.add.Tensor", [prev_s, "b"], out_s, name=f"op{i}")
            for r in range(world):
                d.op("aten.add.Tensor", [before_d[r] if wrong[r] else prev_d[r], f"b@{r}"], out_d[r])
        elif kind in (2, 4):
            if any(wrong):
                raise ValueError(f"operator {i} of the mix chain is a reshape: no bug there")
            flat = kind == 2
            s.op("core.reshape", [prev_s], out_s, name=f"op{i}", shape=[rows * COLS] if flat else [rows, COLS])
            for r in range(world):
                d.op("core.reshape", [prev_d[r]], out_d[r],
                     shape=[rows // world * COLS] if flat else [rows // world, COLS])
        elif kind == 3:
            s.op("aten.scalar_tensor", [], f"c{i}", name=f"c{i}", s=0.5)
            s.op("aten.mul.Tensor", [prev_s, f"c{i}"], out_s, name=f"op{i}")
            for r in range(world):
                d.op("aten.scalar_tensor", [], f"c{i}@{r}", s=0.25 if wrong[r] else 0.5)
                d.op("aten.mul.Tensor", [prev_d[r], f"c{i}@{r}"], out_d[r])
        else:
            s.op("core.relu", [prev_s], out_s, name=f"op{i}", loc=f"chain.py:{i}")
            for r in range(world):
                d.op("core.neg" if wrong[r] else "core.relu", [prev_d[r]], out_d[r], loc=f"chain.py:{i}")
            if variant == "collective" and i % every == 0 and i < n:
                g = [f"g{i}@{r}" for r in range(world)]
                d.op("core.all_gather", out_d, g, dim=0, group=list(range(world)))
                h = rows // world
                out_d = [d.op("core.slice", [g[r]], f"s{i}@{r}", dim=0, start=r * h, end=(r + 1) * h)
                         for r in range(world)]
        before_d, prev_s, prev_d = prev_d, out_s, out_d
    s.output(prev_s)
    d.output(*prev_d)
    return s.to_dict(), d.to_dict(), rel


def child(case: Path) -> None:
    """Verify one case in this process; print one JSON line of figures."""
    import graphguard
    from graphguard.api import load_inputs
    from graphguard.plugins import load_plugins
    pl = load_plugins()
    w0, c0 = time.perf_counter(), time.process_time()
    g_s, g_d, rel, pl = load_inputs(case / "spec.gg.json", case / "impl.gg.json", case / "relation.yaml", plugins=pl)
    w1, c1 = time.perf_counter(), time.process_time()
    r = graphguard.verify(g_s, g_d, rel, plugins=pl)
    with open(os.devnull, "w") as f:
        f.write(r.render())
    w2, c2 = time.perf_counter(), time.process_time()
    print(json.dumps({"verdict": r.verdict, "node": r.failure.node if r.failure else "",
                      "reason": r.failure.reason if r.failure else "", "r_o": len(r.r_o_lines()),
                      "n_s": len(g_s.nodes), "n_d": len(g_d.nodes), "load_wall": w1 - w0, "load_cpu": c1 - c0,
                      "verify_wall": w2 - w1, "verify_cpu": c2 - c1,
                      "rss_mb": _peak_rss_mb()}))


def _peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the parent at fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_case(case: Path, limit: float) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, __file__, "--child", str(case)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return {"verdict": f"killed after {limit:g} s"}
    finally:
        wall = time.perf_counter() - t0
    lines = [x for x in out.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"verdict": f"exit {p.returncode}: {(err.strip().splitlines() or ['?'])[-1][:60]}"}
    res = json.loads(lines[-1])
    res["wall"] = wall
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--variants", default="relu,mix,collective,bug")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--every", type=int, default=50, help="collective: all-gather every this many operators")
    ap.add_argument("--bug-at", type=int, default=5000, help="bug: the operator where rank 1 is wrong")
    ap.add_argument("--limit", type=float, default=600, help="seconds before a case is killed")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(Path(a.child))
    sys.path.insert(0, str(ROOT))
    print(f"{'variant':10} {'G_s ops':>7} {'G_d ops':>7} {'verdict':16} {'stopped at':10} {'load s':>7} "
          f"{'load cpu':>8} {'verify s':>8} {'verify cpu':>10} {'ms/op':>6} {'RSS MB':>7}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for variant in a.variants.split(","):
            for n in [int(x) for x in a.sizes.split(",")]:
                bug_at = min(a.bug_at, n) if variant == "bug" else None
                case = Path(tmp) / f"{variant}-{n}"
                case.mkdir()
                spec, impl, rel = chain("relu" if variant == "bug" else variant, n, a.world, a.every, bug_at)
                (case / "spec.gg.json").write_text(json.dumps(spec))
                (case / "impl.gg.json").write_text(json.dumps(impl))
                (case / "relation.yaml").write_text(rel)
                r = run_case(case, a.limit)
                if "load_wall" not in r:
                    print(f"{variant:10} {n:>7} {len(impl['nodes']):>7} {r['verdict']}", flush=True)
                    continue
                print(f"{variant:10} {r['n_s']:>7} {r['n_d']:>7} {r['verdict']:16} {r['node']:10} "
                      f"{r['load_wall']:>7.2f} {r['load_cpu']:>8.2f} {r['verify_wall']:>8.2f} {r['verify_cpu']:>10.2f} "
                      f"{1000 * r['verify_wall'] / n:>6.2f} {r['rss_mb']:>7.0f}", flush=True)
                if r["verdict"] == "inconclusive":
                    print(f"{'':10} ({r['reason']})", flush=True)


if __name__ == "__main__":
    main()
