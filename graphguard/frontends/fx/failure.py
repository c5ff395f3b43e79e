"""What a failed capture says: one line with the real cause, the module whose forward was running and, for a
model distributed by a TP plan, the plan entry that applies to that module.

* :func:`quiet_torch_logs` silences torch's own loggers while capturing (TorchDynamo and FakeTensor log a
  failing op's traceback at ERROR level before raising; graphguard reports the failure itself). Levels are
  restored afterwards; with ``TORCH_LOGS`` set nothing is silenced (the user asked for torch's logs).
* :func:`capture_failure` reads a TorchDynamo failure: the innermost user exception (an exception the model's own
  code raised under capture: its type and message), the failing fx node's ``nn_module_stack`` (which module's
  forward ran the op); where TorchDynamo keeps no node (an exception the model raised itself), the module is
  found by running the model once more eagerly with forward pre-hooks.
* :func:`plan_entry` names the TP plan entry of a module: an HF model's ``tp_plan`` / ``_tp_plan`` (matched as
  HF matches it: layer numbers as ``*``), or the DTensor ``ParallelStyle`` that ``parallelize_module`` installed
  on the module (its hooks hold it; ``parallelize_module`` keeps no plan).
"""
from __future__ import annotations

import contextlib
import logging
import os
import re


@contextlib.contextmanager
def quiet_torch_logs():
    """torch's loggers (``torch``, ``torch._dynamo``, ``torch._subclasses.fake_tensor``...) set to CRITICAL while
    the block runs, their levels restored afterwards."""
    if os.environ.get("TORCH_LOGS"):
        yield
        return
    # (a logger at NOTSET takes the level of "torch"; only those with a level of their own are set too: each
    # setLevel clears every logger's cache, so setting all of them cost a capture 60 ms)
    loggers = [logging.getLogger("torch")] + [
        lg for n, lg in list(logging.Logger.manager.loggerDict.items())
        if n.startswith("torch.") and isinstance(lg, logging.Logger) and lg.level != logging.NOTSET]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)


def _chain(e: BaseException) -> list[BaseException]:
    out, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


def _node_module(chain: list[BaseException]) -> str | None:
    """The module of the fx node TorchDynamo was running when it failed (a frame of its traceback holds it)."""
    from .convert import module_path
    for e in chain:
        tb, found = e.__traceback__, None
        while tb is not None:
            node = tb.tb_frame.f_locals.get("node")
            meta = getattr(node, "meta", None)
            if isinstance(meta, dict) and module_path(meta):
                found = module_path(meta)  # (the innermost such frame)
            tb = tb.tb_next
        if found:
            return found
    return None


_OBSERVED = re.compile(r"raised exception (\w+)\((.*)\)\s*$", re.S)


def _first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0]


def _cause(root: BaseException) -> str:
    """``Type: message`` of the innermost exception; an exception the model raised under TorchDynamo
    (``ObservedValueError: raised exception ValueError('...')``) as the model raised it."""
    text = str(root).strip()
    m = _OBSERVED.match(_first_line(text)) if type(root).__name__.startswith("Observed") else None
    if m:
        msg = m.group(2)
        if len(msg) >= 2 and msg[0] == msg[-1] and msg[0] in "'\"":
            msg = msg[1:-1]
        return f"{m.group(1)}: {msg}"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return f"{type(root).__name__}: {lines[0] if lines else ''}"


def _sharding(chain: list[BaseException]) -> str:
    """DTensor's word on which placements met, where an op's sharding propagation failed."""
    for e in chain:
        for ln in str(e).splitlines():
            ln = ln.strip()
            if ln.startswith("Sharding propagation failed for "):
                return " (" + re.sub(r" on DeviceMesh\(.*$", "", ln).rstrip(".") + ")"
    return ""


