#!/usr/bin/env python3
"""Benchmark (run by hand): HF transformers' whole tensor-parallel-plan zoo, verified model by model.

    python3 bench/hf_zoo.py [--models qwen3,phi3] [--tp 2,4] [--modes fwd,fwd+bwd] [--jobs 1]
                            [--timeout 900] [--mem-gb 6] [--results bench/out/hf_zoo.jsonl] [--fresh | --rerun]
                            [--ray [--ray-address ADDR]] [--experts grouped_mm --dtype bfloat16]
                            [--layers N] [--repeat]

The zoo is every ``transformers.*ForCausalLM`` whose config class carries a ``base_model_tp_plan`` (its
size, the denominator, is printed first). Each model is built from a tiny random config
(``examples/hf-zoo/model.py``: nothing is downloaded; MoE experts ``batched_mm``, or with ``--experts grouped_mm
--dtype bfloat16`` HF's default grouped kernel as it runs compiled, results then in
``bench/out/hf_zoo-grouped_mm-bfloat16.jsonl``), distributed with HF's own plan at every TP degree
asked, captured (forward, or forward + backward) and verified against the unsharded model. Forward alone is
inference, as generation runs it: no parameter requires grad (HF code that is only wrong for training, such
as Llama-4's in-place add to a rowwise output, fails in forward + backward). Each model runs
in its own process (``--jobs`` at once) with an address-space cap (``--mem-gb``) and a time limit; its
verdicts are appended to the results file as they come, so an interrupted run resumes where it stopped
(``--fresh`` starts over, ``--rerun`` runs the selected models again, replacing their verdicts; ``--models`` /
``--tp`` / ``--modes`` select a subset of what is run and shown). ``--ray`` runs the models as Ray tasks
(``--jobs`` local workers, or the nodes of a cluster with ``--ray-address``), each still a capped process.

Verdicts: ``verifies`` (refines, with every expectation the plan states met), ``does-not-refine``,
``inconclusive``, ``capture-error`` (graphguard refused the captured program: the operator or construct is
named), ``cannot-build`` (the model does not build or run from a tiny config, unsharded or under HF's plan:
HF's error is given), ``timeout``, ``out-of-memory`` and ``graphguard-error`` (a bug of graphguard's). The table
(architecture, TP, mode, verdict, operator, wall time) and every failure's reason are printed, then the pass
rates per TP degree and mode as the last lines.

``--layers N`` builds every model with N decoder layers (default 2); ``--repeat`` captures with ``repeat`` naming
the decoder stack (the ``nn.ModuleList`` of ``num_hidden_layers`` layers: layer 0 traced, the others checked
copies of it, graphguard/frontends/fx/repeat.py). Either writes to ``bench/out/hf_zoo-repeat.jsonl`` by default,
each record keyed by its layer count and whether repeat was used, and where a model has both, the table
of capture time with and without repeat and both verdicts is printed and written to ``hf_zoo-repeat.txt``
beside the results.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_FILE = ROOT / "examples" / "hf-zoo" / "model.py"
MODES = ("fwd", "fwd+bwd")
TAG = "@@hf-zoo "


def _zoo():
    import importlib.util
    spec = importlib.util.spec_from_file_location("hf_zoo_model", MODEL_FILE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _op_named(text: str) -> str:
    m = re.search(r"\b((?:aten|prims|_c10d_functional|core|c10d)\.[\w.]+)", text)
    return m.group(1).rstrip(".") if m else "-"


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:400]


def worker(mt: str, tps: list[int], mode: str) -> None:
    """Verify one model at each TP degree, printing one tagged JSON line per degree."""
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    logging.disable(logging.WARNING)
    import graphguard
    import graphguard.torch as ggt
    from graphguard.errors import InputError
    from graphguard.frontends.fx.relations import _forward_only
    from graphguard.plugins import load_plugins
    Z = _zoo()
    layers = int(os.environ.get("GG_HF_LAYERS") or 0)
    if layers:
        Z.TINY["num_hidden_layers"] = layers
    pl = load_plugins()
    bw = mode == "fwd+bwd"
    repeat = _stack_path(Z.spec(mt)) if os.environ.get("GG_HF_REPEAT") else None

    def used(m):  # forward alone is inference (as generation runs): no parameter records autograd history
        return m if bw else m.requires_grad_(False)

    def emit(tp, **rec):
        asked = bool(os.environ.get("GG_HF_REPEAT"))
        extra = dict(layers=layers, repeat=repeat, repeat_asked=asked) if layers or asked else {}
        print(TAG + json.dumps(dict(model=mt, cls=Z.causal_lm_classes()[mt].__name__, tp=tp, mode=mode, **extra,
                                    **rec)), flush=True)

    t0 = time.perf_counter()
    try:
        Z.spec(mt)(*Z.inputs(None, 1, mt))  # does the tiny model run at all (unsharded, eagerly)?
    except Exception as e:
        for tp in tps:
            emit(tp, verdict="cannot-build", op="-", reason=f"unsharded model: {_first_line(e)}", seconds=0.0)
        return
    t1 = time.perf_counter()
    try:
        s = ggt.capture(lambda r: used(Z.spec(mt)), lambda r: Z.inputs(None, 1, mt), backward=bw, plugins=pl,
                        name=f"{mt}-spec", repeat=repeat)
    except InputError as e:
        for tp in tps:
            emit(tp, verdict="capture-error", op=_op_named(str(e)), reason=f"specification: {e}", seconds=0.0)
        return
    t_spec = time.perf_counter() - t0
    spec_capture_s = time.perf_counter() - t1
    for tp in tps:
        t, c = time.perf_counter(), time.process_time()
        rec = {}
        try:
            try:
                d = ggt.capture(lambda r: used(Z.impl(r, tp, mt=mt)), lambda r: Z.inputs(r, tp, mt), world_size=tp,
                                backward=bw, plugins=pl, name=f"{mt}-tp{tp}", repeat=repeat)
                rec["capture_s"] = round(spec_capture_s + time.perf_counter() - t, 2)  # (G_s and G_d)
            except InputError as e:
                msg = str(e)
                # the model's own code failing under HF's plan (a shape error...) vs graphguard refusing a construct
                runs = re.search(r"failed(?: in module '[^']*')?(?: \([^)]*\))?(?: at \S+)?: "
                                 r"(RuntimeError|ValueError|AssertionError|IndexError|TypeError)", msg)
                kind = "cannot-build" if "building the model" in msg or runs else "capture-error"
                if "can't allocate memory" in msg or "Cannot allocate memory" in msg:
                    kind = "out-of-memory"  # the address-space cap, not the model: rerun with a larger --mem-gb
                if kind == "cannot-build":  # HF's own code, run without graphguard: does it fail too?
                    own = eager_failure(Z, mt, tp, bw)
                    msg = (f"HF's own code fails under HF's plan, run eagerly without graphguard ({own}); the "
                           f"capture stops at the same place: {msg}" if own else
                           f"{msg} (run eagerly under HF's plan, without graphguard, every rank runs)")
                raise _Stop(kind, _op_named(msg) if kind == "capture-error" else "-", msg) from None
            user = Z.relation(tp, bw, mt=mt)  # (only the tensors the captured program reads)
            names = {i["name"] for i in s.doc["inputs"]}
            user = dict(user, inputs={k: v for k, v in user["inputs"].items() if k in names})
            try:
                rel = ggt.input_relation(s, d, user, pl, f"<{mt}>")
            except InputError as e:
                if "forward does not refine" not in str(e):
                    raise _Stop("capture-error", "-", str(e)) from None
                # the tangents come from the forward's certificate: report where the forward stops
                fs = ggt.Captured(_forward_only(s.doc), s.relation)
                fd = ggt.Captured(_forward_only(d.doc), d.relation)
                r = graphguard.verify(fs.graph(pl), fd.graph(pl), ggt.input_relation(fs, fd, user, pl), plugins=pl)
                rec = dict(verdict=r.verdict, op=r.failure.op if r.failure else "-",
                           reason=f"(in the forward) {r.failure.reason if r.failure else ''}",
                           loc=r.failure.loc if r.failure else None)
                raise _Stop(None, None, None) from None
            r = graphguard.verify(s.graph(pl), d.graph(pl), rel, plugins=pl)
            rec = dict(rec, verdict="verifies" if r.verdict == "refines" else r.verdict,
                       op=r.failure.op if r.failure else "-", reason=r.failure.reason if r.failure else "",
                       loc=r.failure.loc if r.failure else None,
                       n_spec=r.timings["n_spec_ops"], n_impl=r.timings["n_impl_ops"],
                       verify_s=round(r.timings["total"], 2),
                       check_s=round(r.timings["check"], 3) if "check" in r.timings else None,
                       check_cpu_s=round((r.checked or {}).get("cpu_seconds", 0), 3) if r.checked else None)
        except _Stop as stop:
            if stop.kind is not None:
                rec = dict(verdict=stop.kind, op=stop.op, reason=stop.reason)
        except InputError as e:
            rec = dict(verdict="capture-error", op=_op_named(str(e)), reason=str(e))
        except MemoryError:
            rec = dict(verdict="out-of-memory", op="-", reason="over the address-space cap")
        except Exception as e:  # graphguard's own bug: say so, go on with the next degree
            rec = dict(verdict="graphguard-error", op=_op_named(str(e)), reason=_first_line(e))
        emit(tp, **rec, seconds=round(time.perf_counter() - t + t_spec / len(tps), 1),
             cpu_s=round(time.process_time() - c, 1))


def eager_failure(Z, mt: str, tp: int, backward: bool) -> str | None:
    """HF's error where its own code fails on each rank run eagerly -- no TorchDynamo, no graphguard -- under
    HF's plan on a fake process group of ``tp`` ranks (forward, and backward of the logits' sum); None where
    every rank runs. It tells a failure of HF's code or plan from one of graphguard's capture."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: F401  (registers "fake")
    for rank in range(tp):
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
            dist.init_process_group("fake", rank=rank, world_size=tp, store=FakeStore())
            model = Z.impl(rank, tp, mt=mt)
            if not backward:  # as captured: inference, no parameter requiring grad (grad mode stays on)
                model.requires_grad_(False)
            out = model(*Z.inputs(rank, tp, mt))
            if backward:
                out.float().sum().backward()
        except Exception as e:
            tb = e.__traceback__
            where = ""
            while tb is not None:  # the innermost frame in HF's code
                f = tb.tb_frame.f_code.co_filename
                if "/transformers/" in f:
                    where = f" at {Path(f).name}:{tb.tb_lineno}"
                tb = tb.tb_next
            return f"rank {rank}{where}: {_first_line(e)}"
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    return None


