#!/usr/bin/env python3
"""Benchmark (run by hand): JAX examples captured as HLO and verified, per degree, forward and forward+backward.

    python bench/verify_hlo.py [--examples jax-mlp-gspmd,jax-mlp-shardmap,jax-block-gspmd,jax-block-shardmap,cross-fx-hlo-llama,neuronx-llama-tp]
                               [--degrees 2,4,8] [--passes fwd,fwd+bwd] [--repeat 1]

The MLP and the transformer block exist in both styles: partitioned by GSPMD from the input shardings
(jax-mlp-gspmd, jax-block-gspmd) and written with shard_map (jax-mlp-shardmap, jax-block-shardmap);
neuronx-llama-tp's shipped HLO files are verified as they are (TP=2, forward).
For each case: G_s/G_d op counts, capture time (lowering, XLA's SPMD partitioner, relation), median verification
time (loading the HLO included) and milliseconds per G_d node. Targets from issue 4 (this 2-core machine): a
Llama layer at degree 2 <= 2 s, degree 8 <= 10 s (cross-fx-hlo-llama: a PyTorch Llama layer against its JAX
tensor-parallel version; forward only).
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
    ap.add_argument("--examples", default="jax-mlp-gspmd,jax-mlp-shardmap,jax-block-gspmd,jax-block-shardmap,"
                                           "cross-fx-hlo-llama,neuronx-llama-tp")
    ap.add_argument("--degrees", default="2,4,8")
    ap.add_argument("--passes", default="fwd,fwd+bwd")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    import graphguard.jax  # noqa: F401  (8 host devices, before jax starts)

    import graphguard
    from graphguard.frontends.hlo.jax_capture import capture_model_file
    from graphguard.plugins import load_plugins
    pl = load_plugins()
    print(f"{'example':20} {'deg':>3} {'pass':8} {'verdict':16} {'G_s':>5} {'G_d':>5} {'capture s':>9} "
          f"{'verify s':>9} {'cpu s':>7} {'ms/G_d node':>11}", flush=True)
    for ex in a.examples.split(","):
        for deg in [int(x) for x in a.degrees.split(",")]:
            for p in a.passes.split(","):
                backward = p == "fwd+bwd"
                cross = (ROOT / "examples" / ex / "capture.py").is_file()  # a PyTorch spec, a JAX impl
                shipped = (ROOT / "examples" / ex / "impl.hlo.pb").is_file()  # HLO files as NeuronX writes them
                if (cross or shipped) and backward or shipped and deg != 2:
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    t = time.perf_counter()
                    if cross:
                        f = _cross(ex)(deg, tmp)
                    elif shipped:
                        d = ROOT / "examples" / ex
                        f = {"spec": d / "spec.hlo", "impl": d / "impl.hlo.pb", "relation": d / "relation.yaml"}
                    else:
                        f = capture_model_file(ROOT / "examples" / ex / "model.py", tmp, deg, backward, plugins=pl)
                    cap = time.perf_counter() - t
                    fe = {"spec_frontend": "ir", "impl_frontend": "hlo"} if cross else {"frontend": "hlo"}
                    if shipped:
                        fe["world_size"] = deg
                    times, cpu = [], []
                    for _ in range(a.repeat):
                        t, c = time.perf_counter(), time.process_time()
                        r = graphguard.verify(str(f["spec"]), str(f["impl"]), str(f["relation"]), plugins=pl, **fe)
                        times.append(time.perf_counter() - t)
                        cpu.append(time.process_time() - c)
                med = statistics.median(times)
                n_d = r.timings["n_impl_ops"]
                print(f"{ex:20} {deg:>3} {p:8} {r.verdict:16} {r.timings['n_spec_ops']:>5} {n_d:>5} {cap:>9.2f} "
                      f"{med:>9.2f} {statistics.median(cpu):>7.2f} {1000 * med / n_d:>11.2f}", flush=True)


def _cross(ex: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"bench_{ex.replace('-', '_')}", ROOT / "examples" / ex / "capture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.capture


if __name__ == "__main__":
    sys.exit(main())