def eager_module(module, args) -> tuple[str | None, BaseException | None]:
    """Run ``module(*args)`` eagerly with forward pre-hooks on every submodule: the path of the innermost module
    whose forward was running when it raised, and what it raised (None, None when it does not raise)."""
    paths = {id(m): p for p, m in module.named_modules()}
    stack: list[str] = []  # the modules whose forward runs: a forward that raises is never popped
    handles = []

    def pre(m, _):
        stack.append(paths.get(id(m), ""))

    def post(m, _, __):
        if stack:
            stack.pop()
    try:
        for m in module.modules():
            handles.append(m.register_forward_pre_hook(pre))
            handles.append(m.register_forward_hook(post))
        try:
            with quiet_torch_logs():
                module(*args)
        except Exception as e:  # noqa: BLE001 -- the model's own failure, only read
            return (stack[-1] if stack else None) or None, e
    except Exception:  # noqa: BLE001 -- a diagnosis only
        pass
    finally:
        for h in handles:
            h.remove()
    return None, None


def capture_failure(where: str, e: BaseException, loc: str | None, module=None, args=None, hint: str = "",
                    eager: bool = True) -> str:
    """The one line saying why capturing ``module`` failed (see the module docstring); ``eager=False``: no
    eager re-run to find the module (the model is not the one captured)."""
    chain = _chain(getattr(e, "inner_exception", None) or e)
    root = chain[-1]
    path = _node_module(chain)
    cause = _cause(root)
    if path is None and eager and module is not None and args is not None and _raised_by_model(root):
        found, eager = eager_module(module, args)
        if eager is not None and type(eager).__name__ == cause.split(":")[0]:  # the same failure, eagerly
            path, cause = found, f"{type(eager).__name__}: {_first_line(eager)}"
    parts = [f"{where} failed"]
    if path:
        parts.append(f" in module '{path}'")
        entry = plan_entry(module, path) if module is not None else None
        if entry:
            parts.append(f" ({entry})")
    if loc:
        parts.append(f" at {loc}")
    if path and module is not None and "mixed torch.Tensor and DTensor" in cause:
        hint = _dtensor_params(module, path) + hint
    if path and module is not None:
        hint = _heads(module, path) + hint
    return "".join(parts) + f": {cause}{_sharding(chain)}{hint}"


def _dtensor_params(root, path: str) -> str:
    """`` (its parameter 'sinks' is a DTensor -- plan entry ...: the module's own code reads it with plain
    tensors)``: the DTensor parameters of the module at ``path`` (a plan that shards a parameter of a module whose
    forward it does not wrap hands that forward a DTensor beside plain tensors)."""
    try:
        from torch.distributed.tensor import DTensor
        m = root
        for name in path.split("."):
            m = m._modules[name]
        names = [n for n, p in m.named_parameters(recurse=False) if isinstance(p, DTensor)]
        if not names:
            return ""
        entries = [e for n in names if (e := plan_entry(root, f"{path}.{n}"))]
        said = f" -- {'; '.join(entries)}" if entries else ""
        return (f" (its parameter{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)} "
                f"{'are DTensors' if len(names) > 1 else 'is a DTensor'}{said}, which this module's own code mixes "
                f"with plain tensors: the plan shards a parameter whose module's forward it does not wrap)")
    except Exception:  # noqa: BLE001 -- a hint only
        return ""


# head counts of an HF config that a TP plan's colwise projections split across the ranks (whole heads only)
_HEAD_COUNTS = (("num_key_value_heads", "KV heads"), ("num_attention_heads", "attention heads"))


def _heads(root, path: str) -> str:
    """`` -- num_key_value_heads is 2, not a multiple of the TP size 4: ...``: where the model's config (HF's)
    has a head count the world size does not divide and the plan shards projections of the module that failed
    (an attention's q/k/v: each rank's share is no whole number of heads, and the attention's reshape into
    heads fails). Empty when the counts divide, or no plan entry shards the module's children."""
    try:
        import torch.distributed as dist
        if not dist.is_initialized():
            return ""
        world = dist.get_world_size()
        cfg = getattr(root, "config", None)
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        m = root
        for name in path.split("."):
            m = m._modules[name]
        entries = [e for child in m._modules if (e := plan_entry(root, f"{path}.{child}"))]
        if not entries:
            return ""
        for field, what in _HEAD_COUNTS:
            n = getattr(cfg, field, None)
            if type(n) is int and n > 0 and n % world:
                return (f" -- {field} is {n}, not a multiple of the TP size {world}: the {n} {what} cannot be "
                        f"split whole across {world} ranks by the plan entr{'ies' if len(entries) > 1 else 'y'} "
                        f"{', '.join(e.removeprefix('plan entry ') for e in entries)} (use a TP size dividing "
                        f"{n}, or a plan that replicates those projections)")
    except Exception:  # noqa: BLE001 -- a hint only
        return ""
    return ""