class _Stop(Exception):
    def __init__(self, kind, op, reason):
        super().__init__(reason)
        self.kind, self.op, self.reason = kind, op, reason


def _limit(mem_gb: float):
    def f():
        cap = int(mem_gb * 2 ** 30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    return f


def _stack_path(model) -> str | None:
    """The decoder stack: the first ``nn.ModuleList`` holding ``num_hidden_layers`` layers (None: none)."""
    import torch
    cfg = getattr(getattr(model, "lm", model), "config", None)
    n = getattr(cfg, "num_hidden_layers", None)
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == n:
            return name
    return None


def _key(r: dict) -> tuple:
    """A record's place in the results file: a run with another layer count or with repeat is another run."""
    return (r["model"], r["tp"], r["mode"], r.get("layers") or 0, bool(r.get("repeat") or r.get("repeat_asked")))


def run_one(mt: str, tps: list[int], mode: str, timeout: float, mem_gb: float) -> list[dict]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", mt, "--tp", ",".join(map(str, tps)),
           "--modes", mode]
    t = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=_limit(mem_gb),
                           env=env)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err, rc = "", None
    recs = [json.loads(line[len(TAG):]) for line in out.splitlines() if line.startswith(TAG)]
    done = {r["tp"] for r in recs}
    wall = round(time.perf_counter() - t, 1)
    for tp in tps:
        if tp in done:
            continue
        if rc is None:
            why = dict(verdict="timeout", op="-", reason=f"no verdict within {timeout:.0f} s")
        elif "MemoryError" in err or "std::bad_alloc" in err or rc in (-9, 137):
            why = dict(verdict="out-of-memory", op="-", reason=f"over the {mem_gb} GB address-space cap")
        else:
            last = [x for x in err.strip().splitlines() if x.strip()][-1:] or [f"exit {rc}"]
            why = dict(verdict="graphguard-error", op=_op_named(last[0]), reason=f"worker died: {last[0][:300]}")
        extra = dict(layers=int(os.environ.get("GG_HF_LAYERS") or 0), repeat_asked=bool(os.environ.get("GG_HF_REPEAT")))
        recs.append(dict(model=mt, cls="", tp=tp, mode=mode, seconds=wall, **extra, **why))
    return recs


