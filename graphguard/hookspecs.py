"""Every extension point of graphguard, in one place.

Plugins are modules that implement some of these hooks with ``@graphguard.hookimpl``. They are found
through two entry-point groups -- ``graphguard.frontends`` and ``graphguard.lemma_packs`` -- exactly the
same way for the built-in ones (``ir`` frontend, ``core`` pack) as for a third party's package::

    [project.entry-points."graphguard.lemma_packs"]
    mypack = "mypack.graphguard_plugin"

A plugin can be disabled by its entry-point name (``graphguard -p no:NAME ...``).
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("graphguard")
hookimpl = pluggy.HookimplMarker("graphguard")


@hookspec
def graphguard_ops() -> list:
    """Operator definitions (:class:`graphguard.ir.ops.OpDef`) this plugin provides: name, typed
    attributes, shape function and NumPy reference. Names are dialect-qualified (``aten.mm``)."""


@hookspec
def graphguard_lemmas() -> list:
    """Lemmas (:class:`graphguard.ir.lemma.Lemma`) over operators known to the registry. Each has a
    numeric reference unique within this pack: the lemma is ``pack:number`` (``core:104``, the pack named by
    its entry point), so two packs may both number a lemma 601. ``graphguard lemmas check`` fuzzes every one."""


@hookspec
def graphguard_lemma_functions() -> dict:
    """Functions this plugin's lemmas call in conditions and right-hand attributes, by name:
    ``{"moves_only_unit_dims": f}`` with ``f(ctx, *args)``; a tensor argument arrives as its binding and
    ``ctx.shape_of(arg)`` reads its shape (symbolic sizes are decided with ``ctx.cx.prove``). A function
    must read only shapes and attribute values (the engine caches results on them) and raise ValueError
    where it does not apply. Names are global: a clash with a built-in or another plugin's is an error."""


@hookspec
def graphguard_frontends() -> list:
    """Graph readers (:class:`graphguard.frontends.Frontend`): turn files of some framework into IR graphs."""


@hookspec
def graphguard_collective_ops() -> dict:
    """Framework custom ops that *are* collectives, by captured target (``vllm.all_reduce.default``):
    ``{"kind": "all_reduce", "attrs": {"op": "sum"}, "group": 1}`` -- the collective kind and attributes the
    fx frontend records (as for ``_c10d_functional.all_reduce``), and the index of the argument holding the
    process-group name; optionally ``"arg_attrs": {"dim": 1}``, attributes read from arguments (by index; a
    negative ``dim`` counts from the end of the input's rank). Tensor argument 0 is the input; the result is
    the collective's output."""


@hookspec
def graphguard_passes() -> list:
    """Graph passes (:class:`graphguard.passes.Pass`) this plugin adds to the pipeline both programs go through
    before proving (``graphguard/passes/__init__.py``: ``PIPELINE``): an alignment pass that moves one dialect's
    program toward another's belongs to the bridge pack between the two. Each names the pass it runs ``after``
    (None: at the end) and its ``requires``, which an earlier pass must ensure (checked when the plugins load);
    it mutates the graph only through :meth:`Graph.rewrite` / ``insert_node`` / ``remove_nodes`` and the program
    is validated again after it."""
