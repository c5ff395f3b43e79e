"""Run the bad-input corpus (``tests/bad_input_corpus.py``) and print its size, outcome and timings.

    python3 bench/bad_input_corpus.py [--workers N] [--kind KIND ...] [--show-failures]

Prints the number of cases per kind, how many are not as expected (exit 2, one line naming the file, no
traceback, within the time limit), the wall and CPU time of the whole run and of the slowest cases, and the
largest worker RSS.
"""
from __future__ import annotations

import argparse
import collections
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import bad_input_corpus as corpus  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kind", action="append", default=[])
    ap.add_argument("--name", action="append", default=[], help="Only cases whose name starts with this.")
    ap.add_argument("--show-failures", action="store_true")
    a = ap.parse_args()
    names = [n for n, c in corpus.CASES.items() if (not a.kind or c.kind in a.kind)
             and (not a.name or n.startswith(tuple(a.name)))]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        results = corpus.run_corpus(names, Path(d), workers=a.workers)
    wall = time.monotonic() - t0
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_kind: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    failures = []
    for n in names:
        c, r = corpus.CASES[n], results[n]
        bad = corpus.problems(c, r)
        by_kind[c.kind][0] += 1
        if bad:
            by_kind[c.kind][1] += 1
            failures.append((c, r, bad))
    print(f"{'kind':28} {'cases':>6} {'failed':>7}")
    for k, (total, bad) in sorted(by_kind.items()):
        print(f"{k:28} {total:6d} {bad:7d}")
    print(f"{'total':28} {len(names):6d} {len(failures):7d}")
    verdicts = collections.Counter(results[n]["rc"] for n in names if corpus.CASES[n].expect == "any")
    if verdicts:
        print("exit codes of the cases that may also give a verdict: " +
              ", ".join(f"{k}: {v}" for k, v in sorted(verdicts.items(), key=str)))
    case_cpu = sum(r["cpu"] or 0 for r in results.values())
    print(f"wall {wall:.1f} s with {a.workers} workers; CPU {children.ru_utime + children.ru_stime:.1f} s "
          f"(cases {case_cpu:.1f} s, the rest worker start-up and building the inputs)")
    print(f"largest worker RSS {max((r.get('maxrss_mb') or 0) for r in results.values())} MB "
          f"(RLIMIT_AS {corpus.MEMORY_LIMIT >> 20} MB)")
    slow = sorted(results.values(), key=lambda r: -(r["cpu"] or 0))[:8]
    print("most CPU: " + ", ".join(f"{r['name']} {r['cpu']} s" for r in slow))
    if a.show_failures:
        for c, r, bad in failures:
            print(f"\n=== {'; '.join(bad)}\n{corpus.describe(c, r)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
