#!/usr/bin/env python3
"""Write the paper's running example (Figures 1-2) for any world size, in its variants.

G_s:  C = matmul(A, B);  F = C - E
G_d:  A sharded on dim 1, B on dim 0; C@r = matmul(A@r, B@r) (partial products);
      D@r = reduce_scatter(C@0..C@W-1, dim 0); E sharded on dim 0; F@r = D@r - E@r.
Variants: ``ok``; ``missing-reduction`` (each rank slices its own partial product instead of the
reduce-scatter: same shapes, wrong values); ``wrong-offset`` (all-reduce, then every rank slices the
first chunk); ``symbolic`` (M and K are symbols).
"""
import argparse
import json
from pathlib import Path

from graphguard.ir.builder import GraphBuilder


def build(world: int, variant: str, m: int = 8, k: int = 8, n: int = 4):
    sym = variant == "symbolic"
    M, K = ("M", "K") if sym else (m, k)
    mc = f"M/{world}" if sym else m // world
    kc = f"K/{world}" if sym else k // world

    s = GraphBuilder("paper-fig1-spec")
    s.input("A", [M, K]); s.input("B", [K, n]); s.input("E", [M, n])
    s.op("core.matmul", ["A", "B"], "C", loc="model.py:3", name="matmul")
    s.op("core.sub", ["C", "E"], "F", loc="model.py:4", name="sub")
    s.output("F")

    d = GraphBuilder("paper-fig1-impl", world_size=world)
    for r in range(world):
        d.input(f"A@{r}", [M, kc]); d.input(f"B@{r}", [kc, n]); d.input(f"E@{r}", [mc, n])
    for r in range(world):
        d.op("core.matmul", [f"A@{r}", f"B@{r}"], f"C@{r}", loc="model_tp.py:7", name=f"matmul@{r}")
    group = list(range(world))
    if variant in ("ok", "symbolic"):
        d.op("core.reduce_scatter", [f"C@{r}" for r in group], [f"D@{r}" for r in group], loc="model_tp.py:8",
             name="reduce_scatter", op="sum", dim=0, group=group)
    elif variant == "missing-reduction":
        for r in group:
            d.op("core.slice", [f"C@{r}"], f"D@{r}", loc="model_tp.py:8", name=f"slice@{r}",
                 dim=0, start=r * (m // world), end=(r + 1) * (m // world))
    elif variant == "wrong-offset":
        d.op("core.all_reduce", [f"C@{r}" for r in group], [f"S@{r}" for r in group], name="all_reduce",
             op="sum", group=group)
        for r in group:
            d.op("core.slice", [f"S@{r}"], f"D@{r}", loc="model_tp.py:9", name=f"slice@{r}",
                 dim=0, start=0, end=m // world)
    else:
        raise SystemExit(f"unknown variant {variant}")
    for r in group:
        d.op("core.sub", [f"D@{r}", f"E@{r}"], f"F@{r}", loc="model_tp.py:10", name=f"sub@{r}")
    d.output(*[f"F@{r}" for r in group])

    shards = lambda t: ", ".join(f"{t}@{r}" for r in group)
    rel = ["inputs:", f"  A: concat({shards('A')}, dim=1)", f"  B: concat({shards('B')}, dim=0)",
           f"  E: concat({shards('E')}, dim=0)"]
    if sym:
        rel += ["symbols:", f"  M: {{min: {world}, multiple_of: {world}}}",
                f"  K: {{min: {world}, multiple_of: {world}}}"]
    return s.to_dict(), d.to_dict(), "\n".join(rel) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--variant", default="ok", choices=["ok", "missing-reduction", "wrong-offset", "symbolic"])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    spec, impl, rel = build(a.world_size, a.variant)
    (out / "spec.gg.json").write_text(json.dumps(spec, indent=1) + "\n")
    (out / "impl.gg.json").write_text(json.dumps(impl, indent=1) + "\n")
    (out / "relation.yaml").write_text(rel)


if __name__ == "__main__":
    main()
