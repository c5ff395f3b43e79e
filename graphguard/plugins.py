"""Plugin host: loads every plugin through entry points and assembles ops, lemmas and frontends.

A lemma pack that is not one of graphguard's own is fuzzed (``graphguard lemmas check``) the first time it is
loaded; the verdict is cached by the hash of the pack's source files in ``$GRAPHGUARD_CACHE_DIR`` (default
``$XDG_CACHE_HOME/graphguard`` or ``~/.cache/graphguard``), and a pack with a failing lemma is refused with
one line naming it. The built-in packs are fuzzed by the test suite instead.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path

import pluggy

from . import hookspecs
from .errors import GraphGuardError
from .ir.ops import Registry, builtin_ops
from .passes import PIPELINE, build_pipeline

GROUPS = ("graphguard.frontends", "graphguard.lemma_packs")


@dataclass
class Plugins:
    """What the loaded plugins provide."""
    registry: Registry
    lemmas: list
    frontends: dict
    loaded: list[tuple[str, str, str]] = field(default_factory=list)  # (group, name, module)
    passes: list = field(default_factory=lambda: list(PIPELINE))  # the graph passes, in order (graphguard/passes)

    def frontend(self, name: str):
        fe = self.frontends.get(name)
        if fe is None:
            known = ", ".join(sorted(self.frontends)) or "none"
            raise GraphGuardError(f"unknown frontend '{name}' (loaded: {known})")
        return fe


def _builtin(ep) -> bool:
    """One of graphguard's own plugins (its distribution's entry points)."""
    dist = getattr(ep, "dist", None)
    if dist is not None and getattr(dist, "name", None):
        return dist.name.lower() == "graphguard"
    return ep.value.split(".", 1)[0].split(":", 1)[0] in ("graphguard", "lemma_packs")


def _manager(disabled: frozenset[str], extra: tuple = ()) -> tuple[pluggy.PluginManager, list]:
    pm = pluggy.PluginManager("graphguard")
    pm.add_hookspecs(hookspecs)
    loaded = []
    names = {ep.name for group in GROUPS for ep in entry_points(group=group)}
    if disabled - names:
        raise GraphGuardError(f"-p no:{sorted(disabled - names)[0]}: no plugin has that name (plugins: "
                              f"{', '.join(sorted(names))})")
    for group in GROUPS:
        for ep in entry_points(group=group):
            if ep.name in disabled or pm.get_plugin(ep.name) is not None:
                continue
            try:
                mod = ep.load()
            except Exception as e:  # a broken third-party plugin must not take the tool down silently
                raise GraphGuardError(f"plugin '{ep.name}' ({ep.value}) failed to load: {e}") from None
            pm.register(mod, name=ep.name)
            loaded.append((group, ep.name, ep.value))
            if group == "graphguard.lemma_packs" and not _builtin(ep):
                pm._third_party = getattr(pm, "_third_party", {})  # name -> module
                pm._third_party[ep.name] = mod
    for mod in extra:
        pm.register(mod)
        loaded.append(("extra", getattr(mod, "__name__", str(mod)), getattr(mod, "__name__", "")))
    return pm, loaded


def cache_dir() -> Path:
    env = os.environ.get("GRAPHGUARD_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graphguard"


def pack_hash(mod) -> str:
    """Hash of a pack's source files (every .py file of its package, or its module file), and of the fuzzer's
    version and the lemma families its ops' properties derive: the cache key of its verdict."""
    from .engine import families, fuzz, invariances
    h = hashlib.sha256(f"graphguard-fuzz-{fuzz.MIN_INSTANCES}".encode())
    h.update(Path(fuzz.__file__).read_bytes())
    h.update(Path(families.__file__).read_bytes())
    h.update(Path(invariances.__file__).read_bytes())
    paths = getattr(mod, "__path__", None)
    files = sorted(p for d in paths for p in Path(d).rglob("*.py")) if paths else [Path(mod.__file__)]
    for p in files:
        h.update(str(p.name).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:32]


def _gate(name: str, mod, rules: list, reg: Registry) -> None:
    """Fuzz a third-party pack's lemmas once (the verdict cached by its content hash); refuse it if one fails."""
    from .engine.fuzz import check_identity, check_scalar_form, fuzz_rule
    path = cache_dir() / "packs" / f"{name}-{pack_hash(mod)}.json"
    try:
        verdict = json.loads(path.read_text())
    except (OSError, ValueError):
        verdict = None
    if not isinstance(verdict, dict) or "failed" not in verdict:
        verdict = {"failed": None, "rules": len(rules)}
        for r in rules:
            rep = fuzz_rule(r, reg)
            if not rep.ok:
                verdict["failed"] = f"lemma {r.lemma.label} {r.lemma.name} ({r.lemma.where}): {rep.why()}"
                break
        for op in (o for o in reg if o.source == name and (o.identity or o.scalar_form) and not verdict["failed"]):
            bad = [f"{n}: {why}" for n, _, why in check_identity(op, reg) + check_scalar_form(op, reg) if why]
            verdict["failed"] = bad[0] if bad else None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(verdict))
        except OSError:
            pass  # no cache: the pack is fuzzed again next time
    if verdict["failed"]:
        one_line = " ".join(str(verdict["failed"]).split())
        raise GraphGuardError(f"lemma pack '{name}' is refused: {one_line} (see `graphguard lemmas check`)")