def load_results(path: Path) -> dict:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                out[_key(r)] = r
    return out


# failures checked by hand to be bugs in HF's own plan: what is wrong, and where the fixed plan is verified
HF_PLAN_BUGS = {
    "apertus": ("a bug in HF's plan: xIELU's learnable alpha_p / alpha_n (mlp.act_fn) act on the column-sharded "
                "up projection, and the plan gives mlp.act_fn no replicated_with_grad_allreduce, so their "
                "gradients stay each rank's partial sums; with that one entry the model verifies "
                "(tests/test_hf_zoo.py::test_apertus_plan_with_the_act_fn_gradient_all_reduce_verifies)"),
}


def report(models: list[str], tps: list[int], modes: list[str], results: dict, classes: dict,
           variant: tuple = (0, False)) -> None:
    rows = [results.get((m, tp, mode) + variant) or dict(model=m, tp=tp, mode=mode, verdict="not-run", op="-",
                                                           seconds=0)
            for m in models for tp in tps for mode in modes]
    # where HF's own code fails under HF's plan, the operator its error names (a DTensor mixed with a tensor...)
    rows = [dict(r, op=_op_named(str(r.get("reason", "")))) if r["verdict"] == "cannot-build" and
            (r.get("op") or "-") == "-" else r for r in rows]
    print(f"\n{'architecture':34} {'tp':>2} {'mode':8} {'verdict':17} {'operator':34} {'time s':>7}")
    for r in rows:
        arch = classes.get(r["model"], r["model"])
        print(f"{arch:34} {r['tp']:>2} {r['mode']:8} {r['verdict']:17} {r.get('op') or '-':34} "
              f"{r.get('seconds', 0):>7.1f}")
    bad = [r for r in rows if r["verdict"] not in ("verifies", "not-run")]
    if bad:
        print("\nfailures (architecture, tp, mode: operator -- reason; cannot-build: HF's model code or HF's plan "
              "fails to run, HF's own error):")
        for r in bad:
            loc = f" at {r['loc']}" if r.get("loc") else ""
            reason = " ".join(str(r.get("reason", "")).split())
            if r["verdict"] == "does-not-refine" and r["model"] in HF_PLAN_BUGS:
                reason = HF_PLAN_BUGS[r["model"]] + ". graphguard: " + reason
            if r["verdict"] == "cannot-build" and "mixed torch.Tensor and DTensor" in reason:
                reason = ("HF's plan makes a parameter a DTensor that HF's code combines with plain tensors (the "
                          "plan's style does not fit that parameter). " + reason)
            print(f"  {classes.get(r['model'], r['model'])} tp={r['tp']} {r['mode']}: {r.get('op') or '-'}{loc} -- "
                  f"{reason[:1200]}")
    total = sum(r.get("seconds", 0) for r in rows)
    print(f"\nzoo: {len(classes)} *ForCausalLM classes with a base_model_tp_plan (transformers "
          f"{_tf_version()}); shown: {len(models)}; experts {os.environ.get('GG_HF_EXPERTS', 'batched_mm')}, dtype "
          f"{os.environ.get('GG_HF_DTYPE', 'float32')}; summed wall time {total:.0f} s")
    checked = [r for r in rows if r.get("check_s") is not None]
    if checked:  # the independent checker (graphguard/check.py, on by default) against verification alone
        ratios = sorted(r["check_s"] / max(r["verify_s"], 1e-9) for r in checked)
        print(f"checker: {len(checked)} verified runs checked; checker {sum(r['check_s'] for r in checked):.1f} s "
              f"against verification's {sum(r['verify_s'] for r in checked):.1f} s "
              f"({100 * sum(r['check_s'] for r in checked) / max(sum(r['verify_s'] for r in checked), 1e-9):.1f} %); "
              f"per run median {100 * ratios[len(ratios) // 2]:.1f} %, largest {100 * ratios[-1]:.1f} %")
    for tp in tps:
        for mode in modes:
            sel = [r for r in rows if r["tp"] == tp and r["mode"] == mode]
            ok = sum(r["verdict"] == "verifies" for r in sel)
            run = sum(r["verdict"] != "not-run" for r in sel)
            built = [r for r in sel if r["verdict"] not in ("cannot-build", "not-run")]
            print(f"pass rate tp={tp} {mode:8}: {ok}/{len(sel)} verify ({100 * ok / max(len(sel), 1):.1f} %)"
                  + (f"; {len(sel) - run} not run yet" if run < len(sel) else "")
                  + f"; of the {len(built)} whose HF code runs under HF's plan: {ok}/{len(built)} "
                    f"({100 * ok / max(len(built), 1):.1f} %)"
                  + "".join(f"; a bug in HF's plan found: {m}" for m in sorted(
                      {r["model"] for r in sel if r["verdict"] == "does-not-refine" and r["model"] in HF_PLAN_BUGS})))


