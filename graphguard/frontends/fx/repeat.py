"""A stack of identical layers traced once: ``repeat = "layers"`` in a model file.

Tracing a 126-layer model costs 126 traces of the same layer on every rank. With ``repeat`` naming the
``nn.ModuleList`` of layers (a dotted path from the module ``spec()`` / ``impl()`` returns), capture traces
layer 0 and stands in for layers 1..L-1 with one opaque call each; the converted graph then holds layer 0's
operators again for every later layer, over that layer's own parameters and the previous layer's output.
What makes that copy the layer's graph, and what is checked:

* **the layer's state** (:func:`differences`): layer *i* and layer 0 have the same class, the same submodules
  (names and classes), parameters and buffers of the same names, shapes, dtypes and ``requires_grad`` (DTensors:
  the same mesh and placements), and equal other attributes (plain values compared by value; a tensor kept as
  an attribute must be the very same object); otherwise it is refused, naming what differs;
* **attributes that differ, checked by the graphs** (:func:`compare_graphs`): where a layer differs only in
  attributes that hold no tensor or module (HF's ``layer_idx``, kept for its cache; the ``tp_forward`` closure
  HF's TP plan sets on each projection; a per-layer ``scaling``), that layer is traced alone beside the template
  (``make_fx`` over fake tensors shaped as the template's call received them; with backward, its gradients too)
  and the two graphs compared operator by operator, constants and wiring included, inputs by position: equal,
  the layer is a copy and the certificate names the attributes; different, it is refused, naming them and the
  first operator that differs;
* **its call**: the same non-tensor arguments (values, positions, keyword names) and tensors of the same
  shapes and dtypes as layer 0's call; its output a single tensor shaped like its first tensor argument;
* **layer 0's trace is self-contained**: nothing inside it is read outside it but its output;
* **no sharing**: no two layers hold the same module, parameter or buffer (ALBERT's one layer applied four
  times, a weight tied between layers): a copy gets weights of its own, so the sharing would be lost.

What is not checked: a layer's ``forward`` reading state outside the module and its arguments (a global
counter, ``id(self)``) -- the same assumption TorchDynamo's reuse of a traced region makes for what its
guards do not cover. The certificate lists the layers taken from layer 0's trace. A layer's arguments are plain
tensors (a DTensor argument is refused); its parameters may be DTensors (HF's TP plan), a copy's laid out as the
template's (:func:`copy_layouts`).

**With backward** (:func:`expand_joint`) the template is layer 1, layer 0 traced as it is: the template's
backward must make the gradient of its input, which the model's input may not need. Markers and stand-ins
are then autograd functions: the template's gradients pass through markers too (``mark_bw``: the gradient of
its output in, of its inputs out), and a stand-in's backward is a stand-in (``stub_bw``) taking the layer's
incoming gradient and naming the inputs and parameters whose gradients it makes. Each is replaced by a copy
of what lies between the template's gradient markers, over the stand-in's gradient and the copy's forward
tensors (the template's saved tensors, renamed); a stand-in's gradient of a parameter is the copy of the
template's gradient of the same parameter. Checked besides the above: each later layer's parameters are
shaped like the template's, its inputs need the gradients the template's do, the template's backward makes
its parameters' gradients alone and nothing of it is read outside it but its inputs' gradients.
"""
from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass, replace

from graphguard.errors import InputError

from .convert import Ref, TNode, ref_names

MARK = "graphguard_repeat.mark.default"
STUB = "graphguard_repeat.stub.default"
MARK_BW = "graphguard_repeat.mark_bw.default"  # (backward) the gradients through a marker
STUB_BW = "graphguard_repeat.stub_bw.default"  # (backward) the input gradients a later layer's backward makes
_OPS: dict = {}


@dataclass
class Repeat:
    path: str  # dotted path of the layer list
    layers: int  # how many layers it holds (layer 0 traced, the others stood in for)
    modules: tuple = ()  # the layers whose forward install() replaced (restore() puts theirs back)
    template: int = 0  # the layer traced and copied (layers before it are traced as they are)
    backward: bool = False  # stand-ins with a backward (see install)
    params: tuple = ()  # the template's parameters, in the order a stand-in receives a layer's
    # layers that differ from the template in plain attribute values only: layer -> [(attribute, its value, the
    # template's)]; each is traced beside the template after capture (compare_graphs) or refused
    pending: dict = None
    ref: object = None  # (with pending) the template layer
    calls: list = None  # the template's calls as traced: (args, kwargs) with _SLOT for each tensor, [(shape, dtype)]
    compared: tuple = ()  # after compare_graphs: the attributes that differed, 'self_attn.layer_idx (layers 1-3)'
    copied: dict = None  # after expand: a copy's parameter (public name) -> the template's it is laid out like

    def restore(self) -> None:
        """The layers' own forwards again (the model is the user's after capture)."""
        for m in self.modules:
            m.__dict__.pop("forward", None)
        self.modules = ()


