#!/usr/bin/env python3
"""Benchmark (run by hand): what the independent checker (graphguard/check.py, on by default) adds to a
verification, for every shipped example whose graphs are kept as files, and the Llama-3.2-1B cross-framework
layer (examples/cross-hf-neuronx-llama at --size llama-3.2-1b, TP 2: captured here, needs torch and
transformers; skipped with a line otherwise).

    python bench/checker_cost.py [--only NAME,...] [--no-1b]

Each case runs in a fresh process (as `graphguard verify` does: the checker maps its own memory): verify with
``check="off"`` (wall seconds of graphguard.verify, loading included), then with ``check="outputs"``, whose
``timings["check"]`` is the checker's seconds. A verdict other than refines is not checked (checker 0). Per case:
verdict, R_o lines checked, verify s (check off), checker s, checker / verify, and the same in this process's CPU
seconds (``checked["cpu_seconds"]``: less sensitive than wall time to other work on a shared machine); the last
line the totals' ratios.
Target (issue 39): checker <= 25 % of verification time.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"


def cases(tmp: Path) -> dict[str, dict]:
    """name -> verify arguments (paths, frontends), for the examples kept as graph files."""
    out: dict[str, dict] = {}

    def files(name, d, spec="spec.gg.json", impl="impl.gg.json", rel="relation.yaml", **kw):
        out[name] = dict(spec=str(d / spec), impl=str(d / impl), relation=str(d / rel), **kw)
    for d in sorted(EX.glob("*/spec.gg.json")) + sorted(EX.glob("bugs/*/spec.gg.json")):
        files(str(d.parent.relative_to(EX)), d.parent)
    for d in sorted((EX / "torchtitan-llama" / "captured").glob("*/spec.gg.json")):
        files(f"torchtitan-llama/{d.parent.name}", d.parent)
    for sub in ("graphs", "padded/graphs"):
        g = EX / "vllm-qwen2-real" / sub
        for ws in (2, 4):
            if (g / f"impl-tp{ws}.gg.json").is_file():
                files(f"vllm-qwen2-real{'-padded' if 'padded' in sub else ''} tp{ws}", g, impl=f"impl-tp{ws}.gg.json",
                      rel=f"relation-tp{ws}.yaml")
    for d in (EX / "neuronx-llama-tp", EX / "bugs" / "neuronx-k-slice"):
        files(str(d.relative_to(EX)), d, spec="spec.hlo", impl="impl.hlo.pb", frontend="hlo", world_size=2)
    x1b = tmp / "cross-hf-neuronx-llama@llama-3.2-1b"
    out["cross-hf-neuronx-llama@llama-3.2-1b tp2"] = dict(
        capture=[sys.executable, str(EX / "cross-hf-neuronx-llama" / "capture.py"), "--tp", "2", "--size",
                 "llama-3.2-1b", "--out", str(x1b)],
        spec=str(x1b / "spec.gg.json"), impl=str(x1b / "impl.hlo.pb"), relation=str(x1b / "relation.yaml"),
        spec_frontend="ir", impl_frontend="hlo", world_size=2)
    return out


def one(args: dict) -> dict:
    """Verify with the checker off, then on (this process: fresh); the seconds of each."""
    import graphguard
    from graphguard.plugins import load_plugins
    pl = load_plugins()
    kw = {k: v for k, v in args.items() if k not in ("spec", "impl", "relation", "capture")}
    t, cpu = time.perf_counter(), time.process_time()
    off = graphguard.verify(args["spec"], args["impl"], args["relation"], plugins=pl, check="off", **kw)
    t_off, cpu_off = time.perf_counter() - t, time.process_time() - cpu
    on = graphguard.verify(args["spec"], args["impl"], args["relation"], plugins=pl, **kw)
    c = on.checked or {}
    return {"verdict_off": off.verdict, "verdict": on.verdict, "verify_s": t_off, "check_s": on.timings.get("check", 0.0),
            "verify_cpu": cpu_off, "check_cpu": c.get("cpu_seconds", 0.0),
            "lines": c.get("lines", 0), "ok": c.get("ok"), "unconfirmed": c.get("unconfirmed", [])[:3],
            "error": c.get("error")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None, help="Comma-separated case names (default: all).")
    ap.add_argument("--no-1b", action="store_true", help="Skip the Llama-3.2-1B layer (capture ~15 s, ~6 GiB).")
    ap.add_argument("--case", default=None, help=argparse.SUPPRESS)  # (a worker: one case as JSON on stdout)
    a = ap.parse_args()
    if a.case:
        print(json.dumps(one(json.loads(a.case))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        todo = cases(Path(tmp))
        if a.only:
            todo = {k: v for k, v in todo.items() if k in a.only.split(",")}
        if a.no_1b:
            todo = {k: v for k, v in todo.items() if "llama-3.2-1b" not in k}
        print(f"{'example':42} {'verdict':16} {'lines':>5} {'verify s':>9} {'checker s':>9} {'ratio':>6} "
              f"{'verify cpu':>10} {'checker cpu':>11} {'ratio':>6}", flush=True)
        tot_v = tot_c = cpu_v = cpu_c = 0.0
        for name, args in todo.items():
            if "capture" in args:
                p = subprocess.run(args["capture"], capture_output=True, text=True)
                if p.returncode:
                    print(f"{name:42} skipped: capture failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
                    continue
            p = subprocess.run([sys.executable, __file__, "--case", json.dumps(args)], capture_output=True, text=True)
            if p.returncode:
                print(f"{name:42} error: {(p.stderr or p.stdout).strip().splitlines()[-1:]}", flush=True)
                continue
            r = json.loads(p.stdout.strip().splitlines()[-1])
            tot_v += r["verify_s"]
            tot_c += r["check_s"]
            cpu_v += r["verify_cpu"]
            cpu_c += r["check_cpu"]
            verdict = r["verdict"] + ("" if r["verdict"] == r["verdict_off"] else f" (off: {r['verdict_off']})")
            print(f"{name:42} {verdict:16} {r['lines']:>5} {r['verify_s']:>9.2f} {r['check_s']:>9.2f} "
                  f"{r['check_s'] / r['verify_s']:>6.1%} {r['verify_cpu']:>10.2f} {r['check_cpu']:>11.2f} "
                  f"{r['check_cpu'] / max(r['verify_cpu'], 1e-9):>6.1%}", flush=True)
            for u in r["unconfirmed"] + ([r["error"]] if r["error"] else []):
                print(f"    not confirmed: {u}")
        print(f"total: verify {tot_v:.2f} s, checker {tot_c:.2f} s, ratio {tot_c / max(tot_v, 1e-9):.1%}; CPU: verify "
              f"{cpu_v:.2f} s, checker {cpu_c:.2f} s, ratio {cpu_c / max(cpu_v, 1e-9):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
