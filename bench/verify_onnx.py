#!/usr/bin/env python3
"""Benchmark (run by hand): the ONNX examples exported with torch.onnx.export and verified, per degree.

    python bench/verify_onnx.py [--examples onnx-mlp-tp,onnx-block-tp,bugs/onnx-mlp-missing-allreduce]
                                [--degrees 2,4] [--opsets 20,17] [--repeat 3]

For each case: G_s/G_d op counts, export time (spec and every rank), median verification time (reading the
.onnx files included), its CPU time and milliseconds per G_d node.
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", default="onnx-mlp-tp,onnx-block-tp,bugs/onnx-mlp-missing-allreduce")
    ap.add_argument("--degrees", default="2,4")
    ap.add_argument("--opsets", default="20,17")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import graphguard
    from graphguard.frontends.onnx.capture import capture_model_file
    from graphguard.plugins import load_plugins
    pl = load_plugins()
    print(f"{'example':34} {'deg':>3} {'opset':>5} {'verdict':16} {'G_s':>5} {'G_d':>5} {'export s':>8} "
          f"{'verify s':>9} {'cpu s':>7} {'ms/G_d node':>11}", flush=True)
    for ex in a.examples.split(","):
        for deg in [int(x) for x in a.degrees.split(",")]:
            for opset in [int(x) for x in a.opsets.split(",")]:
                with tempfile.TemporaryDirectory() as tmp:
                    t = time.perf_counter()
                    f = capture_model_file(ROOT / "examples" / ex / "model.py", tmp, deg, opset=opset)
                    export = time.perf_counter() - t
                    walls, cpus = [], []
                    for _ in range(a.repeat):
                        t, c = time.perf_counter(), time.process_time()
                        r = graphguard.verify(str(f["spec"]), f["impl"].split(), str(f["relation"]),
                                              frontend="onnx", plugins=pl)
                        walls.append(time.perf_counter() - t)
                        cpus.append(time.process_time() - c)
                    n_s, n_d = r.timings.get("n_spec_ops", 0), r.timings.get("n_impl_ops", 0)
                    wall = statistics.median(walls)
                    print(f"{ex:34} {deg:>3} {opset:>5} {r.verdict:16} {n_s:>5} {n_d:>5} {export:>8.1f} "
                          f"{wall:>9.3f} {statistics.median(cpus):>7.3f} {1000 * wall / max(n_d, 1):>11.2f}",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