def _ops():
    """The marker around layer 0's call and the stand-in for a later layer (defined once per process; plain
    library operators: cheaper to trace than ``torch.library.custom_op``'s wrappers, 124 times per rank)."""
    if _OPS:
        return _OPS["mark"], _OPS["stub"]
    import torch
    lib = torch.library.Library("graphguard_repeat", "DEF")
    lib.define("mark(Tensor[] xs, int tag, str key) -> Tensor[]")
    lib.define("stub(Tensor[] xs, int index, str key) -> Tensor")
    lib.impl("mark", lambda xs, tag, key: [x.clone() for x in xs], "CompositeExplicitAutograd")
    # (the captured graph runs once after capture: a stand-in's value is not read)
    lib.impl("stub", lambda xs, index, key: torch.zeros_like(xs[0]), "CompositeExplicitAutograd")
    torch.library.register_fake("graphguard_repeat::mark", lambda xs, tag, key: [torch.empty_like(x) for x in xs],
                                lib=lib)
    torch.library.register_fake("graphguard_repeat::stub", lambda xs, index, key: torch.empty_like(xs[0]), lib=lib)
    # backward: markers whose gradients are markers again, and a stand-in with a stand-in backward
    lib.define("mark_bw(Tensor[] gs, int[] which, int tag, str key) -> Tensor[]")
    lib.define("stub_bw(Tensor g, Tensor[] ts, int[] which, int index, str key) -> Tensor[]")
    lib.impl("mark_bw", lambda gs, which, tag, key: [g.clone() for g in gs], "CompositeExplicitAutograd")
    lib.impl("stub_bw", lambda g, ts, which, index, key: [torch.zeros_like(t) for t in ts],
             "CompositeExplicitAutograd")
    torch.library.register_fake("graphguard_repeat::mark_bw",
                                lambda gs, which, tag, key: [torch.empty_like(g) for g in gs], lib=lib)
    torch.library.register_fake("graphguard_repeat::stub_bw",
                                lambda g, ts, which, index, key: [torch.empty_like(t) for t in ts], lib=lib)
    ops = torch.ops.graphguard_repeat
    _OPS.update(lib=lib, mark=ops.mark.default, stub=ops.stub.default, mark_bw=ops.mark_bw.default,
                stub_bw=ops.stub_bw.default)
    _autograd()  # (at once: an operator first traced without its formula keeps tracing without it)
    return _OPS["mark"], _OPS["stub"]


def _autograd():
    """Autograd formulas for the markers and the backward stand-in (backward): a marker's gradient passes
    through ``mark_bw`` (so the template layer's backward is delimited too), a stand-in's through ``stub_bw``,
    which names the stand-in's inputs whose gradients it makes. (Formulas of the operators, not
    ``autograd.Function``s: TorchDynamo traces an operator call as one node, a Function's forward and backward
    each time -- a quarter of a second per layer and rank. The stand-in takes no parameters, as forward only:
    each one TorchDynamo lifts to a graph input costs ~1 ms; the copies' parameters are made by expand_joint.)"""
    import torch

    def mark_setup(ctx, inputs, output):
        ctx.tag, ctx.key = inputs[1], inputs[2]

    def mark_backward(ctx, gs):
        need = ctx.needs_input_grad[0]
        which = [k for k, n in enumerate(need) if n]
        got = iter(_OPS["mark_bw"]([gs[k] for k in which], which, ctx.tag, ctx.key))
        return [next(got) if n else None for n in need], None, None

    def stub_setup(ctx, inputs, output):
        xs, index, key = inputs
        ctx.save_for_backward(*xs)
        ctx.index, ctx.key = index, key

    def stub_backward(ctx, g):
        xs = ctx.saved_tensors
        need = ctx.needs_input_grad[0]
        which = [k for k, n in enumerate(need) if n]
        got = iter(_OPS["stub_bw"](g, [xs[k] for k in which], which, ctx.index, ctx.key))
        return [next(got) if n else None for n in need], None, None

    torch.library.register_autograd("graphguard_repeat::mark", mark_backward, setup_context=mark_setup,
                                    lib=_OPS["lib"])
    torch.library.register_autograd("graphguard_repeat::stub", stub_backward, setup_context=stub_setup,
                                    lib=_OPS["lib"])


def _resolve(module, path: str, where: str):
    import torch
    obj = module
    for part in path.split("."):
        nxt = getattr(obj, part, None)
        if nxt is None and isinstance(obj, (torch.nn.ModuleList, torch.nn.Sequential)) and part.isdigit():
            nxt = obj[int(part)]
        if nxt is None:
            raise InputError(f"{where}: repeat = '{path}': {type(obj).__name__} has no '{part}'")
        obj = nxt
    if not isinstance(obj, (torch.nn.ModuleList, torch.nn.Sequential)):
        raise InputError(f"{where}: repeat = '{path}' names a {type(obj).__name__}, not an nn.ModuleList of layers")
    return obj


_PLAIN = (int, float, str, bool, type(None), complex, bytes, enum.Enum)


def _same(a, b) -> bool:
    import torch
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (_PLAIN, torch.dtype, torch.device)):
        return a == b
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (set, frozenset)):
        return all(isinstance(x, _PLAIN) for x in a | b) and a == b
    return False  # anything else must be the same object (configs, functions, tensors held as attributes)


def differs(ref, other) -> str | None:
    """Why ``other`` is not ``ref``'s twin (None: it is): see the module docstring."""
    hard, soft = differences(ref, other)
    return hard if hard is not None else (_says(soft[0]) if soft else None)


def _says(d) -> str:
    at, k, b, a = d
    return f"{at}.{k} is {_short(b)}, not {_short(a)}"


