"""The equivalence corpus: equivalent rewrites and bug mutants of the shipped PyTorch examples, verified.

    python3 bench/mutants.py [--examples mlp-tp,gpt-tp] [--kinds commute,drop-collective] [--ids FILE] [--limit N]
                             [--workers 2] [--results FILE] [--fresh] [--list]
                             [--held-out with|without|only]

The mutants and their ground truth are defined in ``tests/mutants.py`` (an eager float64 run of the
specification and of every rank decides whether a mutant changes the numbers). Each mutant runs in one of
``--workers`` worker processes (``RLIMIT_AS`` 5 GiB each; a worker silent for ``--hang`` seconds is killed and
replaced). Results are appended to ``--results`` as they arrive, and a later run with the same file skips the
mutants it holds (``--fresh`` starts over), so a run can be interrupted and resumed, or widened with other
``--kinds`` / ``--examples``.

Prints a table per kind and per example, the false alarms and the mutants not killed, then: the false-alarm
rate (equivalent rewrites that do not verify / equivalent rewrites), the kill rate (number-changing mutants
graphguard does not certify / number-changing mutants), the unsound count (number-changing mutants that verify:
must be 0) and the wall and CPU time -- of the own kinds; and as its last lines the same three figures of the
*held-out* family (``tests/mutants.py``'s ``HELD_OUT`` kinds, issue 41: rewrites written before the fixes and
never tuned against), whose tables print apart. ``--held-out without`` / ``only`` leaves the family out / runs it
alone.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import mutants as corpus  # noqa: E402


class Worker:
    def __init__(self, workdir: Path):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   PYTHONWARNINGS="ignore")
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "mutants.py"), "worker", str(workdir)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, bufsize=1, env=env)
        self.current, self.since, self.count = None, 0.0, 0

    def send(self, mid: str) -> None:
        self.current, self.since = mid, time.monotonic()
        self.count += 1
        self.proc.stdin.write(mid + "\n")
        self.proc.stdin.flush()

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        else:
            self.proc.stdin.close()
        self.proc.wait()


def run(ids: list[str], results: Path, workers: int, hang: float, per_worker: int) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="gg-mutants-"))
    todo = collections.deque(ids)
    sel = selectors.DefaultSelector()
    pool: list[Worker] = []
    n_done = 0

    def start():
        w = Worker(workdir)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        pool.append(w)
        return w

    def feed(w):
        if todo and w.count < per_worker:
            w.send(todo.popleft())
        else:
            sel.unregister(w.proc.stdout)
            pool.remove(w)
            w.stop()
            if todo:
                feed(start())

    def record(res):
        nonlocal n_done
        n_done += 1
        with results.open("a") as f:
            f.write(json.dumps(res) + "\n")
        verdict = res.get("verdict") or res.get("status")
        print(f"[{n_done}/{len(ids)}] {res['id']}: {verdict}"
              f"{' (changes the numbers)' if res.get('changed') else ''} {res.get('cpu', '')}", flush=True)

    for _ in range(min(workers, len(todo))):
        feed(start())
    while pool:
        for key, _ in sel.select(timeout=5.0):
            w = key.data
            line = w.proc.stdout.readline()
            if not line:  # died
                sel.unregister(w.proc.stdout)
                pool.remove(w)
                w.stop(kill=True)
                record({"id": w.current, "status": "error", "why": f"worker died (exit {w.proc.returncode})"})
                if todo:
                    feed(start())
                continue
            record(json.loads(line))
            feed(w)
        for w in list(pool):
            if w.current and time.monotonic() - w.since > hang:
                sel.unregister(w.proc.stdout)
                pool.remove(w)
                w.stop(kill=True)
                record({"id": w.current, "status": "error", "why": f"hung (no result in {hang:.0f} s)"})
                if todo:
                    feed(start())


def load(results: Path) -> dict[str, dict]:
    out = {}
    if results.exists():
        for line in results.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out[r["id"]] = r
    return out


def pct(a: int, b: int) -> str:
    return f"{a}/{b} = {100.0 * a / b:.1f} %" if b else f"{a}/0"


class Tally:
    """The counts of one part of the corpus (the own kinds, or the held-out family)."""

    def __init__(self):
        self.rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.by_ex: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.false_alarms, self.survivors, self.unsound, self.gen_errors, self.errors = [], [], [], [], []
        self.eq_total = self.eq_bad = self.bug_total = self.bug_killed = 0
        self.first_of: dict[tuple, str] = {}  # (example, hash) -> first mutant id: later duplicates are not counted

    def add(self, m, r) -> None:
        row = self.rows[m.kind]
        row["mutants"] += 1
        if r is None:
            row["not run"] += 1
            return
        st = r.get("status")
        if st in ("unchanged", "invalid", "error"):
            row[st] += 1
            if st == "error":
                self.errors.append(r)
            return
        key = (m.example, r.get("hash"))
        if m.kind != "shard-swap" and self.first_of.setdefault(key, m.id) != m.id:
            row["duplicate"] += 1
            return
        verified = r.get("verdict") == "refines"
        by_ex = self.by_ex[m.example]
        row["counted"] += 1
        row["changed"] += bool(r["changed"])
        row["verified"] += verified
        by_ex["counted"] += 1
        if r["changed"] and verified:
            self.unsound.append(r)
        if m.equivalent and r["changed"]:
            self.gen_errors.append(r)
        elif m.equivalent:
            self.eq_total += 1
            by_ex["rewrites"] += 1
            if not verified:
                self.eq_bad += 1
                row["false alarm"] += 1
                by_ex["false alarms"] += 1
                self.false_alarms.append(r)
        elif r["changed"]:
            self.bug_total += 1
            by_ex["bugs"] += 1
            if not verified:
                self.bug_killed += 1
                by_ex["killed"] += 1
                row["killed"] += 1
            else:
                self.survivors.append(r)
        else:
            row["same numbers"] += 1
            by_ex["bug mutants, same numbers"] += 1

    def tables(self, equivalent: list[str], bugs: list[str], prefix: str = "") -> None:
        cols = ["mutants", "unchanged", "invalid", "duplicate", "error", "counted", "changed", "verified",
                "false alarm", "killed", "same numbers"]
        w = max([20] + [len(k) + 2 for k in equivalent + bugs if k in self.rows])
        for title, kinds in ((f"{prefix}equivalent rewrites", equivalent), (f"{prefix}bug mutants", bugs)):
            print(f"\n{title}")
            print(f"{'kind':{w}}" + "".join(f"{c:>13}" for c in cols))
            for k in kinds:
                if k in self.rows:
                    print(f"{k:{w}}" + "".join(f"{self.rows[k][c]:13d}" for c in cols))
        print(f"\n{prefix + 'example':16}{'counted':>9}{'rewrites':>10}{'false alarms':>14}{'bugs':>7}{'killed':>8}"
              f"{'bug mutants, same numbers':>27}")
        for e, c in sorted(self.by_ex.items()):
            print(f"{e:16}{c['counted']:9d}{c['rewrites']:10d}{c['false alarms']:14d}{c['bugs']:7d}{c['killed']:8d}"
                  f"{c['bug mutants, same numbers']:27d}")

    def lists(self, prefix: str = "") -> None:
        for title, items in (("false alarms", self.false_alarms),
                             ("bug mutants not killed (verified although they change the numbers: UNSOUND)",
                              self.survivors),
                             ("generator errors (an equivalent rewrite changed the numbers)", self.gen_errors),
                             ("errors", self.errors)):
            if items:
                print(f"\n{prefix}{title}:")
                for r in items:
                    print(f"  {r['id']}: {r.get('what', '')[:110]}\n      {r.get('verdict', '')} "
                          f"{(r.get('detail') or r.get('why') or '')}"[:300])


def report(ms: list, res: dict[str, dict], wall: float, cpu: float, workers: int) -> None:
    """The own kinds' tables and figures, then the held-out family's (issue 41: written before the fixes and
    never tuned against; its figures are the last lines). Duplicates are counted within each part."""
    own, held = Tally(), Tally()
    for m in ms:
        (held if m.kind in corpus.HELD_OUT else own).add(m, res.get(m.id))
    own.tables(corpus.EQUIVALENT, corpus.BUGS)
    own.lists()
    has_held = any(m.kind in corpus.HELD_OUT for m in ms)
    if has_held:
        print("\n-- held-out family (issue 41) --")
        held.tables(corpus.HELD_OUT_EQUIVALENT, corpus.HELD_OUT_BUGS, "held-out ")
        held.lists("held-out ")
    ran = [res[m.id] for m in ms if res.get(m.id, {}).get("cpu") is not None]
    print(f"\nmutants run: {len(ran)} of {len(ms)}; mutant CPU {sum(r['cpu'] for r in ran):.0f} s")
    print(f"false-alarm rate: {pct(own.eq_bad, own.eq_total)} (equivalent rewrites that graphguard does not verify)")
    print(f"kill rate: {pct(own.bug_killed, own.bug_total)} (number-changing mutants graphguard does not certify)")
    print(f"unsound: {len(own.unsound)} (number-changing mutants that verify); wall {wall:.0f} s, "
          f"CPU {cpu:.0f} s with {workers} workers")
    if has_held:
        print(f"held-out false-alarm rate: {pct(held.eq_bad, held.eq_total)} (held-out equivalent rewrites that "
              f"graphguard does not verify)")
        print(f"held-out kill rate: {pct(held.bug_killed, held.bug_total)} (held-out number-changing mutants "
              f"graphguard does not certify)")
        print(f"held-out unsound: {len(held.unsound)} (held-out number-changing mutants that verify); "
              f"held-out generator errors: {len(held.gen_errors)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", default="", help="comma-separated: " + ",".join(corpus.EXAMPLES))
    ap.add_argument("--kinds", default="", help="comma-separated: " + ",".join(corpus.KINDS))
    ap.add_argument("--ids", default="", help="only these mutant ids: comma-separated, or @FILE (one per line)")
    ap.add_argument("--limit", type=int, default=0, help="run at most this many mutants (in corpus order)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--results", default=str(Path(tempfile.gettempdir()) / "graphguard-mutants.jsonl"))
    ap.add_argument("--fresh", action="store_true", help="discard the results file first")
    ap.add_argument("--hang", type=float, default=600.0, help="seconds without a result before a worker is killed")
    ap.add_argument("--per-worker", type=int, default=80, help="mutants a worker runs before it is replaced")
    ap.add_argument("--list", action="store_true", help="print the mutant ids and exit")
    ap.add_argument("--held-out", choices=("with", "without", "only"), default="with",
                    help="the held-out family of kinds (issue 41): run it too (default), leave it out, or run it only")
    a = ap.parse_args()
    split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    for name, known in ((split(a.examples), corpus.EXAMPLES), (split(a.kinds), corpus.KINDS)):
        bad = [x for x in name if x not in known]
        if bad:
            ap.error(f"unknown: {', '.join(bad)}")
    ms = corpus.mutants(split(a.examples) or None, split(a.kinds) or None)
    if a.held_out != "with":
        ms = [m for m in ms if (m.kind in corpus.HELD_OUT) == (a.held_out == "only")]
    if a.ids:
        ids = Path(a.ids[1:]).read_text().split() if a.ids.startswith("@") else split(a.ids)
        bad = sorted(set(ids) - {m.id for m in ms})
        if bad:
            ap.error(f"no such mutant (or not in --examples / --kinds): {', '.join(bad[:5])}")
        ms = [m for m in ms if m.id in set(ids)]
    if a.limit:
        ms = ms[: a.limit]
    if a.list:
        for m in ms:
            print(m.id)
        return 0
    results = Path(a.results)
    if a.fresh and results.exists():
        results.unlink()
    have = load(results)
    todo = [m.id for m in ms if m.id not in have]
    nh = sum(m.kind in corpus.HELD_OUT for m in ms)
    print(f"{len(ms)} mutants ({sum(m.equivalent for m in ms)} equivalent rewrites, "
          f"{sum(not m.equivalent for m in ms)} bug mutants; {nh} of them held-out); {len(todo)} to run; "
          f"results in {results}", flush=True)
    t0 = time.monotonic()
    if todo:
        run(todo, results, a.workers, a.hang, a.per_worker)
    wall = time.monotonic() - t0
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    report(ms, load(results), wall, ch.ru_utime + ch.ru_stime, a.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
