#!/usr/bin/env python3
"""Benchmark (run by hand): a bug's verification time against its correct twin's.

    python3 bench/bug_vs_twin.py [--only NAME ...] [--check off|outputs] [--timeout 900]

Every shipped bug example (``examples/bugs/*``) is run as its ``run`` script runs it -- the same capture
flags (``--backward``, ``--world-size``, frontend) -- and so is its correct twin: the example its model file
loads and patches (``parents[2] / "<example>"``), the same model with the environment variable that turns
the bug off (``PAD_AT_END=1``, ``ROPE_BACKWARD_OFFSET=1``, ``GG_BUG=0``; with the settings the bug's model
file gives the example it loads, e.g. ``GG_SP=1``), or the example that generates the bug's graphs
with another variant. Each run writes ``--json``; the figure compared is the verification's own time
(``timings.infer``: the relation inference, not the capture, nor loading the graphs). A bug whose search
explores without bound shows as a large ratio (the issue's target: no more than a few times the twin's) or
as a run cut at ``--timeout`` (counted, with the time it had used).

Last lines: per pair the two verdicts and times and the ratio; then the largest ratio, the median, and the
CPU seconds of the whole bench.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUGS = ROOT / "examples" / "bugs"
# twins that are not the example a bug's model file loads: (bug, how its twin differs)
ENV_TWINS = {"pad-slice-mismatch": {"PAD_AT_END": "1"}, "rope-offset-sp": {"ROPE_BACKWARD_OFFSET": "1"},
             "megatron-grad-accum-scale": {"GG_BUG": "0"}}
# the settings a bug's model file gives the example it loads, given to the twin by the environment
TWIN_SETTINGS = {"megatron-sp-grad-avg": {"GG_SP": "1"}, "megatron-sp-layernorm-grad": {"GG_SP": "1"},
                 "megatron-moe-aux-scale": {"GG_AUX": "global_aux_loss"},
                 "megatron-moe-tp-grad": {"GG_TP": "2", "GG_EXPERTS": "2", "GG_TOPK": "1"}}
SCRIPT_TWINS = {  # graph-file examples: the twin's run script, with the same options
    "neuronx-k-slice": ROOT / "examples" / "neuronx-llama-tp" / "run",
    "paper-fig1-missing-reduction": ROOT / "examples" / "paper-fig1" / "run",
}


def launcher(run: Path) -> tuple[str | None, list[str]]:
    """(the shared launcher a bug's run script execs -- run-model.sh or run-jax.sh -- and its flags), or
    (None, []) for a run script of another kind."""
    text = run.read_text()
    m = re.search(r'\.lib/(run-model\.sh|run-jax\.sh)"\s+"\$here/model\.py"\s*(.*?)"\$@"', text)
    if not m:
        return None, []
    return m.group(1), m.group(2).split()


def twin_model(model: Path) -> Path | None:
    m = re.search(r'parents\[2\]\s*/\s*"([a-z0-9-]+)"', model.read_text())
    return ROOT / "examples" / m.group(1) / "model.py" if m else None


def pairs(only: list[str]) -> list[tuple[str, list[str], list[str], dict]]:
    """(name, bug command, twin command, twin environment) for every bug example that has a twin."""
    out = []
    for d in sorted(p for p in BUGS.iterdir() if (p / "run").is_file()):
        if only and d.name not in only:
            continue
        if d.name in SCRIPT_TWINS:
            out.append((d.name, [str(d / "run")], [str(SCRIPT_TWINS[d.name])], {}))
            continue
        lib, flags = launcher(d / "run")
        if lib is None:
            continue
        script = str(ROOT / "examples" / ".lib" / lib)
        bug = [script, str(d / "model.py"), *flags]
        if d.name in ENV_TWINS:
            out.append((d.name, bug, bug, ENV_TWINS[d.name]))
            continue
        twin = twin_model(d / "model.py")
        if twin is not None:
            out.append((d.name, bug, [script, str(twin), *flags], TWIN_SETTINGS.get(d.name, {})))
    return out


def timed(cmd: list[str], env: dict, out: Path, extra: list[str], timeout: float) -> dict:
    """Run one command with ``--json``; its verdict, the inference's seconds, the process's CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    try:
        p = subprocess.run([*cmd, "--json", str(out), *extra], env={**os.environ, **env}, capture_output=True,
                           text=True, timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        rc = None
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    got = {"rc": rc, "wall": time.monotonic() - t0, "cpu": cpu, "verdict": "timeout" if rc is None else "?",
           "infer": None}
    if rc is not None and out.is_file():
        d = json.loads(out.read_text())
        got["verdict"], got["infer"] = d["verdict"], d["timings"].get("infer")
    elif rc is not None:
        got["verdict"] = f"exit {rc}: " + (p.stderr.strip().splitlines() or ["?"])[-1][:80]
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--check", default="off", help="the verify --check mode for both runs (default off: the "
                    "engine's own time)")
    ap.add_argument("--timeout", type=float, default=900.0)
    a = ap.parse_args()
    extra = ["-q", "--check", a.check]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, bug, twin, env in pairs(a.only):
            b = timed(bug, {}, Path(tmp) / f"{name}-bug.json", extra, a.timeout)
            t = timed(twin, env, Path(tmp) / f"{name}-twin.json", extra, a.timeout)
            ratio = (b["infer"] / t["infer"]) if b["infer"] and t["infer"] else None
            rows.append((name, b, t, ratio))
            print(f"{name:30} bug {b['verdict']:16} {b['infer'] or 0:8.2f} s   twin {t['verdict']:16} "
                  f"{t['infer'] or 0:8.2f} s   ratio {ratio if ratio is None else round(ratio, 2)}", flush=True)
    ratios = [r for *_, r in rows if r is not None]
    cut = [n for n, b, _, _ in rows if b["verdict"] == "timeout"]
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"pairs: {len(rows)}; bug runs cut at {a.timeout:.0f} s: {len(cut)} {cut if cut else ''}")
    if ratios:
        worst = max(rows, key=lambda r: r[3] or 0)
        print(f"bug / twin inference time: largest {max(ratios):.2f} ({worst[0]}), median "
              f"{statistics.median(ratios):.2f}")
    print(f"CPU: {cpu.ru_utime + cpu.ru_stime:.1f} s (children)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