def differences(ref, other) -> tuple[str | None, list]:
    """Why ``other`` is not ``ref``'s twin in structure (None: it is), and the attributes whose plain values
    (numbers, strings, tuples of them...) differ: ``[(module, attribute, other's value, ref's)]`` -- a
    ``layer_idx`` HF keeps for its cache, a ``scaling``, a sliding window. Those the traced graphs decide
    (:func:`compare_graphs`); any other difference is a refusal."""
    import torch
    mods_a, mods_b = dict(ref.named_modules()), dict(other.named_modules())
    if list(mods_a) != list(mods_b):
        return f"its submodules are {sorted(set(mods_b) ^ set(mods_a))[:3]} apart", []
    soft = []
    for name, a in mods_a.items():
        b = mods_b[name]
        at = f"'{name}'" if name else "the layer"
        if type(a) is not type(b):
            return f"{at} is a {type(b).__name__}, not a {type(a).__name__}", []
        for kind in ("_parameters", "_buffers"):
            ta, tb = a.__dict__[kind], b.__dict__[kind]
            if list(ta) != list(tb):
                return f"{at} has {kind[1:]} {list(tb)}, not {list(ta)}", []
            for k, x in ta.items():
                y = tb[k]
                if (x is None) != (y is None):
                    return f"{at}.{k} is {'None' if y is None else 'set'} here only", []
                if x is None:
                    continue
                why = _tensor_differs(x, y)
                if why:
                    return f"{at}.{k} is {why}", []
        da = {k: v for k, v in a.__dict__.items() if k not in ("_parameters", "_buffers", "_modules")}
        db = {k: v for k, v in b.__dict__.items() if k not in ("_parameters", "_buffers", "_modules")}
        if list(da) != list(db):
            return f"{at} has attributes {sorted(set(da) ^ set(db))[:3]} that the other has not", []
        for k in da:
            if _same(da[k], db[k]):
                continue
            if _plain(da[k]) and _plain(db[k]):
                soft.append((at, k, db[k], da[k]))
                continue
            return _says((at, k, db[k], da[k])), []
    return None, soft


def _tensor_differs(x, y) -> str | None:
    """A parameter or buffer of another kind, shape, dtype or ``requires_grad`` (None: alike). Plain tensors,
    or DTensors of the same mesh and placements (HF's plan shards each layer alike)."""
    import torch
    dt = _dtensor_type()
    if type(x) is not type(y) or not (type(x) in (torch.Tensor, torch.nn.Parameter)
                                       or isinstance(x, torch.nn.Buffer) or (dt is not None and type(x) is dt)):
        return f"a {type(y).__name__} (plain tensors or DTensors only)"
    if (tuple(x.shape), x.dtype, x.requires_grad) != (tuple(y.shape), y.dtype, y.requires_grad):
        return (f"{y.dtype} {list(y.shape)} (requires_grad {y.requires_grad}), not "
                f"{x.dtype} {list(x.shape)}")
    if dt is not None and type(x) is dt and (x.device_mesh != y.device_mesh or x.placements != y.placements):
        return f"a DTensor placed {y.placements} on {y.device_mesh}, not {x.placements} on {x.device_mesh}"
    return None


def _dtensor_type():
    try:
        from torch.distributed.tensor import DTensor
        return DTensor
    except Exception:  # (a torch without torch.distributed)
        return None


def _plain(v) -> bool:
    """Not a tensor, nor a module, nor a container of one: a number, a string, a function set on the instance
    (HF's tensor-parallel ``tp_forward``, a closure over its own module)... -- what the traced graphs of the
    two layers decide (a tensor held as an attribute must be the very same object in every layer)."""
    import torch
    if isinstance(v, (torch.Tensor, torch.nn.Module)):
        return False
    if isinstance(v, (tuple, list, set, frozenset)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(_plain(k) and _plain(x) for k, x in v.items())
    return True


def _short(v) -> str:
    t = repr(v)
    return t if len(t) <= 40 else type(v).__name__


def _call_key(leaves) -> str:
    """The non-tensor arguments of a call, as text (traced by TorchDynamo: constants only)."""
    import torch
    return "|".join("T" if isinstance(x, torch.Tensor) else f"{type(x).__name__}:{x!r}" for x in leaves)


def install(module, path: str, where: str, backward: bool = False) -> Repeat | None:
    """Check the layers at ``path`` (see :func:`differs`) and replace their forwards: the template layer's
    call is marked, every later layer's is the stand-in. None where there is nothing to stand in for.

    Forward only, the template is layer 0. With ``backward`` it is layer 1 (layer 0 is traced as it is): the
    template's backward must make the gradient of its input, which layer 0's input (the model's) may not need;
    markers and stand-ins are then autograd functions whose backward is a marker or a stand-in again."""
    import torch
    from torch.utils import _pytree as pytree
    layers = _resolve(module, path, where)
    first_i = 1 if backward else 0
    if len(layers) < first_i + 2:
        return None
    ref = layers[first_i]
    owner: dict[int, tuple[int, str]] = {}  # a module, parameter or buffer -> the first layer holding it
    for i, layer in enumerate(layers):
        held = [(n, m) for n, m in layer.named_modules(remove_duplicate=False)]
        held += list(layer.named_parameters(remove_duplicate=False)) + list(layer.named_buffers(remove_duplicate=False))
        for name, obj in held:
            j, first = owner.setdefault(id(obj), (i, name))
            if j != i:  # (a copy of the template would get weights of its own: the sharing would be lost)
                what = f"layer {i} is layer {j}" if not name and not first else \
                    f"layer {i}'s {name or 'module'} is layer {j}'s {first or 'module'}"
                raise InputError(f"{where}: repeat = '{path}': {what} (layers that share modules or weights are "
                                 f"traced as they are: leave repeat out)")
    if any("forward" in m.__dict__ for m in layers):
        raise InputError(f"{where}: repeat = '{path}': a layer's forward is set on the instance; leave repeat out")
    pending = {}
    for i in range(first_i + 1, len(layers)):
        why, soft = differences(ref, layers[i])
        if why is not None:
            raise InputError(f"{where}: repeat = '{path}': layer {i} is not a copy of layer {first_i}: {why} (each "
                             f"layer is then traced: leave repeat out)")
        if soft:  # (plain values: the graphs traced after capture decide, compare_graphs)
            pending[i] = soft
    mark, stub = _ops()
    orig = ref.forward
    calls: list = []  # the template's calls, recorded while TorchDynamo traces (a side effect it replays)

    def split(args, kwargs):
        leaves, spec = pytree.tree_flatten((args, kwargs))
        for x in leaves:
            if isinstance(x, torch.Tensor) and type(x) is not torch.Tensor and not isinstance(x, torch.nn.Parameter):
                raise TypeError(f"graphguard repeat: the layers of '{path}' receive a {type(x).__name__}; "
                                f"only plain tensors are supported")
        return leaves, spec, [x for x in leaves if isinstance(x, torch.Tensor)], _call_key(leaves)

    def first(*args, **kwargs):
        leaves, spec, tensors, key = split(args, kwargs)
        if pending:  # how it is called, for tracing the differing layers like it (tensors by shape and dtype)
            calls.append((pytree.tree_map(lambda x: _SLOT if isinstance(x, torch.Tensor) else x, (args, kwargs)),
                          [(tuple(x.shape), x.dtype) for x in tensors]))
        it = iter(mark(tensors, 1, key))
        a, k = pytree.tree_unflatten([next(it) if isinstance(x, torch.Tensor) else x for x in leaves], spec)
        out = orig(*a, **k)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"graphguard repeat: a layer of '{path}' returns {type(out).__name__}; only layers "
                            f"returning one tensor are supported")
        return mark([out], 2, key)[0]

    keys = ["|".join(["T"] * k) for k in range(16)]

    def later(i, *args, **kwargs):
        if not kwargs and len(args) < 16:  # (the common call, cheap to trace: tensors only, by position)
            plain = True
            for a in args:
                plain = plain and type(a) is torch.Tensor
            if plain:
                return stub(list(args), i, keys[len(args)])
        _, _, tensors, key = split(args, kwargs)
        if not tensors:
            raise TypeError(f"graphguard repeat: layer {i} of '{path}' receives no tensor")
        return stub(tensors, i, key)

    ref.forward = first
    for i in range(first_i + 1, len(layers)):
        layers[i].forward = functools.partial(later, i)
    return Repeat(path, len(layers), tuple(layers), first_i, backward,
                  tuple(n for n, _ in ref.named_parameters()),
                  {i: (layers[i], soft) for i, soft in pending.items()} if pending else None, ref if pending else None,
                  calls)


