#!/usr/bin/env python3
"""Benchmark (run by hand): capture + verification of the PyTorch workloads per degree and layer count.

    python bench/verify_models.py [--models gpt-tp,llama-tp,moe-ep] [--degrees 2,4,8] [--layers 1,2] [--repeat 3]
    MOE_DISPATCH=sparse MOE_PARALLEL=ag python bench/verify_models.py --models moe-ep --layers 1   # (examples' switches)

For each case: G_s/G_d op counts, capture time, median verification time (forward, then forward+backward)
(wall and CPU: the CPU time is what a busy machine does not inflate) and milliseconds per G_d node. Targets from the issue (this 2-core machine): one GPT block at degree 2
forward <= 2 s, forward+backward <= 5 s, degree 8 <= 10 s.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERED = {"gpt-tp", "gpt-tp-vocab", "llama-tp"}  # examples whose depth GG_LAYERS sets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mlp-tp,gpt-tp")
    ap.add_argument("--degrees", default="2,4,8")
    ap.add_argument("--layers", default="1,2")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import graphguard
    from graphguard.frontends.fx.model_file import capture_model_file
    from graphguard.plugins import load_plugins
    pl = load_plugins()
    print(f"{'model':14} {'deg':>3} {'lay':>3} {'pass':8} {'verdict':16} {'G_s':>5} {'G_d':>5} {'capture s':>9} "
          f"{'verify s':>9} {'cpu s':>7} {'ms/G_d node':>11}")
    for model in a.models.split(","):
        for layers in [int(x) for x in a.layers.split(",")]:
            if model not in LAYERED and layers > 1:
                continue
            os.environ["GG_LAYERS"] = str(layers)
            for deg in [int(x) for x in a.degrees.split(",")]:
                for backward in (False, True):
                    with tempfile.TemporaryDirectory() as tmp:
                        t = time.perf_counter()
                        f = capture_model_file(ROOT / "examples" / model / "model.py", tmp, deg, backward, plugins=pl)
                        cap = time.perf_counter() - t
                        times, cpu = [], []
                        for _ in range(a.repeat):
                            t, c = time.perf_counter(), time.process_time()
                            r = graphguard.verify(f["spec"], f["impl"], f["relation"], plugins=pl)
                            times.append(time.perf_counter() - t)
                            cpu.append(time.process_time() - c)
                    med = statistics.median(times)
                    n_d = r.timings["n_impl_ops"]
                    print(f"{model:14} {deg:>3} {layers:>3} {'fwd+bwd' if backward else 'fwd':8} {r.verdict:16} "
                          f"{r.timings['n_spec_ops']:>5} {n_d:>5} {cap:>9.2f} {med:>9.2f} {statistics.median(cpu):>7.2f} "
                          f"{1000 * med / n_d:>11.2f}",
                          flush=True)


if __name__ == "__main__":
    sys.exit(main())