def _raised_by_model(root: BaseException) -> bool:
    """An exception the model's own code raised (not a TorchDynamo limitation): worth an eager re-run."""
    name = type(root).__name__
    return name.startswith("Observed") or isinstance(root, (ValueError, IndexError, KeyError, AssertionError,
                                                            TypeError, RuntimeError, NotImplementedError))


def missing_group(e: BaseException) -> tuple[int, ...] | None:
    """The ranks of a collective given a rank list (``group=[0, 1]``) for which torch found no process group
    (``_resolve_group_name_by_ranks_and_tag`` raises an empty ValueError): its frame holds them."""
    for x in _chain(getattr(e, "inner_exception", None) or e):
        tb = x.__traceback__
        while tb is not None:
            f = tb.tb_frame
            if f.f_code.co_name == "_resolve_group_name_by_ranks_and_tag":
                ranks = f.f_locals.get("ranks")
                if isinstance(ranks, (list, tuple)) and ranks and all(type(r) is int and r >= 0 for r in ranks):
                    return tuple(sorted(set(ranks)))
            tb = tb.tb_next
    return None


# -- TP plans ---------------------------------------------------------------------------------------------

def _plan_match(key: str, path: str) -> bool:
    """HF's matching: a plan key's ``*`` stands for one path component (a layer number)."""
    k, p = key.split("."), path.split(".")
    return len(k) == len(p) and all(a == "*" or a == b for a, b in zip(k, p))


def _hf_plan(m) -> dict | None:
    for attr in ("_tp_plan", "tp_plan", "base_model_tp_plan"):
        try:
            plan = m.__dict__.get(attr) if attr != "tp_plan" else getattr(m, attr, None)
        except Exception:  # noqa: BLE001 -- a property that fails: no plan
            plan = None
        if isinstance(plan, dict) and plan and all(isinstance(k, str) for k in plan):
            return plan
    return None


def _style(m) -> str | None:
    """The DTensor ParallelStyle (or HF TensorParallelLayer) installed on module ``m``: its hooks' (or its
    replaced forward's) closures hold it, or -- DTensor's styles hand ``distribute_module`` their static
    ``_prepare_input_fn`` / ``_prepare_output_fn`` -- a function of its class."""
    import functools
    fns = list(m._forward_pre_hooks.values()) + list(m._forward_hooks.values())
    if "forward" in m.__dict__:
        fns.append(m.__dict__["forward"])
    for fn in fns:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            if isinstance(v, functools.partial):
                owner = getattr(v.func, "__self__", None)
                if owner is None and getattr(v.func, "__module__", "").startswith("torch.distributed.tensor"):
                    qual = getattr(v.func, "__qualname__", "")
                    if "." in qual and qual.split(".")[0].endswith("Parallel"):
                        return qual.split(".")[0]
                v = owner
            if {c.__name__ for c in type(v).__mro__} & {"ParallelStyle", "TensorParallelLayer"}:
                text = repr(v) if type(v).__repr__ is not object.__repr__ else type(v).__name__
                return _first_line(text)
    return None


def plan_entry(root, path: str) -> str | None:
    """``plan entry "model.layers.*.self_attn.o_proj": "colwise"`` for the module at ``path`` of ``root``, or
    ``parallel style ColwiseParallel(...)`` (the DTensor style installed on it); None when neither is found."""
    try:
        parts = path.split(".") if path else []
        mods = [(0, root)]
        m = root
        for i, name in enumerate(parts):
            m = getattr(m, "_modules", {}).get(name)
            if m is None:
                break
            mods.append((i + 1, m))
        for i, owner in mods:  # the outermost plan that names the module (HF's model.tp_plan holds them all)
            plan = _hf_plan(owner)
            rel = ".".join(parts[i:])
            for key, style in (plan or {}).items():
                if _plan_match(key, rel):
                    return f'plan entry "{key}": "{style}"'
        if len(mods) == len(parts) + 1:
            style = _style(mods[-1][1])
            if style is not None:
                return f"parallel style {style}"
    except Exception:  # noqa: BLE001 -- a hint only
        return None
    return None
