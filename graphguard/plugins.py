"""Plugin host: loads every plugin through entry points and assembles ops, lemmas and frontends."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points

import pluggy

from . import hookspecs
from .errors import GraphGuardError
from .ir.ops import Registry, builtin_ops

GROUPS = ("graphguard.frontends", "graphguard.lemma_packs")


@dataclass
class Plugins:
    """What the loaded plugins provide."""
    registry: Registry
    lemmas: list
    frontends: dict
    loaded: list[tuple[str, str, str]] = field(default_factory=list)  # (group, name, module)

    def frontend(self, name: str):
        fe = self.frontends.get(name)
        if fe is None:
            known = ", ".join(sorted(self.frontends)) or "none"
            raise GraphGuardError(f"unknown frontend '{name}' (loaded: {known})")
        return fe


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
    for mod in extra:
        pm.register(mod)
        loaded.append(("extra", getattr(mod, "__name__", str(mod)), getattr(mod, "__name__", "")))
    return pm, loaded


@lru_cache(maxsize=8)
def load_plugins(disabled: frozenset[str] = frozenset(), extra: tuple = ()) -> Plugins:
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
    lemmas = []
    seen: dict[int, object] = {}
    for impl in pm.hook.graphguard_lemmas.get_hookimpls():
        pack = names.get(id(impl.plugin), "?")
        for lem in impl.function() or []:
            lem.pack = lem.pack or pack
            if lem.ref in seen:
                raise GraphGuardError(f"lemma reference {lem.ref} is used twice ({seen[lem.ref]} and {lem.where})")
            seen[lem.ref] = lem.where
            lemmas.append(lem)
    from .engine.lemma import compile_lemmas
    compiled = compile_lemmas(lemmas, reg)
    frontends = {}
    for fes in pm.hook.graphguard_frontends():
        for fe in fes or []:
            frontends[fe.name] = fe
    return Plugins(reg, compiled, frontends, loaded)