def repeat_report(models: list[str], tps: list[int], modes: list[str], results: dict, layers: int, out: Path):
    """Capture time with and without ``repeat`` (same models, degrees, modes and layer count), and both
    verdicts; printed and written to ``out``."""
    lines = [f"HF zoo, {layers or 2} decoder layers: capture (G_s + G_d) with and without repeat = the decoder stack "
             f"(transformers {_tf_version()}; wall seconds, one model at a time, {os.cpu_count()} CPUs; python3 "
             f"bench/hf_zoo.py --models {','.join(models)} --tp {','.join(map(str, tps))} --modes {','.join(modes)} "
             f"--layers {layers} [--repeat])",
             f"{'model':14} {'tp':>2} {'mode':8} {'verdict':16} {'verdict/repeat':16} {'capture s':>9} "
             f"{'/repeat':>8} {'saved':>6} {'run s':>7} {'/repeat':>8}"]
    tot = [0.0, 0.0]
    for m in models:
        for tp in tps:
            for mode in modes:
                a, b = results.get((m, tp, mode, layers, False)), results.get((m, tp, mode, layers, True))
                if a is None or b is None:
                    continue
                ca, cb = a.get("capture_s"), b.get("capture_s")
                saved = f"{100 * (1 - cb / ca):5.1f}%" if ca and cb else "-"
                if ca and cb:
                    tot[0] += ca
                    tot[1] += cb
                lines.append(f"{m:14} {tp:>2} {mode:8} {a['verdict']:16} {b['verdict']:16} {ca or 0:9.1f} "
                             f"{cb or 0:8.1f} {saved:>6} {a.get('seconds', 0):7.1f} {b.get('seconds', 0):8.1f}")
    if len(lines) == 2:
        return
    if tot[0]:
        lines.append(f"total capture {tot[0]:.1f} s without repeat, {tot[1]:.1f} s with: "
                     f"{100 * (1 - tot[1] / tot[0]):.1f} % saved")
    refused = [f"{k[0]} tp={k[1]} {k[2]}: {r.get('reason', '')[:300]}" for k, r in results.items()
               if k[3] == layers and k[4] and r["verdict"] != "verifies" and k[0] in models]
    lines += ["repeat refused / failed:"] + [f"  {x}" for x in refused] if refused else []
    print("\n" + "\n".join(lines))
    out.write_text("\n".join(lines) + "\n")


