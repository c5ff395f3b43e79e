"""``graphguard sweep``: verify one model file over a grid of configurations, each a Ray task.

A configuration is a world size, a layer count (the model file reads ``GG_LAYERS``, as the shipped layered
examples do; ``None`` leaves the file's default) and forward or forward+backward. Each is captured by the
frontend's own capture hook in a folder of its own and verified there; configurations are independent, so
they run as Ray tasks -- on this machine by default (``ray.init()`` starts a local cluster, nothing to set
up), on a cluster with ``ray_address``. With one worker everything runs in this process, in order: the
results are the same rows either way (a task is the same function on the same inputs).
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Callable

from .errors import ForwardVerdict, GraphGuardError
from .raysession import ray_session


@dataclass(frozen=True)
class Config:
    world: int
    layers: int | None
    backward: bool

    @property
    def mode(self) -> str:
        return "fwd+bwd" if self.backward else "fwd"


def grid(worlds: list[int], layers: list[int | None], backward: list[bool]) -> list[Config]:
    return [Config(w, n, b) for n in layers for w in worlds for b in backward]


def cost(cfg: Config) -> float:
    """A rough relative cost, to start the long configurations first: G_d grows with ranks and layers, and a
    backward triples a program."""
    return cfg.world * (cfg.layers or 1) * (3 if cfg.backward else 1)


def run_config(model: str, frontend: str, cfg: Config, disabled: tuple[str, ...] = ()) -> dict:
    """Capture and verify one configuration; a row of the sweep's table (every field plain data)."""
    from .api import verify
    from .plugins import load_plugins
    row = dict(asdict(cfg), mode=cfg.mode, verdict="error", n_spec=0, n_impl=0, capture_s=0.0, verify_s=0.0,
               cpu_s=0.0, op=None, loc=None, reason="", r_o=[], reused=0)
    old = os.environ.get("GG_LAYERS")
    c0 = time.process_time()
    try:
        if cfg.layers is not None:
            os.environ["GG_LAYERS"] = str(cfg.layers)
        pl = load_plugins(frozenset(disabled))
        fe = pl.frontend(frontend)
        if fe.capture is None:
            raise GraphGuardError(f"frontend '{frontend}' cannot capture programs")
        with tempfile.TemporaryDirectory(prefix="graphguard-sweep-") as tmp:
            t = time.perf_counter()
            files = fe.capture(model, tmp, cfg.world, cfg.backward, plugins=pl)
            row["capture_s"] = round(time.perf_counter() - t, 2)
            impl = str(files["impl"]).split(" ")  # (the onnx hook names one file per rank)
            t = time.perf_counter()
            r = verify(str(files["spec"]), impl, str(files["relation"]),
                       frontend="ir" if frontend == "fx" else frontend, world_size=cfg.world, plugins=pl)
            row["verify_s"] = round(time.perf_counter() - t, 2)
        row.update(verdict=r.verdict, n_spec=r.timings["n_spec_ops"], n_impl=r.timings["n_impl_ops"],
                   r_o=r.r_o_lines(), reused=r.stats.get("reused_results", 0))
        if r.failure is not None:
            row.update(op=r.failure.op, loc=r.failure.loc, reason=r.failure.reason)
    except ForwardVerdict as e:  # a backward whose forward does not refine: the forward's verdict and operator
        f = e.result.failure
        row.update(verdict=e.result.verdict, reason=str(e), **({"op": f.op, "loc": f.loc} if f else {}))
    except GraphGuardError as e:
        row["reason"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    finally:
        if old is None:
            os.environ.pop("GG_LAYERS", None)
        else:
            os.environ["GG_LAYERS"] = old
        row["cpu_s"] = round(time.process_time() - c0, 2)
    return row


def sweep(model: str, configs: list[Config], frontend: str = "fx", workers: int = 2,
          ray_address: str | None = None, disabled: tuple[str, ...] = (),
          on_row: Callable[[dict], None] | None = None) -> list[dict]:
    """Rows in the order of ``configs``; ``on_row`` is called as each arrives (in completion order)."""
    model = os.path.abspath(model)
    if workers <= 1 and ray_address is None:
        rows = []
        for cfg in configs:
            rows.append(run_config(model, frontend, cfg, disabled))
            if on_row:
                on_row(rows[-1])
        return rows
    missing = GraphGuardError("graphguard sweep runs configurations in parallel on Ray, which is not installed: "
                              "pip install 'graphguard[ray]' (or run them one by one with --workers 1)")
    with ray_session(workers, ray_address, missing) as ray:
        task = ray.remote(num_cpus=1, max_retries=0)(run_config)
        # the costliest first (ranks x layers, backward ~3x): the last task to start is a short one
        order = sorted(range(len(configs)), key=lambda i: -cost(configs[i]))
        pending = {task.remote(model, frontend, configs[i], tuple(disabled)): i for i in order}
        rows: list[dict | None] = [None] * len(configs)
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                i = pending.pop(ref)
                rows[i] = ray.get(ref)
                if on_row:
                    on_row(rows[i])
        return rows  # type: ignore[return-value]


def table(rows: list[dict]) -> list[str]:
    out = [f"{'world':>5} {'layers':>6} {'mode':8} {'verdict':16} {'G_s':>6} {'G_d':>7} {'capture s':>9} "
           f"{'verify s':>8} {'cpu s':>7}  where"]
    for r in rows:
        where = "" if r["verdict"] == "refines" else (f"{r['op']} at {r['loc']}" if r["op"] else r["reason"])
        out.append(f"{r['world']:>5} {r['layers'] if r['layers'] is not None else '-':>6} {r['mode']:8} "
                   f"{r['verdict']:16} {r['n_spec']:>6} {r['n_impl']:>7} {r['capture_s']:>9.1f} "
                   f"{r['verify_s']:>8.1f} {r['cpu_s']:>7.1f}  {where}")
    return out