_SLOT = "graphguard_repeat.tensor"  # (where the template's call passed a tensor: a constant TorchDynamo keeps)


def compare_graphs(rep: Repeat, where: str) -> None:
    """Each layer that differs from the template only in plain attribute values (:func:`differences`) is
    traced beside the template -- ``make_fx`` over fake tensors shaped as the template's call received them,
    its parameters and buffers as the traced function's inputs, forward (and with backward, the gradients of
    its inputs and parameters) -- and the two graphs compared (:func:`same_graph`): equal, the attributes are
    bookkeeping the computation does not read (HF's ``layer_idx``) and ``rep.compared`` says which; otherwise
    the layer is refused as before, naming the attribute and the first operator that differs."""
    from torch.utils import _pytree as pytree
    pending, calls, ref = rep.pending, rep.calls, rep.ref
    rep.pending, rep.calls, rep.ref = None, None, None  # (plain data from here on: it travels between processes)
    if not pending:
        return
    tpl = rep.template
    call = calls[0] if calls else None
    if call is None or any(repr(c) != repr(call) for c in calls[1:]) or \
            sum(isinstance(x, str) and x == _SLOT for x in pytree.tree_leaves(call[0])) != len(call[1]):
        i, (_, soft) = next(iter(pending.items()))
        raise InputError(f"{where}: repeat = '{rep.path}': layer {i} is not a copy of layer {tpl}: "
                         f"{_says(soft[0])} and layer {tpl}'s call was not recorded once to compare their "
                         f"graphs (each layer is then traced: leave repeat out)")
    base = _trace_layer(ref, call, rep.backward, where, rep.path, tpl)
    seen: dict = {}
    for i, (layer, soft) in sorted(pending.items()):
        got = _trace_layer(layer, call, rep.backward, where, rep.path, i, soft)
        diff = same_graph(base, got)
        if diff is not None:
            raise InputError(f"{where}: repeat = '{rep.path}': layer {i} is not a copy of layer {tpl}: "
                             f"{'; '.join(_says(d) for d in soft)} and its traced graph differs from layer {tpl}'s "
                             f"({diff}) (each layer is then traced: leave repeat out)")
        for at, k, _, _ in soft:
            seen.setdefault(k if at == "the layer" else f"{at[1:-1]}.{k}", []).append(i)
    rep.compared = tuple(f"{name} ({_spans(idx)})" for name, idx in seen.items())


def _spans(idx: list[int]) -> str:
    out, start = [], idx[0]
    for a, b in zip(idx, idx[1:] + [None]):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return "layers " + ", ".join(out)


