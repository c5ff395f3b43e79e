#!/usr/bin/env python3
"""Benchmark (run by hand): a sweep of configurations serially (one process, one after another) and on Ray
(local workers), the same rows both ways; prints both tables' times, what Ray's own start and stop cost on
this machine (an empty local session), and, as its last line, ``ray / serial wall time: X`` (the whole-model
issue's target: X <= 0.6 for 8 configurations on 2 workers).

    python3 bench/sweep.py                                  # llama-tp: world 4,8 x layers 1,2 x fwd, fwd+bwd
    python3 bench/sweep.py --worlds 2,4                     # the smaller grid (about 56 s serially)
    python3 bench/sweep.py --model gpt-tp --worlds 2,4,8 --layers 1 --workers 2

Ray's share that does not shrink with more workers: ``ray.init`` of a local cluster (2-3 s here), each
worker's cold start (a fresh process importing torch and graphguard and compiling the rules, ~4 s, paid by
both workers at once) and ``ray.shutdown`` (1.3 s: it waits for its daemons to exit). About 8 s in all, so
the ratio approaches 0.5 only when the configurations' own work dominates: the default grid (TP 4 and 8,
~136 s serially) measured 0.56 and 0.58; the smaller grid (TP 2 and 4, ~56 s) 0.60-0.63.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-tp")
    ap.add_argument("--worlds", default="4,8")
    ap.add_argument("--layers", default="1,2")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    from graphguard.sweep import grid, sweep, table
    cfgs = grid([int(x) for x in a.worlds.split(",")], [int(x) for x in a.layers.split(",")], [False, True])
    model = str(ROOT / "examples" / a.model / "model.py")
    print(f"{len(cfgs)} configurations of {a.model}; {os.cpu_count()} cores", flush=True)
    keys = ("world", "layers", "mode", "verdict", "n_spec", "n_impl", "r_o", "op", "loc")
    runs = {}
    for name, workers in (("serial", 1), ("ray", a.workers)):
        t, c = time.perf_counter(), time.process_time()
        ch = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = sweep(model, cfgs, workers=workers)
        wall = time.perf_counter() - t
        ch2 = resource.getrusage(resource.RUSAGE_CHILDREN)
        tasks_cpu = sum(r["cpu_s"] for r in rows)
        print(f"\n{name} ({workers} worker{'s' if workers > 1 else ''}): {wall:.1f} s wall, this process "
              f"{time.process_time() - c:.1f} s CPU, tasks {tasks_cpu:.1f} s CPU (children reaped: "
              f"{ch2.ru_utime + ch2.ru_stime - ch.ru_utime - ch.ru_stime:.1f} s)")
        for line in table(rows):
            print(line)
        runs[name] = (wall, [{k: r[k] for k in keys} for r in rows])
    import ray  # Ray's own fixed cost: a local session that runs nothing
    t = time.perf_counter()
    ray.init(num_cpus=a.workers, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             configure_logging=False)
    t_init = time.perf_counter() - t
    ray.shutdown()
    print(f"\nRay alone (an empty local session): ray.init {t_init:.1f} s, ray.shutdown "
          f"{time.perf_counter() - t - t_init:.1f} s")
    same = runs["ray"][1] == runs["serial"][1]
    print(f"\nrows identical: {same}")
    print(f"ray / serial wall time: {runs['ray'][0] / runs['serial'][0]:.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