def _span(r) -> str:
    return f"{r.start}-{r.stop - 1}" if len(r) > 1 else str(r.start)


def _check_numbers(lemmas: list) -> None:
    """Lemma numbers come from a range each pack file declares (``NUMBERS = range(1300, 1310)``, or a tuple of
    ranges, at module level before its lemmas: graphguard/ir/lemma.py's ``L``): refuse a file that declares none,
    a lemma outside its file's numbers, and two files of one pack whose numbers overlap."""
    files: dict[tuple[str, str], tuple] = {}  # (pack, file) -> its ranges
    for lem in lemmas:
        path = lem.where.rsplit(":", 1)[0]
        decl = lem.numbers
        if not decl:
            raise GraphGuardError(f"lemma {lem.label} ({lem.where}): its file declares no lemma numbers; declare "
                                  f"them at module level before its lemmas (NUMBERS = range(first, last + 1))")
        if not all(isinstance(r, range) and r.step == 1 and len(r) for r in decl):
            raise GraphGuardError(f"lemma {lem.label} ({lem.where}): NUMBERS of {path} must be a range or a tuple "
                                  f"of ranges (step 1, not empty), not {decl!r}")
        if not any(lem.ref in r for r in decl):
            raise GraphGuardError(f"lemma {lem.label} {lem.name} ({lem.where}): {lem.ref} lies outside the numbers "
                                  f"its file declares ({', '.join(map(_span, decl))}); take a free one of those, or "
                                  f"widen NUMBERS")
        files.setdefault((lem.pack, path), decl)
    keys = list(files)
    for i, (pack, a) in enumerate(keys):
        for pack2, b in keys[i + 1:]:
            if pack2 != pack:
                continue
            common = [(x, y) for x in files[pack, a] for y in files[pack, b] if max(x.start, y.start) < min(x.stop, y.stop)]
            if common:
                x, y = common[0]
                raise GraphGuardError(f"lemma numbers of pack '{pack}' overlap: {a} declares {_span(x)} and {b} "
                                      f"{_span(y)}; give each file its own numbers")


@lru_cache(maxsize=8)
def load_plugins(disabled: frozenset[str] = frozenset(), extra: tuple = (), gate: bool = True) -> Plugins:
    """Every plugin not disabled. ``gate``: refuse a third-party lemma pack whose lemmas fail the fuzzer
    (``graphguard lemmas check`` loads without it, to show why)."""
    pm, loaded = _manager(disabled, extra)
    reg = Registry()
    for op in builtin_ops():
        reg.add(op)
    names = {id(p): n for n, p in pm.list_name_plugin()}
    for impl in pm.hook.graphguard_ops.get_hookimpls():
        for op in impl.function() or []:
            op.source = op.source or names.get(id(impl.plugin), "?")
            reg.add(op)
    for impl in pm.hook.graphguard_collective_ops.get_hookimpls():
        for target, spec in (impl.function() or {}).items():
            if target in reg.collective_ops:
                raise GraphGuardError(f"collective op {target} is declared twice")
            reg.collective_ops[target] = dict(spec)
    from .engine.lemma import FUNCTIONS
    for impl in pm.hook.graphguard_lemma_functions.get_hookimpls():
        for name, fn in (impl.function() or {}).items():
            if name in FUNCTIONS or name in reg.functions:
                raise GraphGuardError(f"lemma function {name}() of plugin {names.get(id(impl.plugin), '?')} "
                                      f"is defined twice")
            reg.functions[name] = fn
    from .engine.families import all_families, derive
    from .engine.lemma import compile_lemmas, duplicate_problems
    lemmas = []
    seen: dict[tuple[str, int], str] = {}  # (pack, number) -> file:line: numbers are unique within a pack only
    family = {ref: name for ref, name, *_ in all_families()}
    for impl in pm.hook.graphguard_lemmas.get_hookimpls():
        pack = names.get(id(impl.plugin), "?")
        for lem in impl.function() or []:
            lem.pack = lem.pack or pack
            if lem.key in seen:
                raise GraphGuardError(f"lemma reference {lem.label} is used twice ({seen[lem.key]} and {lem.where})")
            if lem.ref in family and not lem.variant:
                raise GraphGuardError(f"lemma {lem.label} ({lem.where}): {lem.ref} is the number of the lemma family "
                                      f"{family[lem.ref]} (graphguard/engine/families.py), whose lemmas every "
                                      f"pack's operators derive; choose another")
            seen[lem.key] = lem.where
            lemmas.append(lem)
    _check_numbers(lemmas)
    lemmas += derive(reg)  # the families of the ops' declared properties (engine/families.py)
    compiled = compile_lemmas(lemmas, reg)
    dup = duplicate_problems(compiled)  # one fact, written once
    if dup:
        raise GraphGuardError(f"{len(dup)} lemma(s) restate another rule: " + "; ".join(dup))
    if gate:
        for name, mod in getattr(pm, "_third_party", {}).items():
            _gate(name, mod, [r for r in compiled if r.lemma.pack == name], reg)
    frontends = {}
    for fes in pm.hook.graphguard_frontends():
        for fe in fes or []:
            frontends[fe.name] = fe
    contributed = [replace(p, source=names.get(id(impl.plugin), "?"))
                   for impl in pm.hook.graphguard_passes.get_hookimpls() for p in impl.function() or []]
    return Plugins(reg, compiled, frontends, loaded, build_pipeline(PIPELINE, contributed))
