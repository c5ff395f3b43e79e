"""The layering, read statically from the source (ast; nothing is imported): lemma packs are data over the IR
and never import the engine; the IR imports neither the engine, the frontends nor the packs; the engine does
not load plugins (graphguard.plugins sits above it); no import cycle among graphguard.* and lemma_packs.* at
module level."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP = ("graphguard", "lemma_packs")


def _modules() -> dict[str, Path]:
    out = {}
    for top in TOP:
        for p in sorted((ROOT / top).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


MODULES = _modules()


def _is_package(mod: str) -> bool:
    return MODULES[mod].name == "__init__.py"


def _base(mod: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` names, relative levels resolved against ``mod``."""
    if not node.level:
        return node.module or ""
    pkg = mod.split(".") if _is_package(mod) else mod.split(".")[:-1]
    pkg = pkg[:len(pkg) - (node.level - 1)]
    return ".".join(pkg + ([node.module] if node.module else []))


def _targets(mod: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement names (``from pkg import sub`` names ``pkg.sub`` where that is a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = _base(mod, node)
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.append(sub if sub in MODULES else base)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level(body: list[ast.stmt]):
    """Import statements that run when the module is imported: the body's, and those of its top-level
    ``if`` (not ``if TYPE_CHECKING``), ``try``, ``with`` and class bodies -- not function bodies."""
    for st in body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            yield st
        elif isinstance(st, ast.If):
            if not _is_type_checking(st.test):
                yield from _module_level(st.body)
            yield from _module_level(st.orelse)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            for b in (st.body, st.orelse, st.finalbody, *[h.body for h in st.handlers]):
                yield from _module_level(b)
        elif isinstance(st, (ast.With, ast.ClassDef)):
            yield from _module_level(st.body)


def _tree(mod: str) -> ast.Module:
    return ast.parse(MODULES[mod].read_text(), str(MODULES[mod]))


def _all_imports(mod: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``mod``, function-local ones included."""
    return [(n.lineno, t) for n in ast.walk(_tree(mod)) if isinstance(n, (ast.Import, ast.ImportFrom))
            for t in _targets(mod, n)]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _offenders(scope: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{MODULES[m].relative_to(ROOT)}:{line}: imports {t}"
            for m in MODULES if _under(m, scope)
            for line, t in _all_imports(m) if any(_under(t, f) for f in forbidden)]


def test_packs_do_not_import_the_engine():
    assert _offenders("lemma_packs", ("graphguard.engine",)) == []


def test_ir_imports_no_engine_frontend_or_pack():
    assert _offenders("graphguard.ir", ("graphguard.engine", "graphguard.frontends", "lemma_packs")) == []


def test_engine_does_not_import_plugins():
    assert _offenders("graphguard.engine", ("graphguard.plugins",)) == []


def _graph() -> dict[str, set[str]]:
    g = {}
    for m in MODULES:
        g[m] = {t for n in _module_level(_tree(m).body) for t in _targets(m, n) if t in MODULES and t != m}
    return g


def _find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``g`` (its modules in order, the first repeated at the end), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(g, WHITE)
    for root in sorted(g):
        if colour[root] != WHITE:
            continue
        stack = [(root, iter(sorted(g[root])))]
        path = [root]
        colour[root] = GREY
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                colour[node] = BLACK
                stack.pop()
                path.pop()
            elif colour[nxt] == GREY:
                return path[path.index(nxt):] + [nxt]
            elif colour[nxt] == WHITE:
                colour[nxt] = GREY
                stack.append((nxt, iter(sorted(g[nxt]))))
                path.append(nxt)
    return None


def test_no_module_level_import_cycle():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_cycles():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.parametrize("mod,line,expected", [
    ("graphguard.ir.relation", "from . import fastparse", ["graphguard.ir.fastparse"]),
    ("graphguard.ir.relation", "from .expr import Leaf", ["graphguard.ir.expr"]),
    ("graphguard.ir", "from .ops import OpDef", ["graphguard.ir.ops"]),
    ("lemma_packs.aten.ops", "from graphguard.ir import scalar as S", ["graphguard.ir.scalar"]),
    ("graphguard.engine.labels.provers", "from ..lemma import L", ["graphguard.engine.lemma"]),
])
def test_targets_resolve_relative_imports(mod, line, expected):
    assert _targets(mod, ast.parse(line).body[0]) == expected
