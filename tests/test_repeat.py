"""``repeat = "layers"``: a stack of identical layers traced once (graphguard/frontends/fx/repeat.py).

Proving: the expanded graphs verify with the same R_o as the fully traced ones, and the expanded specification
computes what the PyTorch model computes. Must-not-prove: a later layer that differs (a bug planted in layer 3
of 4, an attribute, its call) is refused at capture, never copied from layer 0. With backward, layer 1 is the
template (layer 0's input may need no gradient) and its backward is copied too."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import graphguard
from graphguard.errors import InputError
from graphguard.frontends.fx.model_file import capture_model_file
from graphguard.ir.serde import load_graph

from conftest import load_module

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "examples" / "llama-tp" / "model.py"

# a stack of MLP layers, tensor parallel with an all-reduce; GG_T_BUG plants a difference in layer 3 of 4
STACK = textwrap.dedent('''
    import os
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    BUG = os.environ.get("GG_T_BUG", "")
    repeat = "layers"

    class F(torch.autograd.Function):  # Megatron's f: identity forward, all-reduce backward
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return funcol.all_reduce(g, "sum", dist.group.WORLD)

    class G(torch.autograd.Function):  # Megatron's g: all-reduce forward, identity backward
        @staticmethod
        def forward(ctx, x):
            return funcol.all_reduce(x, "sum", dist.group.WORLD)

        @staticmethod
        def backward(ctx, g):
            return g

    class S(torch.autograd.Function):  # identity forward; its backward scales by k (read only by the backward)
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    class Block(torch.nn.Module):
        def __init__(self, world, i):
            super().__init__()
            self.world = world
            if BUG in ("idx", "cap", "bwscale"):  # layer_idx: bookkeeping the computation never reads
                self.layer_idx = i
                self.cap = 0.5 if BUG == "cap" and i == 3 else 100.0  # a clamp bound: layer 3's cuts values
                self.k = 2.0 if BUG == "bwscale" and i == 3 else 1.0  # layer 3's backward doubles its gradient
            self.fc1 = torch.nn.Linear(8, 16 // world, bias=False)
            self.fc2 = torch.nn.Linear(16 // world, 8, bias=False)
            self.reduce = not (BUG == "skip" and i == 3 and world > 1)  # layer 3 forgets its all-reduce
            if BUG == "leak":
                self.kept = []

        def forward(self, x, scale=1.0):
            h = torch.relu(self.fc1(F.apply(x) if self.world > 1 else x))
            if BUG == "leak":
                self.kept.append(h)
            if BUG == "cap":
                h = torch.clamp(h, max=self.cap)
            if BUG == "bwscale":
                h = S.apply(h, self.k)
            h = self.fc2(h) * scale
            if self.world > 1 and self.reduce:
                h = G.apply(h)
            return x + h

    class Stack(torch.nn.Module):
        def __init__(self, world):
            super().__init__()
            self.layers = torch.nn.ModuleList(Block(world, i) for i in range(4))
            if BUG == "tied":  # layer 3's fc1 is layer 2's (weights shared)
                self.layers[3].fc1 = self.layers[2].fc1
            if BUG == "same":  # one layer four times (ALBERT's sharing)
                self.layers = torch.nn.ModuleList([self.layers[0]] * 4)

        def forward(self, x):
            for i, blk in enumerate(self.layers):
                x = blk(x, scale=2.0 if BUG == "call" and i == 3 else 1.0)
                if (BUG == "twice" and i == 0) or (BUG == "again" and i == 2):  # a layer applied twice
                    x = blk(x, scale=1.0)
            return x

    def spec():
        torch.manual_seed(0)
        return Stack(1)

    def impl(rank, world):
        torch.manual_seed(0)
        return Stack(world)

    def inputs(rank, world):
        torch.manual_seed(1)
        return (torch.randn(2, 8),)

    def relation(world, backward):
        rep = lambda n: [f"{n}@{r}" for r in range(world)]
        rel = {"x": rep("x")}
        for i in range(4):
            p = f"layers.{i}."
            rel[p + "fc1.weight"] = f"concat({', '.join(f'{p}fc1.weight@{r}' for r in range(world))}, dim=0)"
            rel[p + "fc2.weight"] = f"concat({', '.join(f'{p}fc2.weight@{r}' for r in range(world))}, dim=1)"
        if backward:
            rel["tangent.out0"] = rep("tangent.out0")
        return {"inputs": rel}
''')


def _stack(tmp_path: Path) -> Path:
    f = tmp_path / "stack" / "model.py"
    f.parent.mkdir(exist_ok=True)
    f.write_text(STACK)
    return f


def _verify(files: dict, plugins):
    return graphguard.verify(str(files["spec"]), str(files["impl"]), str(files["relation"]), plugins=plugins)


@pytest.mark.slow  # (suite time, ~14 s: by default the 4-layer stack checks the same, forward and backward)
def test_llama_layers_repeated_same_certificate(tmp_path, monkeypatch, plugins):
    """llama-tp, 3 layers, TP 2: layers 1 and 2 taken from layer 0's trace verify with the R_o of the
    fully traced model; the later layers' weights are inputs named by their layer."""
    monkeypatch.setenv("GG_LAYERS", "3")
    full = capture_model_file(LLAMA, tmp_path / "full", 2, plugins=plugins)
    monkeypatch.setenv("GG_REPEAT", "1")
    rep = capture_model_file(LLAMA, tmp_path / "rep", 2, plugins=plugins)
    spec = json.loads(Path(rep["spec"]).read_text())
    assert {"layers.2.q_proj.weight", "layers.1.down_proj.weight"} <= {t["name"] for t in spec["inputs"]}
    assert not any("graphguard_repeat" in n["op"] for n in spec["nodes"])
    assert spec["repeat"] == {"path": "layers", "layers": 3}
    # each copied operator names its own layer's module, as the traced one names layer 0's
    mods = {n.get("module") for n in spec["nodes"]}
    assert {"layers.0.down_proj", "layers.1.down_proj", "layers.2.input_norm", "layers.2"} <= mods
    a, b = _verify(full, plugins), _verify(rep, plugins)
    assert a.verdict == b.verdict == "refines"
    assert a.r_o_lines() == b.r_o_lines()
    # the certificate states what was traced and what copied
    assert not a.repeat and b.repeat == {"spec": ("layers", 3, 0), "impl": ("layers", 3, 0)}
    assert ("G_d: layer 0 of 'layers' traced; layers 1-2 are copies of layer 0's graph over their own weights "
            "(capture checked each a copy of layer 0 and called like it)") in b.render()
    assert b.to_dict()["repeat"]["impl"] == {"path": "layers", "layers": 3, "template": 0}