def _trace_layer(layer, call, backward: bool, where: str, path: str, i: int, soft=()):
    """``layer``'s graph (torch.fx, ATen operators) called as ``call`` records over fake tensors."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils import _pytree as pytree
    structure, shapes = call
    state = {**dict(layer.named_parameters()), **dict(layer.named_buffers())}
    names = list(state)
    n_params = len(dict(layer.named_parameters()))

    dt = _dtensor_type()
    # a DTensor parameter enters as its local tensor, made a DTensor again inside (its mesh and placements are
    # the template's, differences() checked): so its operators read the input, not a constant of this layer
    wrap = [(v.device_mesh, v.placements, v.shape, v.stride()) if dt is not None and isinstance(v, dt) else None
            for v in state.values()]

    def run(values, tensors):
        it = iter(tensors)
        args, kwargs = pytree.tree_map(lambda x: next(it) if isinstance(x, str) and x == _SLOT else x, structure)
        full = [v if w is None else dt.from_local(v, w[0], w[1], run_check=False, shape=w[2], stride=w[3])
                for v, w in zip(values, wrap)]
        out = torch.func.functional_call(layer, dict(zip(names, full)), args, kwargs)
        if not backward:
            return out
        wrt = [t for t in list(tensors) + list(values[:n_params]) if t.requires_grad]
        grads = torch.autograd.grad(out, wrt, torch.ones_like(out), allow_unused=True)
        return out, [g for g in grads if g is not None]

    tensors = [torch.empty(s, dtype=d) for s, d in shapes]
    if backward:
        tensors = [t.requires_grad_() if t.is_floating_point() else t for t in tensors]
    values = [(v.to_local() if w is not None else v).detach() for v, w in zip(state.values(), wrap)]
    if backward:
        values = [x.requires_grad_(v.requires_grad) for x, v in zip(values, state.values())]
    try:
        with torch.no_grad() if not backward else torch.enable_grad():
            return make_fx(run, tracing_mode="fake")(values, tensors)
    except Exception as e:
        what = f"{_says(soft[0])}; " if soft else ""
        raise InputError(f"{where}: repeat = '{path}': layer {i}: {what}tracing it alone to compare its graph with "
                         f"the template's failed ({type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]})"
                         f" (each layer is then traced: leave repeat out)") from None


def same_graph(a, b) -> str | None:
    """Where two traced graphs differ (None: the same operators with the same constant arguments over the same
    inputs, node for node; inputs matched by position, so parameter names do not matter); a tensor constant
    compares by value, a fake one never equal."""
    import torch
    na, nb = list(a.graph.nodes), list(b.graph.nodes)
    if len(na) != len(nb):
        return f"{len(nb)} nodes, not {len(na)}"
    pos = {}
    for k, (x, y) in enumerate(zip(na, nb)):
        pos[x] = pos[y] = k
        if (x.op, x.target if x.op != "placeholder" else None) != (y.op, y.target if y.op != "placeholder" else None):
            return f"node {k}: {y.op} {y.target}, not {x.op} {x.target}"
        if x.op == "get_attr":
            ta, tb = getattr(a, x.target, None), getattr(b, y.target, None)
            if isinstance(ta, torch.ScriptObject) or isinstance(tb, torch.ScriptObject):
                if not _same_script(ta, tb):
                    return f"node {k}: the object {y.target} is not the template's"
                continue
            if not (isinstance(ta, torch.Tensor) and isinstance(tb, torch.Tensor) and not _is_fake(ta)
                    and not _is_fake(tb) and ta.dtype == tb.dtype and ta.shape == tb.shape and torch.equal(ta, tb)):
                return f"node {k}: the constant {y.target} is not the template's"
            continue
        va, vb = x.meta.get("val"), y.meta.get("val")
        if x.op == "placeholder" and _meta(va) != _meta(vb):
            return f"input {k}: {_meta(vb)}, not {_meta(va)}"
        if not _same_arg((x.args, x.kwargs), (y.args, y.kwargs), pos):
            return f"node {k} ({x.target}): arguments {_short(y.args)}, not {_short(x.args)}"
    return None


def _same_script(a, b) -> bool:
    """A process group (the very same) or a reduction (the same kind; not a pre-multiplied sum, whose factor
    is not readable) that an in-place collective of torch.distributed passes (HF's row-wise all-reduce)."""
    import torch
    if not (isinstance(a, torch.ScriptObject) and isinstance(b, torch.ScriptObject)):
        return False
    kind = a._type().qualified_name()
    if kind != b._type().qualified_name():
        return False
    if kind.endswith("c10d.ProcessGroup"):
        from torch.distributed import ProcessGroup
        return ProcessGroup.unbox(a) is ProcessGroup.unbox(b)
    if kind.endswith("c10d.ReduceOp"):
        from torch.distributed import ReduceOp
        return a.op() == b.op() and a.op() != int(ReduceOp.RedOpType.PREMUL_SUM)
    return False


def _meta(v):
    import torch
    if isinstance(v, torch.Tensor):
        return (tuple(v.shape), v.dtype, v.requires_grad)
    return repr(v)


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def _same_arg(x, y, pos) -> bool:
    import torch
    if isinstance(x, torch.fx.Node) or isinstance(y, torch.fx.Node):
        return isinstance(x, torch.fx.Node) and isinstance(y, torch.fx.Node) and pos.get(x) == pos.get(y) \
            and pos.get(x) is not None
    if type(x) is not type(y):
        return False
    if isinstance(x, (tuple, list)):
        return len(x) == len(y) and all(_same_arg(p, q, pos) for p, q in zip(x, y))
    if isinstance(x, dict):
        return list(x) == list(y) and all(_same_arg(x[k], y[k], pos) for k in x)
    if isinstance(x, float) and x != x:
        return y != y
    if isinstance(x, torch.Tensor):
        return False  # (a tensor in the arguments, not a node: not compared, so not the same)
    return x == y


def _layer_module(module: str | None, path: str, i: int, template: int = 0) -> str | None:
    """The template layer's module path as layer ``i``'s: ``model.layers.0.mlp`` -> ``model.layers.7.mlp``."""
    if module is None:
        return None
    return re.sub(rf"(^|\.){re.escape(path)}\.{template}(\.|$)", rf"\g<1>{path}.{i}\g<2>", module, count=1)


def _rename(a, m: dict):
    if type(a) is Ref:
        return Ref(m.get(a.name, a.name))
    if isinstance(a, (list, tuple)):  # (torch.fx's immutable_list too)
        return type(a)([_rename(x, m) for x in a])
    if isinstance(a, dict):
        return {k: _rename(v, m) for k, v in a.items()}
    return a


def expand(nodes: list[TNode], input_names: dict[str, str], rep: Repeat, source: str) -> list[TNode]:
    """``nodes`` (one rank's forward) with layer 0's markers removed and each stand-in replaced by a copy
    of layer 0's operators: over layer *i*'s parameters (new inputs, named like layer 0's with its index)
    and the stand-in's tensor arguments. ``input_names`` gains the new inputs."""
    compare_graphs(rep, source)
    where = f"{source}: repeat = '{rep.path}'"
    by = {t.name: t for t in nodes}
    marks = [t for t in nodes if t.target == MARK]
    if sorted(t.args[1] for t in marks) != [1, 2]:
        raise InputError(f"{where}: layer 0 is called {sum(t.args[1] == 1 for t in marks)} times; a stack whose "
                         f"layers are each called once can be traced once")
    begin, end = sorted(marks, key=lambda t: t.args[1])
    stubs = [t.args[1] for t in nodes if t.target == STUB]
    if len(stubs) != len(set(stubs)):
        raise InputError(f"{where}: a layer is called more than once; a stack whose layers are each called once "
                         f"can be traced once")
    if begin.args[2] != end.args[2]:
        raise InputError(f"{where}: layer 0's markers disagree")
    key = begin.args[2]
    ins = list(begin.args[0])
    (out_ref,) = end.args[0]
    items = {t.name: t for t in nodes if t.target == "getitem" and t.args and isinstance(t.args[0], Ref)
             and t.args[0].name in (begin.name, end.name)}
    arg_of = {n: ins[t.args[1]] for n, t in items.items() if t.args[0].name == begin.name}  # getitem -> input
    end_items = [n for n, t in items.items() if t.args[0].name == end.name]
    prefix = f"{rep.path}.0."
    params = {t.name: input_names[t.name][len(prefix):] for t in nodes
              if t.op == "placeholder" and input_names.get(t.name, "").startswith(prefix)}
    # layer 0's body: what depends on its marked inputs or its parameters, and feeds its output
    inside = set(arg_of) | set(params)
    for t in nodes:
        if t.op == "call_function" and t.name not in inside and t is not end \
                and set(ref_names((t.args, t.kwargs))) & inside:
            inside.add(t.name)
    feeds = _reach(by, [out_ref.name])
    body = [t for t in nodes if t.name in inside and t.name in feeds and t.op == "call_function"
            and t.name not in arg_of]
    if any(t.target in (MARK, STUB) for t in body):
        raise InputError(f"{where}: layer 0 calls another layer of the stack; only layers called one after "
                         f"another can be traced once")
    for t in nodes:  # nothing of layer 0 but its output is read after it
        if t is end or t.name in inside:
            continue
        leak = set(ref_names((t.args, t.kwargs))) & (inside - set(params))
        if leak:
            raise InputError(f"{where}: layer 0's value {sorted(leak)[0]} is read outside the layer "
                             f"({t.name}); only a layer whose output is all it passes on can stand for others")
    out = []
    rename: dict[str, str] = {n: out_ref.name for n in end_items}
    for n, src in arg_of.items():
        rename[n] = src.name
    for t in nodes:
        if t is begin or t is end or t.name in items:
            continue
        if t.target != STUB:
            if any(r in rename for r in ref_names((t.args, t.kwargs))):
                t = replace(t, args=_rename(t.args, rename), kwargs=_rename(t.kwargs, rename))
            out.append(t)
            continue
        xs, i, k = t.args
        _check_call(where, i, k, key, xs, ins, t, by[out_ref.name], by, "layer 0")
        m = {g: rename.get(xs[items[g].args[1]].name, xs[items[g].args[1]].name) for g in arg_of}
        out += _layer_params(rep, i, params, by, m, input_names)
        for b in body:  # (what a body node reads is in the body, layer 0's inputs, or before the layer)
            m[b.name] = f"{rep.path}.{i}.{b.name}"
            out.append(_copy(b, m, rep, i))
        rename[t.name] = m[out_ref.name] if out_ref.name in m else rename.get(out_ref.name, out_ref.name)
    return out


def _reach(by: dict, roots) -> set:
    """The names ``roots`` are computed from (themselves included)."""
    seen, todo = set(), list(roots)
    while todo:
        n = todo.pop()
        if n in seen or n not in by:
            continue
        seen.add(n)
        todo.extend(ref_names((by[n].args, by[n].kwargs)))
    return seen


def expand_joint(nodes: list[TNode], n_fw: int, outs: list, out_names: list, input_names: dict[str, str],
                 rep: Repeat, source: str) -> tuple[list[TNode], list]:
    """Forward and backward (the joined graph: ``nodes[:n_fw]`` the forward, then the saved tensors as
    ``aten.alias`` nodes and the backward) with every stand-in replaced by a copy of the template layer's
    operators: its forward over the stand-in's inputs and parameters, its backward -- what lies between the
    gradient markers -- over the stand-in's incoming gradient and the copy's forward tensors. Each of the
    stand-in's gradients becomes the copy of the template's: of an input (the template's input marker's
    gradient) or of a parameter (the template's gradient output of the same parameter)."""
    compare_graphs(rep, source)
    where = f"{source}: repeat = '{rep.path}'"
    tpl = rep.template
    by = {t.name: t for t in nodes}
    fw, bw = nodes[:n_fw], nodes[n_fw:]
    marks = sorted((t for t in fw if t.target == MARK), key=lambda t: t.args[1])
    bmarks = sorted((t for t in bw if t.target == MARK_BW), key=lambda t: t.args[2])
    if [t.args[1] for t in marks] != [1, 2] or [t.args[2] for t in bmarks] != [1, 2]:
        raise InputError(f"{where}: layer {tpl} is not called once with a gradient through it (markers "
                         f"{[t.args[1] for t in marks]}, gradient markers {[t.args[2] for t in bmarks]}); a stack "
                         f"whose layers are each called once, in training, can be traced once")
    begin, end = marks
    bend, bbegin = bmarks
    for kind, k in ((STUB, 1), (STUB_BW, 3)):
        called = [t.args[k] for t in nodes if t.target == kind]
        if len(called) != len(set(called)):
            raise InputError(f"{where}: a layer is called more than once; a stack whose layers are each called once "
                             f"can be traced once")
    key = begin.args[2]
    if {end.args[2], bend.args[3], bbegin.args[3]} != {key}:
        raise InputError(f"{where}: layer {tpl}'s markers disagree")
    ins = list(begin.args[0])
    (out_ref,) = end.args[0]
    items = {t.name: t for t in nodes if t.target == "getitem" and t.args and isinstance(t.args[0], Ref)
             and t.args[0].name in (begin.name, end.name, bbegin.name, bend.name)}
    of = {n: t.args[0].name for n, t in items.items()}
    arg_of = {n: ins[items[n].args[1]].name for n in items if of[n] == begin.name}  # getitem -> input
    rename: dict[str, str] = _Chain({n: out_ref.name for n in items if of[n] == end.name})
    rename.update(arg_of)
    rename.update({n: bbegin.args[0][0].name for n in items if of[n] == bbegin.name})
    rename.update({n: bend.args[0][items[n].args[1]].name for n in items if of[n] == bend.name})
    prefix = f"{rep.path}.{tpl}."
    param_ph = {input_names[t.name][len(prefix):]: t.name for t in fw
                if t.op == "placeholder" and input_names.get(t.name, "").startswith(prefix)}
    if sorted(param_ph) != sorted(rep.params):
        raise InputError(f"{where}: layer {tpl}'s parameters are not all inputs of the captured graph")
    grad_out = {}  # the template's parameter -> its gradient (an output)
    for name, ref in zip(out_names, outs):
        if name.startswith("grad." + prefix) and isinstance(ref, Ref):
            grad_out[name[len("grad." + prefix):]] = ref.name
    # the template's forward: what depends on its marked inputs or its parameters
    inside = set(arg_of) | set(param_ph.values())
    for t in fw:
        if t.op == "call_function" and t is not end and t.name not in items and t.name not in inside \
                and set(ref_names((t.args, t.kwargs))) & inside:
            inside.add(t.name)
    alias_src = {t.name: t.args[0].name for t in bw if t.target == "aten.alias.default"}
    # ... and its backward: what depends on the gradient of its output or on its forward's saved tensors
    saved_in = {a for a, src in alias_src.items() if rename.get(src, src) in inside or src in items
                and of[src] in (begin.name, end.name)}
    binside = {n for n in items if of[n] == bbegin.name} | saved_in
    for t in bw:  # (a later layer's stand-in reads the template's output, saved: not the template's backward)
        if t.op == "call_function" and t.target != STUB_BW and t is not bend and t.name not in items \
                and t.name not in binside and set(ref_names((t.args, t.kwargs))) & binside:
            binside.add(t.name)
    missing = [p for p in rep.params if p not in grad_out or grad_out[p] not in binside]
    if missing:
        raise InputError(f"{where}: the gradient of layer {tpl}'s parameter '{missing[0]}' is not made by its "
                         f"backward alone")
    bfeeds = _reach(by, [r.name for r in bend.args[0]] + [grad_out[p] for p in rep.params])
    bbody = [t for t in bw if t.name in binside and t.name in bfeeds and t.name not in items]
    saved = [alias_src[t.name] for t in bbody if t.name in alias_src]
    feeds = _reach(by, [out_ref.name] + [rename.get(s, s) for s in saved])
    body = [t for t in fw if t.name in inside and t.name in feeds and t.op == "call_function"
            and t.name not in arg_of]
    if any(t.target in (MARK, STUB) for t in body):
        raise InputError(f"{where}: layer {tpl} calls another layer of the stack; only layers called one after "
                         f"another can be traced once")
    # nothing of the template but its output (forward) and its gradients (backward) is read outside it
    own = (inside - set(param_ph.values())) | set(arg_of)
    bown = {t.name for t in bbody if t.name not in alias_src}
    for t in nodes:
        if t in (end, bend) or t.name in inside or t.name in bown or t.name in items:
            continue
        refs = set(ref_names((t.args, t.kwargs)))
        leak = refs & (own if t.name not in alias_src else set()) or refs & bown
        if leak:
            raise InputError(f"{where}: layer {tpl}'s value {sorted(leak)[0]} is read outside the layer "
                             f"({t.name}); only a layer whose output is all it passes on can stand for others")
    for name, ref in zip(out_names, outs):
        if isinstance(ref, Ref) and ref.name in bown and not name.startswith("grad." + prefix):
            raise InputError(f"{where}: output {name} is a value of layer {tpl}'s backward")
    drop = {begin.name, end.name, bbegin.name, bend.name} | set(items)
    copies: dict[int, dict] = {}  # layer -> template name -> the copy's
    n_in: dict[int, int] = {}
    out: list[TNode] = []
    grads: list[tuple[int, str, Ref]] = []  # the copies' parameter gradients (outputs)
    for t in nodes:
        if t.name in drop:
            continue
        if t.target == STUB:
            xs, i, k = t.args
            _check_call(where, i, k, key, xs, ins, t, by[out_ref.name], by, "the template")
            m = {g: rename.get(xs[items[g].args[1]].name, xs[items[g].args[1]].name) for g in arg_of}
            out += _layer_params(rep, i, {param_ph[p]: p for p in rep.params}, by, m, input_names)
            for b in body:
                m[b.name] = f"{rep.path}.{i}.{b.name}"
                out.append(_copy(b, m, rep, i))
            copies[i], n_in[i] = m, len(xs)
            rename[t.name] = m.get(out_ref.name, rename.get(out_ref.name, out_ref.name))
            continue
        if t.target == STUB_BW:
            g, ts, which, i, k = t.args
            if i not in copies or k != key:
                raise InputError(f"{where}: layer {i}'s backward does not follow its forward")
            m = dict(copies[i])
            m.update({n: rename.get(g.name, g.name) for n in items if of[n] == bbegin.name})
            for b in bbody:
                if b.name in alias_src:  # a saved tensor of the template: the copy's
                    src = alias_src[b.name]
                    if src not in m:
                        src = rename.get(src, src)
                    m[b.name] = m.get(src, src)
                    continue
                m[b.name] = f"{rep.path}.{i}.{b.name}"
                out.append(_copy(b, m, rep, i))
            made = []
            for w in which:
                hit = [p for p, x in enumerate(bend.args[1]) if x == w]
                if not hit:
                    raise InputError(f"{where}: layer {i}'s input {w} needs a gradient, layer {tpl}'s does not")
                src = bend.args[0][hit[0]].name
                made.append(m.get(src, rename.get(src, src)))
            for p in rep.params:
                if p in grad_out:
                    grads.append((i, f"grad.{rep.path}.{i}.{p}", Ref(m.get(grad_out[p], grad_out[p]))))
            for n, u in by.items():
                if u.target == "getitem" and u.args and isinstance(u.args[0], Ref) and u.args[0].name == t.name:
                    rename[n] = made[u.args[1]]
                    drop.add(n)
            continue
        if any(r in rename for r in ref_names((t.args, t.kwargs))):
            t = replace(t, args=_rename(t.args, rename), kwargs=_rename(t.kwargs, rename))
        out.append(t)
    outs = _rename(list(outs), rename)
    # the copies' parameter gradients, in layer order after the template's (where a traced layer's would be)
    at = max((k for k, n in enumerate(out_names) if n.startswith("grad." + prefix)), default=len(outs) - 1) + 1
    grads.sort(key=lambda g: g[0])  # (a stand-in's backward runs after the later layers')
    out_names[at:at] = [n for _, n, _ in grads]
    outs[at:at] = [r for _, _, r in grads]
    # the saved tensors only a stand-in's backward read (its inputs) are read no more
    used = set(ref_names(outs))
    for t in out:
        used.update(ref_names((t.args, t.kwargs)))
    out = [t for t in out if t.name in used or t.target != "aten.alias.default"]
    return out, outs


class _Chain(dict):
    """Renames that may rename a name renamed to (a marker's gradient is a stand-in's, itself a copy's)."""

    def get(self, k, default=None):
        seen = 0
        while k in self and seen < 1000:
            k, seen = self[k], seen + 1
        return k if seen else default


def _check_call(where, i, k, key, xs, ins, t, out_node, by, tpl: str) -> None:
    """Stand-in ``t`` of layer ``i`` is called like the template ``tpl`` (its non-tensor arguments, its tensors'
    shapes and dtypes) and returns what the template's output ``out_node`` is shaped like."""
    if k != key:
        raise InputError(f"{where}: layer {i} is called with other non-tensor arguments than {tpl} ({k} vs {key})")
    if len(xs) != len(ins) or any((by[a.name].shape, by[a.name].dtype) != (by[b.name].shape, by[b.name].dtype)
                                  for a, b in zip(xs, ins)):
        raise InputError(f"{where}: layer {i} is called with tensors of other shapes than {tpl}")
    if (t.shape, t.dtype) != (out_node.shape, out_node.dtype):
        raise InputError(f"{where}: layer {i}: {tpl}'s output ({out_node.dtype} {out_node.shape}) is not shaped like "
                         f"its first argument")


def _layer_params(rep: Repeat, i: int, params: dict[str, str], by: dict, m: dict, input_names: dict) -> list[TNode]:
    """Layer ``i``'s parameters as new inputs, one per template parameter placeholder (``params``: its name ->
    the parameter's dotted name), named by the layer; ``m`` maps the template's placeholders to them."""
    out = []
    for ph_name, p in params.items():
        ph = by[ph_name]
        m[ph_name] = f"{rep.path}.{i}.{ph_name}"
        out.append(TNode(m[ph_name], "placeholder", ph.target, (), {}, ph.shape, ph.dtype, ph.loc))
        input_names[m[ph_name]] = f"{rep.path}.{i}.{p}"
        if rep.copied is None:
            rep.copied = {}
        rep.copied[input_names[m[ph_name]]] = input_names.get(ph_name, f"{rep.path}.{rep.template}.{p}")
    return out


def copy_layouts(rep: Repeat | None, layouts: dict) -> None:
    """A copy's parameter laid out (a DTensor's mesh and placements) as the template's -- :func:`differences`
    checked each layer's parameters against the template's: same shape, dtype, mesh and placements."""
    for new, old in ((rep.copied or {}).items() if rep is not None else ()):
        if old in layouts and new not in layouts:
            layouts[new] = layouts[old]


def _copy(b: TNode, m: dict, rep: Repeat, i: int) -> TNode:
    return replace(b, name=m[b.name], args=_rename(b.args, m), kwargs=_rename(b.kwargs, m) if b.kwargs else {},
                   module=_layer_module(b.module, rep.path, i, rep.template))
