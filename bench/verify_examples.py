#!/usr/bin/env python3
"""Benchmark (run by hand): verification time of the shipped examples and of paper-fig1 at degrees 2/4/8.

    python bench/verify_examples.py [--repeat 5]

Prints, per case: verdict, G_s/G_d op counts, median and min wall time of graphguard.verify (in process,
plugins loaded once), and time per G_d node.
"""
import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "paper-fig1"))

import graphguard  # noqa: E402
from graphguard.plugins import load_plugins  # noqa: E402
from make import build  # noqa: E402


def cases(tmp: Path):
    for d in sorted(ROOT.glob("examples/*/run")) + sorted(ROOT.glob("examples/bugs/*/run")):
        d = d.parent
        if (d / "spec.gg.json").is_file():  # model-file examples: bench/verify_models.py
            yield f"examples/{d.relative_to(ROOT / 'examples')}", d
    for world in (2, 4, 8):
        for variant in ("ok", "symbolic", "missing-reduction"):
            out = tmp / f"{variant}-{world}"
            out.mkdir()
            spec, impl, rel = build(world, variant)
            (out / "spec.gg.json").write_text(json.dumps(spec))
            (out / "impl.gg.json").write_text(json.dumps(impl))
            (out / "relation.yaml").write_text(rel)
            yield f"paper-fig1 {variant} degree {world}", out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    t0 = time.perf_counter()
    pl = load_plugins()
    print(f"plugins loaded in {time.perf_counter() - t0:.2f} s; "
          f"{len({r.lemma.key for r in pl.lemmas})} lemmas ({len(pl.lemmas)} rules)")
    print(f"{'case':44} {'verdict':16} {'G_s':>4} {'G_d':>4} {'median s':>9} {'min s':>8} {'ms/G_d node':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, d in cases(Path(tmp)):
            times = []
            for _ in range(a.repeat):
                t = time.perf_counter()
                r = graphguard.verify(d / "spec.gg.json", d / "impl.gg.json", d / "relation.yaml", plugins=pl)
                times.append(time.perf_counter() - t)
            med = statistics.median(times)
            n_d = r.timings["n_impl_ops"]
            print(f"{name:44} {r.verdict:16} {r.timings['n_spec_ops']:>4} {n_d:>4} {med:>9.3f} {min(times):>8.3f} "
                  f"{1000 * med / max(n_d, 1):>11.2f}")


if __name__ == "__main__":
    main()