def test_repeated_spec_computes_the_model(tmp_path, monkeypatch, plugins):
    """The expanded specification graph, run on the model's weights, computes what PyTorch computes."""
    from graphguard.engine.replay import run_graph
    from graphguard.ir.scalar import Constraints
    monkeypatch.setenv("GG_LAYERS", "3")
    monkeypatch.setenv("GG_REPEAT", "1")
    files = capture_model_file(LLAMA, tmp_path, 2, plugins=plugins)
    g = load_graph(files["spec"], plugins.registry, Constraints())
    mod = load_module(LLAMA, GG_LAYERS="3")
    model = mod.spec()
    x, cos, sin = mod.inputs(None, 1)
    env = {"x": x.numpy(), "cos": cos.numpy(), "sin": sin.numpy()}
    env.update({k: v.detach().numpy() for k, v in model.named_parameters()})
    assert set(g.inputs) <= env.keys()
    got = run_graph(g, {k: env[k] for k in g.inputs}, plugins.registry, {})[g.outputs[0]]
    want = model(x, cos, sin).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_stack_repeated_refines(tmp_path, monkeypatch, plugins):
    monkeypatch.delenv("GG_T_BUG", raising=False)
    files = capture_model_file(_stack(tmp_path), tmp_path / "out", 2, plugins=plugins)
    r = _verify(files, plugins)
    assert r.verdict == "refines", r.render()
    impl = json.loads(Path(files["impl"]).read_text())
    assert sum(n["op"] == "core.all_reduce" or "all_reduce" in n["op"] for n in impl["nodes"]) >= 4


