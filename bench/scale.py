#!/usr/bin/env python3
"""Benchmark (run by hand): how verification grows with the number of layers, in one run.

    python3 bench/scale.py                                   # llama-tp, TP 8, forward+backward, 1 and 32 layers
    python3 bench/scale.py --model gpt-tp --degree 4 --layers 1,2,4,8 --forward-only
    python3 bench/scale.py --shape 405b --layers 1,2,4 --forward-only   # Llama-3.1-405B's layers, no weights

For each layer count: the example's model file (``GG_LAYERS`` sets its depth) is captured and verified against
its own relation and expectations; printed are the G_s / G_d operator counts, capture and verification time
(wall and CPU seconds of this process), how many G_s operators took an earlier operator's result (the
per-operator memo: a repeated layer's operators meet the problem of the first layer's again, up to names, and
each such reuse is a lookup of the same local problem, not an assumption) and the layers the certificate
lists as reused. The last line is ``layers A -> B time ratio: X``, the verification time (CPU) of the deepest
model over the shallowest's; the target of the whole-model issue is X <= 2 for 1 -> 32 layers at TP 8.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERED = ("llama-tp", "gpt-tp", "gpt-tp-vocab")  # examples whose depth GG_LAYERS sets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-tp", choices=LAYERED)
    ap.add_argument("--degree", type=int, default=8)
    ap.add_argument("--layers", default="1,32", help="comma-separated layer counts (the first is the baseline)")
    ap.add_argument("--forward-only", action="store_true", help="no backward (default: forward+backward)")
    ap.add_argument("--repeat", action="store_true", help="layer 0 traced, the others taken from its trace "
                    "(GG_REPEAT=1: the model file's repeat = 'layers'; with backward layers 0 and 1 traced)")
    ap.add_argument("--workers", type=int, default=1, help="capture the programs as Ray tasks on this many workers "
                    "(this process one of them)")
    ap.add_argument("--shape", default="", help="llama-tp at a production shape, built on the meta device "
                    "(no weights allocated): 405b or 8b (examples/llama-tp/model.py: GG_SHAPE)")
    a = ap.parse_args(argv)
    if a.shape:
        os.environ["GG_SHAPE"] = a.shape
    if a.repeat:
        os.environ["GG_REPEAT"] = "1"
    import graphguard
    from graphguard.frontends.fx.model_file import capture_model_file
    from graphguard.plugins import load_plugins
    pl = load_plugins()
    counts = [int(x) for x in a.layers.split(",")]
    mode = "fwd" if a.forward_only else "fwd+bwd"
    print(f"{a.model}{f' ({a.shape}-shaped, meta device)' if a.shape else ''}, TP {a.degree}, {mode}; this "
          f"machine: {os.cpu_count()} cores", flush=True)
    print(f"{'layers':>6} {'verdict':10} {'G_s':>6} {'G_d':>7} {'capture s':>9} {'cap cpu':>8} {'verify s':>9} "
          f"{'ver cpu':>8} {'reused ops':>11} {'layers reused':>14}", flush=True)
    times = {}
    for n in counts:
        os.environ["GG_LAYERS"] = str(n)
        with tempfile.TemporaryDirectory() as tmp:
            t, c = time.perf_counter(), time.process_time()
            f = capture_model_file(ROOT / "examples" / a.model / "model.py", tmp, a.degree, not a.forward_only,
                                   plugins=pl, workers=a.workers)
            cap, cap_cpu = time.perf_counter() - t, time.process_time() - c
            t, c = time.perf_counter(), time.process_time()
            r = graphguard.verify(f["spec"], f["impl"], f["relation"], plugins=pl)
            ver, ver_cpu = time.perf_counter() - t, time.process_time() - c
        times[n] = ver_cpu
        reused = r.stats.get("reused_results", 0)
        layers = r.layers or []
        n_reused = sum(1 for x in layers if x["reused"] == x["ops"] and x["ops"])
        print(f"{n:>6} {r.verdict:10} {r.timings['n_spec_ops']:>6} {r.timings['n_impl_ops']:>7} {cap:>9.1f} "
              f"{cap_cpu:>8.1f} {ver:>9.1f} {ver_cpu:>8.1f} {reused:>5}/{r.timings['n_spec_ops']:<5} "
              f"{n_reused:>6}/{len(layers):<7}", flush=True)
        if r.verdict != "refines":
            print(f"  stopped at {r.failure.op} ({r.failure.node}): {r.failure.reason[:200]}", flush=True)
    import resource
    print(f"peak memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    lo, hi = counts[0], counts[-1]
    print(f"layers {lo} -> {hi} time ratio: {times[hi] / times[lo]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
