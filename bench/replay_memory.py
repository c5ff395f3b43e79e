#!/usr/bin/env python3
"""Benchmark (run by hand): peak memory and time of --replay on the NeuronX Llama-3 layer at production size.

    python bench/replay_memory.py [--size llama-3.2-1b] [--tp 2] [--batch 1] [--new-tokens 8] [--cached 120]
                                  [--dtypes graph,float64] [--cap-gb 6] [--tracemalloc]

examples/neuronx-llama-tp/make.py writes the layer (Llama-3.2-1B: hidden 2048, 32 heads, 8 KV heads, MLP 8192,
vocabulary 128256, f16; a 2048 x 128256 LM head) for TP=2; each replay dtype then runs in its own process,
which verifies, replays and prints its peak RSS (``ru_maxrss``) after verification and after the replay,
wall and CPU time of both phases, and the replay's own count of the tensors it held at once. ``--cap-gb``
runs each process under ``prlimit --as`` (address space), so that a replay that does not fit stops with a
MemoryError (reported as such) instead of filling the machine. Target (issue 11): the default replay of the
production layer in <= 4 GB peak RSS. (A replay that keeps every tensor of both graphs in float64 needs about
20 GB here; under a 6 GB cap it stops with a MemoryError at 5.6 GB RSS.)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(files: Path, dtype: str, trace: bool) -> None:
    """Verify and replay in this process; one JSON line on stdout."""
    if trace:
        import tracemalloc
        tracemalloc.start()
    import graphguard
    from graphguard.engine.replay import replay
    from graphguard.plugins import load_plugins
    from graphguard.api import load_inputs

    def rss() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB

    out: dict = {"dtype": dtype}
    pl = load_plugins()
    t, c = time.perf_counter(), time.process_time()
    spec, impl, rel = (str(files / f) for f in ("spec.hlo", "impl.hlo.pb", "relation.yaml"))
    r = graphguard.verify(spec, impl, rel, frontend="hlo", world_size=r_world(files), plugins=pl)
    out.update(verdict=r.verdict, verify_wall=time.perf_counter() - t, verify_cpu=time.process_time() - c,
               rss_after_verify=rss())
    g_s, g_d, relation, _ = load_inputs(spec, impl, rel, frontend="hlo", world_size=r_world(files), plugins=pl)
    t, c = time.perf_counter(), time.process_time()
    try:
        rep = replay(r, g_s, g_d, relation, pl.registry, dtype=dtype)
        out.update(ok=rep["ok"], checked=rep["checked"], tol_ratio=rep["tol_ratio"], steps=rep["steps"],
                   peak_tensors=rep["peak_tensors"], held_gib=rep["peak_bytes"] / 2**30,
                   max_abs_diff=rep["max_abs_diff"])
    except MemoryError as e:
        out.update(error=f"MemoryError: {e}")
    out.update(replay_wall=time.perf_counter() - t, replay_cpu=time.process_time() - c, rss_peak=rss())
    if trace:
        out["traced_peak_gib"] = tracemalloc.get_traced_memory()[1] / 2**30
    print(json.dumps(out), flush=True)


def r_world(files: Path) -> int:
    return int(files.name.rsplit("tp", 1)[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="llama-3.2-1b", choices=["tiny", "llama-3.2-1b"])
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--cached", type=int, default=120)
    ap.add_argument("--dtypes", default="graph", help="replay dtypes, each in its own process")
    ap.add_argument("--cap-gb", type=float, default=6.0, help="address-space cap per process (prlimit --as)")
    ap.add_argument("--tracemalloc", action="store_true", help="also report the peak of traced allocations")
    ap.add_argument("--child", nargs=2, metavar=("FILES", "DTYPE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(Path(a.child[0]), a.child[1], a.tracemalloc)
    tmp = Path(tempfile.mkdtemp())
    try:
        files = tmp / f"{a.size}-tp{a.tp}"
        t = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "examples/neuronx-llama-tp/make.py"), "--size", a.size,
                        "--tp", str(a.tp), "--batch", str(a.batch), "--new-tokens", str(a.new_tokens),
                        "--cached", str(a.cached), "--out", str(files)], check=True)
        print(f"layer {a.size}, tp={a.tp}, batch {a.batch}, {a.new_tokens} new tokens, {a.cached} cached "
              f"(written in {time.perf_counter() - t:.1f} s); cap {a.cap_gb:g} GB address space per process",
              flush=True)
        print(f"{'dtype':8} {'verdict':8} {'replay':9} {'checked':>7} {'tol ratio':>9} {'held GiB':>8} "
              f"{'tensors':>7} {'RSS verify':>10} {'RSS peak':>9} {'verify s':>8} {'replay s':>8} "
              f"{'replay cpu':>10}", flush=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for dtype in a.dtypes.split(","):
            cmd = [sys.executable, __file__, "--child", str(files), dtype] + (["--tracemalloc"] * a.tracemalloc)
            if a.cap_gb and shutil.which("prlimit"):
                cmd = ["prlimit", f"--as={int(a.cap_gb * 1e9)}"] + cmd
            t = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
            line = (p.stdout.strip().splitlines() or [""])[-1]
            try:
                r = json.loads(line)
            except ValueError:
                why = (p.stderr.strip().splitlines() or ["no output"])[-1]
                print(f"{dtype:8} failed after {time.perf_counter() - t:.0f} s (exit {p.returncode}): {why}")
                continue
            status = "MemoryErr" if "error" in r else ("ok" if r["ok"] else "MISMATCH")
            print(f"{dtype:8} {r['verdict'][:8]:8} {status:9} {r.get('checked', 0):>7} "
                  f"{r.get('tol_ratio', float('nan')):>9.3g} {r.get('held_gib', float('nan')):>8.2f} "
                  f"{r.get('peak_tensors', 0):>7} {r['rss_after_verify']:>9.2f}G {r['rss_peak']:>8.2f}G "
                  f"{r['verify_wall']:>8.1f} {r['replay_wall']:>8.1f} {r['replay_cpu']:>10.1f}"
                  + (f"   traced peak {r['traced_peak_gib']:.2f} GiB" if "traced_peak_gib" in r else "")
                  + (f"   {r['error']}" if "error" in r else ""), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
