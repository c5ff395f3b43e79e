"""Capture and load errors say what to do (issue 15, point 3): one line with the real cause, the module and
the TP plan entry; plain torch.export archives decomposed on load; rank-list process groups; backward hooks."""
from __future__ import annotations

import pickle

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import graphguard
import graphguard.torch as ggt
from graphguard.errors import InputError

from conftest import EXAMPLES


# -- a) a failing capture: the real cause, the module, the plan entry; no torch log spam -------------------

class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16, bias=False)
        self.down = torch.nn.Linear(16, 8, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([_MLP()])

    def forward(self, x):
        return self.layers[0](x)


def test_wrong_dtensor_plan_names_module_and_style(capfd):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    def build(rank):
        torch.manual_seed(0)
        m = _Net()
        # wrong: down must be rowwise (its input is up's column shard)
        parallelize_module(m, init_device_mesh("cpu", (2,)), {"layers.0.up": ColwiseParallel(),
                                                              "layers.0.down": ColwiseParallel()})
        return m
    with pytest.raises(InputError) as e:
        ggt.capture(build, (torch.randn(3, 8),), world_size=2)
    msg = str(e.value)
    assert "\n" not in msg
    assert "in module 'layers.0.down' (parallel style ColwiseParallel) at " in msg, msg
    assert "RuntimeError: a and b must have same reduction dim" in msg, msg
    err = capfd.readouterr().err
    assert "fake_tensor.py" not in err and "Traceback" not in err, err  # torch's own log is silenced


def test_wrong_hf_tp_plan_names_module_and_plan_entry(capfd):
    pytest.importorskip("transformers")
    import importlib.util
    spec = importlib.util.spec_from_file_location("hf_llama_tp_model", EXAMPLES / "hf-llama-tp" / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from graphguard.frontends.fx.capture import capture_one_rank
    from graphguard.plugins import load_plugins
    bad = {"model.layers.*.self_attn.o_proj": "colwise"}
    with pytest.raises(InputError) as e:
        capture_one_rank(lambda r: mod.impl(r, 2, bad), lambda r: mod.inputs(r, 2), 0, 2, False,
                         load_plugins().registry)
    msg = str(e.value)
    assert ("failed in module 'model.layers.0.self_attn.o_proj' "
            "(plan entry \"model.layers.*.self_attn.o_proj\": \"colwise\")") in msg, msg
    assert "a and b must have same reduction dim" in msg and "Sharding propagation failed for aten.mm" in msg, msg
    err = capfd.readouterr().err
    assert "[rank0]:E" not in err and "Traceback" not in err, err


class _Raises(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def forward(self, x):
        if self.kind == "value":
            raise ValueError(f"hidden size {x.shape[-1]} is not a multiple of 3 heads")
        return [x][2]  # IndexError


class _Holder(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Identity(), _Raises(kind)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


@pytest.mark.parametrize("kind,cause", [("value", "ValueError: hidden size 4 is not a multiple of 3 heads"),
                                        ("index", "IndexError: list index out of range")])
def test_model_code_errors_name_module(kind, cause):
    with pytest.raises(InputError) as e:
        ggt.capture(lambda r: _Holder(kind), (torch.ones(2, 4),), world_size=1)
    msg = str(e.value)
    assert msg.startswith("capture failed in module 'blocks.1' at test_errors_say_what_to_do.py:"), msg
    assert msg.endswith(cause), msg


# -- b) a plain torch.export archive (aten.linear): decomposed into core ATen on load, nothing unpickled --------

class _Lin(torch.nn.Module):
    def __init__(self, world):
        super().__init__()
        self.world = world
        self.fc = torch.nn.Linear(8 // world, 4, bias=False)

    def forward(self, x):
        y = self.fc(x)
        if self.world > 1:
            y = funcol.all_reduce(y, "sum", dist.group.WORLD)
        return torch.relu(y)


def _export_plain(module, args, path, rank=None, world=1):
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        dist.destroy_process_group()
    if rank is not None:
        dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        torch.export.save(torch.export.export(module, args), str(path))  # no run_decompositions()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_plain_export_archive_verifies(tmp_path, monkeypatch):
    torch.manual_seed(0)
    _export_plain(_Lin(1), (torch.randn(3, 8),), tmp_path / "spec.pt2")
    for r in range(2):
        _export_plain(_Lin(2), (torch.randn(3, 4),), tmp_path / f"r{r}.pt2", rank=r, world=2)
    rel = {"inputs": {"x": "concat(x@0, x@1, dim=1)", "fc.weight": "concat(fc.weight@0, fc.weight@1, dim=1)"}}

    def no_unpickling(*a, **k):
        raise AssertionError("an archive was unpickled")
    monkeypatch.setattr(pickle, "load", no_unpickling)
    monkeypatch.setattr(pickle, "loads", no_unpickling)
    monkeypatch.setattr(torch, "load", no_unpickling)
    r = graphguard.verify([str(tmp_path / "spec.pt2")], [str(tmp_path / f"r{i}.pt2") for i in range(2)], rel,
                          frontend="fx")
    assert r.verdict == "refines", r.render()
    assert "out0 = out0@0" in r.r_o_lines()


# -- c) collectives over rank lists and dist.new_group groups --------------------------------------------

class _RowTP(torch.nn.Module):
    """Row-parallel TP 2 in two data-parallel replicas (world 4): rank r holds column shard r % 2 of w."""

    def __init__(self, world, rank=0, how="list"):
        super().__init__()
        self.world, self.rank, self.how = world, rank, how
        self.w = torch.nn.Parameter(torch.randn(4, 8 // min(world, 2)))
        if how == "new_group":
            self.groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]

    def forward(self, x):
        y = x @ self.w.t()
        if self.world > 1:
            pair = [0, 1] if self.rank < 2 else [2, 3]
            y = funcol.all_reduce(y, "sum", pair if self.how == "list" else self.groups[self.rank // 2])
        return y


@pytest.mark.parametrize("how", ["list", "new_group"])
def test_rank_list_groups_verify(how):
    s = ggt.capture(lambda r: _RowTP(1), (torch.ones(3, 8),), world_size=1)
    d = ggt.capture(lambda r: _RowTP(4, r, how), (torch.ones(3, 4),), world_size=4)
    groups = sorted({tuple(n["attrs"]["group"]) for n in d.doc["nodes"] if n["op"] == "core.all_reduce"})
    assert groups == [(0, 1), (2, 3)]
    rel = {"inputs": {"x": ["concat(x@0, x@1, dim=1)", "concat(x@2, x@3, dim=1)"],
                      "w": ["concat(w@0, w@1, dim=1)", "concat(w@2, w@3, dim=1)"]}}
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "refines", r.render()


# -- d) module backward hooks: the module path and the plan entry -------------------------------------------

class _Planned(torch.nn.Module):
    """HF's way of stating a TP plan (``_tp_plan``); the hook stands for a style's backward hook."""

    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))])
        self._tp_plan = {"layers.*.1": "my_norm_style"}

    def forward(self, x):
        return self.layers[0](x)


def _grad_sum(module, grad_in, grad_out):
    return None


def test_backward_hooks_name_module_and_plan_entry():
    def build(rank):
        m = _Planned()
        m.layers[0][1].register_full_backward_hook(_grad_sum)
        return m
    with pytest.raises(InputError) as e:
        ggt.capture(build, (torch.ones(2, 4),), world_size=2, backward=True)
    msg = str(e.value)
    assert ("module 'layers.0.1' (plan entry \"layers.*.1\": \"my_norm_style\") has a backward hook "
            "(test_errors_say_what_to_do._grad_sum)") in msg, msg
    handle = torch.nn.modules.module.register_module_full_backward_hook(_grad_sum)
    try:
        with pytest.raises(InputError, match=r"a global module backward hook \(test_errors_say_what_to_do._grad_sum, "
                                             r"registered with register_module_full_backward_hook"):
            ggt.capture(lambda r: _Planned(), (torch.ones(2, 4),), world_size=2, backward=True)
    finally:
        handle.remove()


@pytest.mark.parametrize("where", ["parameter", "post-accumulate", "input"])
def test_a_gradient_hook_on_a_leaf_is_refused_not_left_out(where):
    """A hook on a parameter (or an input) changes the gradient outside the traced program: captured, the
    backward would leave it out and a program whose gradient is doubled would be certified. Refused by name."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x).relu()
    m, x = M(), torch.randn(3, 4, requires_grad=True)
    if where == "parameter":
        m.fc.weight.register_hook(lambda g: g * 2)
    elif where == "post-accumulate":
        m.fc.bias.register_post_accumulate_grad_hook(lambda p: p.grad.mul_(2))
    else:
        x.register_hook(lambda g: g * 2)
    what = {"parameter": "parameter 'fc.weight' has a gradient hook", "input": "input 0 has a gradient hook",
            "post-accumulate": "parameter 'fc.bias' has a post-accumulate-grad hook"}[where]
    with pytest.raises(InputError, match=what):
        ggt.capture(lambda r: m, lambda r: (x,), backward=True)


def test_a_sharded_parameter_the_module_mixes_with_plain_tensors_is_named():
    """A plan that makes a module's parameter a DTensor without wrapping the module's forward (HF's Granite-SWA
    `sinks: colwise`): the failure names the parameter."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    class Sinks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sinks = torch.nn.Parameter(torch.zeros(4))

        def forward(self, x):
            return x - self.sinks

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Sinks()

        def forward(self, x):
            return self.attn(x)

    def build(rank):
        m = Net()
        m.attn.sinks = torch.nn.Parameter(distribute_tensor(m.attn.sinks.data, init_device_mesh("cpu", (2,)),
                                                            [Shard(0)]))
        return m
    with pytest.raises(InputError) as e:
        ggt.capture(build, (torch.randn(3, 4),), world_size=2)
    msg = str(e.value)
    assert "in module 'attn'" in msg and "got mixed torch.Tensor and DTensor" in msg, msg
    assert "(its parameter 'sinks' is a DTensor, which this module's own code mixes with plain tensors" in msg, msg