@pytest.mark.parametrize("bug, says", [
    ("skip", "layer 3 is not a copy of layer 0: 'the layer'.reduce is False, not True"),
    ("call", "layer 3 is called with other non-tensor arguments than layer 0"),
    ("leak", "is read outside the layer"),
    ("twice", "layer 0 is called 2 times"),
    ("again", "a layer is called more than once"),
    ("tied", "layer 3's fc1 is layer 2's fc1"),
    ("same", "layer 1 is layer 0 (layers that share modules or weights are traced as they are"),
])
def test_a_later_layer_that_differs_is_refused(tmp_path, monkeypatch, plugins, bug, says):
    """Must not prove: a bug planted in layer 3 of 4 (its all-reduce skipped by an attribute), another call
    of it, or a layer 0 that passes on more than its output -- refused at capture, never copied from layer 0
    (without repeat the skipped all-reduce is found: does not refine)."""
    monkeypatch.setenv("GG_T_BUG", bug)
    path = _stack(tmp_path)
    with pytest.raises(InputError) as e:
        capture_model_file(path, tmp_path / "out", 2, plugins=plugins)
    assert says.replace("'the layer'", "the layer") in str(e.value)
    if bug == "skip":
        path.write_text(STACK.replace('repeat = "layers"', "repeat = None"))
        r = _verify(capture_model_file(path, tmp_path / "full", 2, plugins=plugins), plugins)
        assert r.verdict == "does-not-refine"