def _tf_version() -> str:
    try:
        from importlib.metadata import version
        return version("transformers")
    except Exception:
        return "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="all", help="comma-separated model types (default: the whole zoo)")
    ap.add_argument("--tp", default="2,4")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--jobs", type=int, default=1, help="models at once (threads, or local Ray workers)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per model and mode (all TP degrees)")
    ap.add_argument("--mem-gb", type=float, default=6.0, help="address-space cap per model process")
    ap.add_argument("--results", default=str(ROOT / "bench" / "out" / "hf_zoo.jsonl"))
    ap.add_argument("--fresh", action="store_true", help="ignore (and overwrite) earlier results")
    ap.add_argument("--rerun", action="store_true",
                    help="run the selected models again even where the results file has their verdicts (the "
                         "new verdicts are appended and replace the old ones; other results are kept)")
    ap.add_argument("--report-only", action="store_true", help="print the table of the results file, run nothing")
    ap.add_argument("--ray", action="store_true", help="run the models as Ray tasks (--jobs local workers; each "
                    "task runs the model's worker process under the same memory cap and timeout)")
    ap.add_argument("--ray-address", default=None, help="a running Ray cluster (implies --ray; every node needs "
                    "this repository at the same path)")
    ap.add_argument("--experts", default="batched_mm", help="HF's experts implementation for MoE models "
                    "(batched_mm; grouped_mm, HF's default, with --dtype bfloat16 as HF runs it under TorchDynamo)")
    ap.add_argument("--dtype", default="float32", help="the models' dtype (float32, bfloat16)")
    ap.add_argument("--layers", type=int, default=0, help="decoder layers of every model (default: 2, the tiny "
                    "config's)")
    ap.add_argument("--repeat", action="store_true", help="capture with repeat = the decoder stack (layer 0 "
                    "traced, the others checked copies of it)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    os.environ["GG_HF_EXPERTS"], os.environ["GG_HF_DTYPE"] = a.experts, a.dtype  # (read by the model file)
    if not a.worker:  # (read by the workers, started with this environment)
        os.environ["GG_HF_LAYERS"], os.environ["GG_HF_REPEAT"] = str(a.layers or ""), "1" if a.repeat else ""
    if (a.layers or a.repeat) and a.results == ap.get_default("results"):
        a.results = str(ROOT / "bench" / "out" / "hf_zoo-repeat.jsonl")
    if (a.experts, a.dtype) != ("batched_mm", "float32") and a.results == ap.get_default("results"):
        a.results = str(ROOT / "bench" / "out" / f"hf_zoo-{a.experts}-{a.dtype}.jsonl")
    tps = [int(x) for x in a.tp.split(",")]
    modes = a.modes.split(",")
    if any(m not in MODES for m in modes):
        ap.error(f"--modes: one of {', '.join(MODES)}")
    if a.worker:
        for mode in modes:
            worker(a.worker, tps, mode)
        return 0
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import warnings
    warnings.filterwarnings("ignore")
    classes = {mt: cls.__name__ for mt, cls in _zoo().causal_lm_classes().items()}
    models = list(classes) if a.models == "all" else a.models.split(",")
    unknown = [m for m in models if m not in classes]
    if unknown:
        ap.error(f"--models: not in the zoo: {', '.join(unknown)} (zoo: {', '.join(classes)})")
    print(f"zoo: {len(classes)} *ForCausalLM classes whose config has a base_model_tp_plan; running {len(models)} "
          f"at tp {a.tp}, modes {a.modes}", flush=True)
    path = Path(a.results)
    path.parent.mkdir(parents=True, exist_ok=True)
    if a.fresh and path.exists():
        path.unlink()
    results = load_results(path)
    variant = (a.layers, a.repeat)
    todo = [(m, mode, [tp for tp in tps if a.rerun or (m, tp, mode) + variant not in results]) for m in models
            for mode in modes]
    todo = [t for t in todo if t[2]] if not a.report_only else []
    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)

    def one(job, recs=None):
        m, mode, tp_list = job
        if recs is None:
            recs = run_one(m, tp_list, mode, a.timeout * len(tp_list), a.mem_gb)
        with path.open("a") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        for r in recs:
            results[_key(r)] = r
            print(f"  {m:22} tp={r['tp']} {mode:8} {r['verdict']:17} {r.get('op') or '-'} "
                  f"({r.get('seconds', 0):.0f} s)", flush=True)
    if (a.ray or a.ray_address) and todo:
        import ray
        ray.init(address=a.ray_address, num_cpus=None if a.ray_address else max(1, a.jobs), include_dashboard=False,
                 logging_level="ERROR", log_to_driver=False, configure_logging=False)
        task = ray.remote(num_cpus=1, max_retries=0)(run_one)
        pending = {task.remote(m, tp_list, mode, a.timeout * len(tp_list), a.mem_gb): (m, mode, tp_list)
                   for m, mode, tp_list in todo}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                one(pending.pop(ref), ray.get(ref))
        ray.shutdown()
    else:
        with ThreadPoolExecutor(max(1, a.jobs)) as ex:
            list(ex.map(one, todo))
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    if todo:
        print(f"ran {len(todo)} model runs in {time.perf_counter() - t0:.0f} s wall, "
              f"{ch.ru_utime + ch.ru_stime - c0.ru_utime - c0.ru_stime:.0f} s CPU (children)")
    report(models, tps, modes, results, classes, variant)
    if a.layers or a.repeat:
        repeat_report(models, tps, modes, results, a.layers, path.with_suffix(".txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