def test_stack_repeated_through_backward(tmp_path, monkeypatch, plugins):
    """A 4-layer tensor-parallel MLP stack (Megatron's f / g), TP 2, forward+backward: layer 1 the template,
    layers 2-3 its copies -- the same operators and the same R_o as the fully traced stack, every weight's
    gradient related; the expanded specification computes PyTorch's gradients."""
    from graphguard.engine.replay import run_graph
    from graphguard.ir.scalar import Constraints
    monkeypatch.delenv("GG_T_BUG", raising=False)
    path = _stack(tmp_path)
    rep = capture_model_file(path, tmp_path / "rep", 2, backward=True, plugins=plugins)
    path.write_text(STACK.replace('repeat = "layers"', "repeat = None"))
    full = capture_model_file(path, tmp_path / "full", 2, backward=True, plugins=plugins)
    specs = [json.loads(Path(f["spec"]).read_text()) for f in (full, rep)]
    impls = [json.loads(Path(f["impl"]).read_text()) for f in (full, rep)]
    assert specs[1]["repeat"] == {"path": "layers", "layers": 4, "template": 1} and "repeat" not in specs[0]
    for a, b in ((specs[0], specs[1]), (impls[0], impls[1])):
        assert sorted(n["op"] for n in a["nodes"]) == sorted(n["op"] for n in b["nodes"])
        assert a["outputs"] == b["outputs"]
    a, b = _verify(full, plugins), _verify(rep, plugins)
    assert a.verdict == b.verdict == "refines", b.render()
    assert a.r_o_lines() == b.r_o_lines()
    assert "grad.layers.3.fc1.weight = concat(grad.layers.3.fc1.weight@0, grad.layers.3.fc1.weight@1, dim=0)" in \
        b.r_o_lines()
    g = load_graph(rep["spec"], plugins.registry, Constraints())
    mod = load_module(path.with_name("model.py"))
    model = mod.spec()
    (x,) = mod.inputs(None, 1)
    y = model(x)
    y.backward(torch.ones_like(y))
    env = {"x": x.numpy(), "tangent.out0": np.ones(y.shape, np.float32)}
    env.update({k: v.detach().numpy() for k, v in model.named_parameters()})
    got = run_graph(g, {k: env[k] for k in g.inputs}, plugins.registry, {})
    for name, t in zip(specs[1]["outputs"], g.outputs):
        want = y.detach() if name == "out0" else dict(model.named_parameters())[name[len("grad."):]].grad
        np.testing.assert_allclose(got[t], want.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.slow  # (~35 s; the stack above is the default suite's)
def test_llama_layers_repeated_through_backward(tmp_path, monkeypatch, plugins):
    """llama-tp, 3 layers, TP 2, forward+backward: layer 0 traced as it is, layer 1 the template (forward and
    backward), layer 2 its copy over layer 2's weights, its gradients the copies of layer 1's -- the same
    operators and the same R_o as the fully traced model; and the expanded specification computes the
    gradients PyTorch computes."""
    from graphguard.engine.replay import run_graph
    from graphguard.ir.scalar import Constraints
    monkeypatch.setenv("GG_LAYERS", "3")
    full = capture_model_file(LLAMA, tmp_path / "full", 2, backward=True, plugins=plugins)
    monkeypatch.setenv("GG_REPEAT", "1")
    rep = capture_model_file(LLAMA, tmp_path / "rep", 2, backward=True, plugins=plugins)
    specs = [json.loads(Path(f["spec"]).read_text()) for f in (full, rep)]
    impls = [json.loads(Path(f["impl"]).read_text()) for f in (full, rep)]
    assert specs[1]["repeat"] == {"path": "layers", "layers": 3, "template": 1}
    assert not any("graphguard_repeat" in n["op"] for n in specs[1]["nodes"] + impls[1]["nodes"])
    for a, b in ((specs[0], specs[1]), (impls[0], impls[1])):  # the same operators, one for one
        ops = lambda d: sorted(n["op"] for n in d["nodes"])  # noqa: E731
        assert ops(a) == ops(b) and a["outputs"] == b["outputs"]
    # the copy's backward operators name layer 2's modules
    assert {"layers.2.down_proj", "layers.2.input_norm"} <= {n.get("module") for n in specs[1]["nodes"]
                                                            if n["name"].startswith("layers.2.bw.")}
    a, b = _verify(full, plugins), _verify(rep, plugins)
    assert a.verdict == b.verdict == "refines", b.render()
    assert a.r_o_lines() == b.r_o_lines()
    assert "grad.layers.2.q_proj.weight" in b.r_o
    assert ("G_s: layers 0-1 of 'layers' traced; layers 2-2 are copies of layer 1's graph over their own weights"
            in b.render())
    g = load_graph(rep["spec"], plugins.registry, Constraints())
    mod = load_module(LLAMA, GG_LAYERS="3")
    model = mod.spec()
    x, cos, sin = mod.inputs(None, 1)
    y = model(x, cos, sin)
    y.backward(torch.ones_like(y))
    env = {"x": x.numpy(), "cos": cos.numpy(), "sin": sin.numpy(), "tangent.out0": np.ones(y.shape, np.float32)}
    env.update({k: v.detach().numpy() for k, v in model.named_parameters()})
    got = run_graph(g, {k: env[k] for k in g.inputs}, plugins.registry, {})
    names = specs[1]["outputs"]
    for name, t in zip(names, g.outputs):
        want = y.detach() if name == "out0" else dict(model.named_parameters())[name[len("grad."):]].grad
        np.testing.assert_allclose(got[t], want.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("bug, says", [
    ("skip", "layer 3 is not a copy of layer 1: 'the layer'.reduce is False, not True"),
    ("call", "layer 3 is called with other non-tensor arguments than the template"),
    ("leak", "is read outside the layer"),
    ("again", "a layer is called more than once"),
    ("tied", "layer 3's fc1 is layer 2's fc1"),
])
def test_a_later_layer_that_differs_is_refused_with_backward(tmp_path, monkeypatch, plugins, bug, says):
    """Must not prove, forward+backward: layer 1 is the template; a later layer that differs is refused."""
    monkeypatch.setenv("GG_T_BUG", bug)
    with pytest.raises(InputError) as e:
        capture_model_file(_stack(tmp_path), tmp_path / "out", 2, backward=True, plugins=plugins)
    assert says.replace("'the layer'", "the layer") in str(e.value)


def test_repeat_refuses_bad_paths(tmp_path, monkeypatch, plugins):
    monkeypatch.delenv("GG_T_BUG", raising=False)
    path = _stack(tmp_path)
    path.write_text(STACK.replace('repeat = "layers"', 'repeat = "blocks"'))
    with pytest.raises(InputError, match="Stack has no 'blocks'"):
        capture_model_file(path, tmp_path / "out2", 2, plugins=plugins)
    path.write_text(STACK.replace('repeat = "layers"', 'repeat = "layers.0.fc1"'))
    with pytest.raises(InputError, match="not an nn.ModuleList"):
        capture_model_file(path, tmp_path / "out3", 2, plugins=plugins)


def test_differs_compares_state_not_identity():
    from graphguard.frontends.fx.repeat import differs
    a, b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    assert differs(a, b) is None
    b.eps = 1e-5
    assert "attributes" in differs(a, b)
    a.eps = 1e-6
    assert "eps is 1e-05, not 1e-06" in differs(a, b)
    c = torch.nn.Linear(4, 5)
    assert "weight is torch.float32 [5, 4]" in differs(a, c)
    d = torch.nn.Linear(4, 4)
    d.table = torch.zeros(2)  # a tensor held as an attribute: must be the same object
    e = torch.nn.Linear(4, 4)
    e.table = torch.zeros(2)
    assert "table" in differs(d, e)
    e.table = d.table
    assert differs(d, e) is None


@pytest.mark.slow  # (Ray's start: ~15 s; the default suite starts Ray once, in tests/test_scale.py)
def test_capture_on_ray_writes_the_same_files(tmp_path, monkeypatch):
    """``graphguard capture --workers 2``: the sequential program and the ranks as Ray tasks (this process
    one of the workers) give byte for byte the files of the capture one by one."""
    pytest.importorskip("ray")
    monkeypatch.setenv("GG_LAYERS", "2")
    monkeypatch.setenv("GG_REPEAT", "1")
    serial = capture_model_file(LLAMA, tmp_path / "serial", 2)
    on_ray = capture_model_file(LLAMA, tmp_path / "ray", 2, workers=2)
    for k in ("spec", "impl", "relation"):
        assert Path(serial[k]).read_bytes() == Path(on_ray[k]).read_bytes(), k


def test_capture_leaves_the_model_as_it_was(plugins):
    """The layers' forwards are the model's own again after capture (a model object the caller keeps)."""
    from graphguard.frontends.fx.capture import capture
    mod = load_module(LLAMA, GG_LAYERS="3")
    model = mod.spec()
    x, cos, sin = mod.inputs(None, 1)
    want = model(x, cos, sin)
    capture(lambda r: model, (x, cos, sin), plugins=plugins, repeat="layers")
    assert not any("forward" in m.__dict__ for m in model.layers)
    torch.testing.assert_close(model(x, cos, sin), want)


def test_bookkeeping_attribute_allowed_by_comparing_graphs(tmp_path, monkeypatch, plugins):
    """Layers that differ in an attribute their computation never reads (``layer_idx``) are copies: each is
    traced alone beside the template and the graphs compared; the certificate names the attribute. Forward
    and forward+backward (the backward graphs compared too)."""
    monkeypatch.setenv("GG_T_BUG", "idx")
    files = capture_model_file(_stack(tmp_path), tmp_path / "out", 2, plugins=plugins)
    r = _verify(files, plugins)
    assert r.verdict == "refines", r.render()
    assert json.loads(Path(files["impl"]).read_text())["repeat"] == {
        "path": "layers", "layers": 4, "compared": ["layer_idx (layers 1-3)"]}
    assert ("attributes that differ from layer 0's: layer_idx (layers 1-3) -- each such layer traced alone and its "
            "graph compared with layer 0's, operator by operator: equal") in r.render()
    assert r.to_dict()["repeat"]["impl"]["compared"] == ["layer_idx (layers 1-3)"]
    files = capture_model_file(_stack(tmp_path), tmp_path / "bw", 2, backward=True, plugins=plugins)
    assert json.loads(Path(files["spec"]).read_text())["repeat"]["compared"] == ["layer_idx (layers 2-3)"]
    assert _verify(files, plugins).verdict == "refines"


@pytest.mark.parametrize("bug, backward, says", [
    # a clamp bound of layer 3's: its graph has another constant
    ("cap", False, "layer 3 is not a copy of layer 0: the layer.layer_idx is 3, not 0; the layer.cap is 0.5, not "
                   "100.0 and its traced graph differs from layer 0's (node|(aten.clamp.default): arguments "
                   "(relu, None, 0.5), not (relu, None, 100.0))"),
    # an attribute only the backward reads (an autograd.Function's ctx): the forward graphs are equal, the
    # backward ones are not
    ("bwscale", True, "layer 3 is not a copy of layer 1: the layer.layer_idx is 3, not 1; the layer.k is 2.0, "
                      "not 1.0 and its traced graph differs from layer 1's (node"),
])
def test_attribute_that_changes_the_computation_is_refused(tmp_path, monkeypatch, plugins, bug, backward, says):
    """Must not prove: an attribute the computation reads differs in layer 3 -- refused at capture, naming it."""
    monkeypatch.setenv("GG_T_BUG", bug)
    with pytest.raises(InputError) as e:
        capture_model_file(_stack(tmp_path), tmp_path / "out", 2, backward=backward, plugins=plugins)
    for part in says.split("|"):
        assert part in str(e.value)


def test_backward_only_attribute_is_a_copy_in_forward(tmp_path, monkeypatch, plugins):
    """An attribute only the backward reads does not change the forward: forward alone, the layers are copies
    (and the copy computes what the layer does: refines)."""
    monkeypatch.setenv("GG_T_BUG", "bwscale")
    files = capture_model_file(_stack(tmp_path), tmp_path / "out", 2, plugins=plugins)
    assert json.loads(Path(files["spec"]).read_text())["repeat"]["compared"] == ["k (layers 3)",
                                                                                 "layer_idx (layers 1-3)"] or \
        json.loads(Path(files["spec"]).read_text())["repeat"]["compared"] == ["layer_idx (layers 1-3)", "k (layers 3)"]
    assert _verify(files, plugins).verdict == "refines"


def test_same_graph_compares_operators_constants_and_inputs():
    """Graphs compared node for node: other operators, another constant, other wiring -- different."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from graphguard.frontends.fx.repeat import same_graph
    g = lambda f: make_fx(f, tracing_mode="fake")(torch.randn(2, 3), torch.randn(2, 3))  # noqa: E731
    base = g(lambda a, b: torch.relu(a * 2.0) + b)
    assert same_graph(base, g(lambda a, b: torch.relu(a * 2.0) + b)) is None
    assert "arguments" in same_graph(base, g(lambda a, b: torch.relu(a * 3.0) + b))
    assert "arguments" in same_graph(base, g(lambda a, b: torch.relu(b * 2.0) + a))
    assert same_graph(base, g(lambda a, b: torch.sigmoid(a * 2.0) + b)) is not None
    assert same_graph(base, g(lambda a, b: torch.relu(a * 2.0) - b)) is not None
    assert same_graph(base, g(lambda a, b: torch.relu(a * 2.0) + b + torch.tensor(1.0))) is not None


def _hf(monkeypatch, layers: int):
    pytest.importorskip("transformers")
    Z = load_module(ROOT / "examples" / "hf-zoo" / "model.py")
    monkeypatch.setitem(Z.TINY, "num_hidden_layers", layers)
    return Z


@pytest.mark.slow  # (~33 s: both captures and verifications; the default suite refuses a per-layer scaling of HF Llama
# below and allows layer_idx on the 4-layer stack)
def test_hf_llama_with_repeat_verifies_as_without(monkeypatch, plugins):
    """HF Llama (tiny config, 3 layers) under HF's own TP plan at TP 2, forward: with repeat = the decoder stack
    the layers differ in ``self_attn.layer_idx`` (HF's cache bookkeeping) and in the ``tp_forward`` HF's plan sets
    on each projection (a closure over its own module) -- allowed by comparing the traced graphs (DTensor weights,
    HF's in-place all-reduce) -- and the verdict and R_o are those of the fully traced model."""
    import graphguard.torch as ggt
    Z = _hf(monkeypatch, 3)
    got = {}
    for rep in (None, "lm.model.layers"):
        s = ggt.capture(lambda r: Z.spec("llama").requires_grad_(False), lambda r: Z.inputs(None, 1, "llama"),
                        plugins=plugins, name="s", repeat=rep)
        d = ggt.capture(lambda r: Z.impl(r, 2, mt="llama").requires_grad_(False), lambda r: Z.inputs(r, 2, "llama"),
                        world_size=2, plugins=plugins, name="d", repeat=rep)
        user = Z.relation(2, False, mt="llama")
        names = {i["name"] for i in s.doc["inputs"]}
        rel = ggt.input_relation(s, d, dict(user, inputs={k: v for k, v in user["inputs"].items() if k in names}),
                                 plugins)
        got[rep] = (graphguard.verify(s.graph(plugins), d.graph(plugins), rel, plugins=plugins), s.doc, d.doc)
    (a, _, _), (b, s_doc, d_doc) = got[None], got["lm.model.layers"]
    assert a.verdict == b.verdict == "refines", b.render()
    assert a.r_o_lines() == b.r_o_lines()
    assert s_doc["repeat"]["compared"] == ["self_attn.layer_idx (layers 1-2)"]
    assert "self_attn.layer_idx (layers 1-2)" in d_doc["repeat"]["compared"]
    assert "lm.model.layers.2.mlp.down_proj.weight" in {i["name"].rsplit("@", 1)[0] for i in d_doc["inputs"]}


def test_hf_llama_layer_with_its_own_scaling_is_refused(monkeypatch, plugins):
    """Must not prove: HF Llama whose layer 2 scales its attention scores by 0.5 (a per-layer ``scaling``, as
    a model with per-layer query scaling has) -- the traced graphs differ: refused, naming the attribute."""
    import graphguard.torch as ggt
    Z = _hf(monkeypatch, 3)

    def build(r):
        m = Z.spec("llama").requires_grad_(False)
        m.lm.model.layers[2].self_attn.scaling = 0.5
        return m
    with pytest.raises(InputError) as e:
        ggt.capture(build, lambda r: Z.inputs(None, 1, "llama"), plugins=plugins, name="s", repeat="lm.model.layers")
    assert ("layer 2 is not a copy of layer 0: 'self_attn'.layer_idx is 2, not 0; 'self_attn'.scaling is 0.5, not "
            "0.25 and its traced graph differs from layer 0's") in str(e.value)
    assert "arguments (_unsafe_view_5, 0.5), not (_unsafe_view_5, 0.25)" in str(e.value)


def test_compared_attributes_round_trip_in_the_graph_file(plugins):
    """The graph file's record of the attributes allowed by comparing graphs: read, written back, and a bad
    one is one clear error."""
    from graphguard.ir.scalar import Constraints
    from graphguard.ir.serde import graph_from_dict, graph_to_dict
    doc = {"graphguard": 1, "inputs": [{"name": "x", "shape": [2]}], "outputs": ["x"], "nodes": [],
           "repeat": {"path": "layers", "layers": 3, "compared": ["self_attn.layer_idx (layers 1-2)"]}}
    g = graph_from_dict(doc, "<t>", plugins.registry, Constraints())
    assert g.repeat == ("layers", 3, 0, ("self_attn.layer_idx (layers 1-2)",))
    assert graph_to_dict(g)["repeat"] == doc["repeat"]
    for bad in ("self_attn.layer_idx", [3]):
        with pytest.raises(InputError, match="'repeat'.compared must be a list of strings"):
            graph_from_dict(dict(doc, repeat=dict(doc["repeat"], compared=bad)), "<t>", plugins.registry,
                            Constraints())
