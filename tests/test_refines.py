""""Refines" as users mean it: every output of G_s is held by G_d (rebuilt by data movement alone), unless it is
allowed to stay the ranks' partial results -- per output in the relation file, for all with a flag, or by an
expected partial relation; capture writes the expectations a program states (gradients laid out like their
parameters, DTensor output placements, JAX output shardings)."""
from __future__ import annotations

import pytest

import graphguard
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.relation import parse_relation_text

from conftest import EXAMPLES, files, run_cli, write_example

PARTIAL = "left as partial results on the ranks"


def _row_parallel_docs(world: int = 2, all_reduce: bool = False, relation: str = ""):
    """Megatron's MLP ending in its row-parallel projection: fc1 column-parallel, relu, fc2 row-parallel, with
    or without the all-reduce of fc2's partial products: the spec and impl documents and the relation text."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=world)
    s.input("X", [4, 8]); s.input("W1", [8, 16]); s.input("W2", [16, 8])
    s.op("core.matmul", ["X", "W1"], "H", name="fc1", loc="mlp.py:1")
    s.op("core.relu", ["H"], "A", name="act", loc="mlp.py:2")
    s.op("core.matmul", ["A", "W2"], "Y", name="fc2", loc="mlp.py:3")
    s.op("core.identity", ["Y"], "out", name="output")
    s.output("out")
    c, g = 16 // world, list(range(world))
    for r in g:
        d.input(f"X@{r}", [4, 8]); d.input(f"W1@{r}", [8, c]); d.input(f"W2@{r}", [c, 8])
        d.op("core.matmul", [f"X@{r}", f"W1@{r}"], f"H@{r}")
        d.op("core.relu", [f"H@{r}"], f"A@{r}")
        d.op("core.matmul", [f"A@{r}", f"W2@{r}"], f"P@{r}")
    if all_reduce:
        d.op("core.all_reduce", [f"P@{r}" for r in g], [f"out@{r}" for r in g], op="sum", group=g)
    else:
        for r in g:
            d.op("core.identity", [f"P@{r}"], f"out@{r}")
    d.output(*[f"out@{r}" for r in g])
    rel = (f"inputs:\n  X: [{', '.join(f'X@{r}' for r in g)}]\n"
           f"  W1: concat({', '.join(f'W1@{r}' for r in g)}, dim=1)\n"
           f"  W2: concat({', '.join(f'W2@{r}' for r in g)}, dim=0)\n") + relation
    return s, d, rel


def _row_parallel(plugins, world: int = 2, all_reduce: bool = False, relation: str = ""):
    s, d, text = _row_parallel_docs(world, all_reduce, relation)
    rel = parse_relation_text(text, "relation.yaml", plugins.registry)
    cx = rel.constraints()
    return s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel


def _row_parallel_files(tmp_path, world: int = 2, all_reduce: bool = False, relation: str = ""):
    """The same pair as files, for the command line."""
    import json
    s, d, text = _row_parallel_docs(world, all_reduce, relation)
    (tmp_path / "spec.gg.json").write_text(json.dumps(s.to_dict()))
    (tmp_path / "impl.gg.json").write_text(json.dumps(d.to_dict()))
    (tmp_path / "relation.yaml").write_text(text)
    return files(tmp_path)


# -- the default: outputs held by G_d ---------------------------------------------------------------------

@pytest.mark.parametrize("world", [2, 4])
def test_forgotten_all_reduce_on_an_output_does_not_refine(plugins, world):
    """The row-parallel projection's partial products reach the output: no rank holds it."""
    r = graphguard.verify(*_row_parallel(plugins, world), replay=True)
    assert r.verdict == "does-not-refine" and r.exit_code == 1, r.render()
    f = r.failure
    assert (f.op, f.node, f.loc) == ("core.matmul", "fc2", "mlp.py:3")  # where the partial results began
    assert PARTIAL in f.reason and "output out " in f.reason
    assert f"sum({', '.join(f'out@{i}' for i in range(world))})" in f.reason and f.partial_output == "out"
    assert f.replay["max_abs_diff"] > 1e-3 and not f.replay["candidate"].startswith("sum(")
    assert r.replay["ok"]  # the relations found (the sum among them) hold; the output is just not held


def test_all_reduced_output_refines(plugins):
    r = graphguard.verify(*_row_parallel(plugins, 2, all_reduce=True), replay=True)
    assert r.verdict == "refines" and sorted(r.r_o_lines()) == ["out = out@0", "out = out@1"]
    assert r.replay["ok"]


def test_max_partials_do_not_refine(plugins):
    """The row maxima of column shards (vocab-parallel logits) without the all-reduce(max)."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [16, 8])
    s.op("aten.amax", ["X"], "M", name="amax", loc="logits.py:7", dim=[1], keepdim=False)
    s.output("M")
    for r in range(2):
        d.input(f"X@{r}", [16, 4])
        d.op("aten.amax", [f"X@{r}"], f"M@{r}", dim=[1], keepdim=False)
    d.output("M@0", "M@1")
    rel = parse_relation_text("inputs:\n  X: concat(X@0, X@1, dim=1)\n", "rel", plugins.registry)
    g_s, g_d = s.build(plugins.registry, rel.constraints()), d.build(plugins.registry, rel.constraints())
    r = graphguard.verify(g_s, g_d, rel, replay=True)
    assert r.verdict == "does-not-refine", r.render()
    assert (r.failure.node, r.failure.loc) == ("amax", "logits.py:7") and PARTIAL in r.failure.reason
    assert "max(M@0, M@1)" in r.failure.reason and r.failure.replay["max_abs_diff"] > 1e-3
    r = graphguard.verify(g_s, g_d, rel, allow_partial=["M"], replay=True)
    assert r.verdict == "refines" and r.r_o_lines() == ["M = max(M@0, M@1)"] and r.replay["ok"]


def test_a_sum_inside_a_concat_is_partial(plugins):
    """Each rank holds its rows, but as partial sums: concat(sum(...), sum(...)) is not held either."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=4)
    s.input("X", [4, 6])
    s.op("core.identity", ["X"], "Z", name="out")
    s.output("Z")
    for r in range(4):
        d.input(f"X@{r}", [2, 6])
        d.op("core.identity", [f"X@{r}"], f"Z@{r}")
    d.output(*[f"Z@{r}" for r in range(4)])
    rel = parse_relation_text("inputs:\n  X: concat(sum(X@0, X@1), sum(X@2, X@3), dim=0)\n", "rel", plugins.registry)
    g_s, g_d = s.build(plugins.registry, rel.constraints()), d.build(plugins.registry, rel.constraints())
    r = graphguard.verify(g_s, g_d, rel, replay=True)
    assert r.verdict == "does-not-refine" and PARTIAL in r.failure.reason, r.render()
    assert "concat(sum(Z@0, Z@1), sum(Z@2, Z@3), dim=0)" in r.failure.reason
    assert r.failure.replay["max_abs_diff"] > 1e-3


def test_replicated_output_is_held(plugins):
    """A value computed identically on every rank (a loss) is held: [loss@0, loss@1]."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [4, 6])
    s.op("core.relu", ["X"], "loss", name="loss")
    s.output("loss")
    for r in range(2):
        d.input(f"X@{r}", [4, 6])
        d.op("core.relu", [f"X@{r}"], f"loss@{r}")
    d.output("loss@0", "loss@1")
    rel = parse_relation_text("inputs:\n  X: [X@0, X@1]\nexpect:\n  loss: [loss@0, loss@1]\n", "rel", plugins.registry)
    g_s, g_d = s.build(plugins.registry, rel.constraints()), d.build(plugins.registry, rel.constraints())
    r = graphguard.verify(g_s, g_d, rel, replay=True)
    assert r.verdict == "refines" and sorted(r.r_o_lines()) == ["loss = loss@0", "loss = loss@1"]
    assert r.expect == {"checked": 2, "missing": []} and r.replay["ok"]


def test_a_replicated_gradient_must_be_held_on_every_rank(plugins):
    """A gradient reduced onto rank 0 only is held (by rank 0), but a replicated parameter's gradient is
    expected on every rank -- what capture writes -- and rank 1 keeps its partial sum."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("P", [4, 6])
    s.op("core.identity", ["P"], "grad.w", name="grad")
    s.output("grad.w")
    for r in range(2):
        d.input(f"P@{r}", [4, 6])
    d.op("core.all_reduce", ["P@0", "P@1"], ["A@0", "A@1"], op="sum", group=[0, 1])
    d.op("core.identity", ["A@0"], "grad.w@0")
    d.op("core.identity", ["P@1"], "grad.w@1")
    d.output("grad.w@0", "grad.w@1")
    for expect, verdict in (("", "refines"), ("expect:\n  grad.w: [grad.w@0, grad.w@1]\n", "does-not-refine")):
        rel = parse_relation_text("inputs:\n  P: sum(P@0, P@1)\n" + expect, "rel", plugins.registry)
        g_s, g_d = s.build(plugins.registry, rel.constraints()), d.build(plugins.registry, rel.constraints())
        r = graphguard.verify(g_s, g_d, rel, replay=True)
        assert r.verdict == verdict and r.r_o_lines() == ["grad.w = grad.w@0"] and r.replay["ok"]
    assert r.expect["missing"] == [("grad.w", "grad.w@1", ["grad.w@0"])]
    assert "not the expected grad.w@1" in r.failure.reason and r.failure.replay["max_abs_diff"] > 1e-3


def test_held_outputs_keep_only_held_expressions(plugins):
    """R_o is the certificate of what the ranks hold: an all-reduced output is out@r, not also the sum of
    the partial products (which are G_d outputs too here)."""
    s, d, text = _row_parallel_docs(2, all_reduce=True)
    d.output("P@0", "P@1")
    rel = parse_relation_text(text, "relation.yaml", plugins.registry)
    s, d = s.build(plugins.registry, rel.constraints()), d.build(plugins.registry, rel.constraints())
    r = graphguard.verify(s, d, rel)
    assert r.verdict == "refines" and sorted(r.r_o_lines()) == ["out = out@0", "out = out@1"]
    r = graphguard.verify(s, d, rel, allow_partial=True)
    assert "out = sum(P@0, P@1)" in r.r_o_lines()


# -- allowances ------------------------------------------------------------------------------------------------

def test_allow_partial_per_output_in_the_relation_file(plugins):
    r = graphguard.verify(*_row_parallel(plugins, 2, relation="allow_partial: [out]\n"), replay=True)
    assert r.verdict == "refines" and r.r_o_lines() == ["out = sum(out@0, out@1)"] and r.replay["ok"]


def test_allow_partial_in_the_python_api(plugins):
    assert graphguard.verify(*_row_parallel(plugins, 2), allow_partial=["out"]).verdict == "refines"
    assert graphguard.verify(*_row_parallel(plugins, 2), allow_partial="out").verdict == "refines"
    assert graphguard.verify(*_row_parallel(plugins, 2), allow_partial=True).verdict == "refines"
    with pytest.raises(graphguard.InputError, match="'Y' is not an output"):
        graphguard.verify(*_row_parallel(plugins, 2), allow_partial=["Y"])


def test_an_expected_sum_allows_it(plugins):
    r = graphguard.verify(*_row_parallel(plugins, 2, relation="expect:\n  out: sum(out@0, out@1)\n"))
    assert r.verdict == "refines" and r.expect == {"checked": 1, "missing": []}


def test_allow_partial_names_outputs_only(plugins):
    with pytest.raises(graphguard.InputError, match=r"relation.yaml:5:\d+: allow_partial: 'H' is not an output"):
        graphguard.verify(*_row_parallel(plugins, 2, relation="allow_partial: [H]\n"))
    with pytest.raises(graphguard.InputError, match="allow_partial' lists output names"):
        parse_relation_text("inputs: {}\nallow_partial: {out: 1}\n", "rel", plugins.registry)


def test_cli_flag_and_file(tmp_path):
    spec, impl, rel = _row_parallel_files(tmp_path)
    args = ("verify", "--spec", spec, "--impl", impl, "--relation", rel)
    p = run_cli(*args)
    assert p.returncode == 1 and PARTIAL in p.stdout and "stopped at G_s operator core.matmul (node 'fc2'" in p.stdout
    p = run_cli(*args, "--allow-partial")
    assert p.returncode == 0 and "out = sum(out@0, out@1)" in p.stdout
    spec, impl, rel = _row_parallel_files(tmp_path, relation="allow_partial:\n  - out\n")
    p = run_cli("verify", "--spec", spec, "--impl", impl, "--relation", rel)
    assert p.returncode == 0 and "out = sum(out@0, out@1)" in p.stdout


# -- --expect FILE ---------------------------------------------------------------------------------------------

def test_expect_file_with_only_expect(tmp_path):
    d = write_example(tmp_path)
    (tmp_path / "expect.yaml").write_text("expect:\n  F: concat(F@0, F@1, dim=0)\n")
    r = graphguard.verify(*files(d), expect=tmp_path / "expect.yaml")
    assert r.verdict == "refines" and r.expect == {"checked": 1, "missing": []}
    p = run_cli("verify", *sum((["--" + k, str(v)] for k, v in zip(("spec", "impl", "relation"), files(d))), []),
                "--expect", tmp_path / "expect.yaml")
    assert p.returncode == 0 and "expected relations: all 1 found in R_o" in p.stdout
    (tmp_path / "expect.yaml").write_text("expect:\n  F: concat(F@1, F@0, dim=0)\n")
    r = graphguard.verify(*files(d), expect=tmp_path / "expect.yaml")
    assert r.verdict == "does-not-refine" and r.expect["missing"][0][0] == "F"


def test_expect_file_errors_name_the_file(tmp_path):
    d = write_example(tmp_path)
    (tmp_path / "expect.yaml").write_text("expect:\n  F: concat(F@0, Q@1, dim=0)\n")
    p = run_cli("verify", *sum((["--" + k, str(v)] for k, v in zip(("spec", "impl", "relation"), files(d))), []),
                "--expect", tmp_path / "expect.yaml")
    assert p.returncode == 2 and "expect.yaml:2:3: 'Q@1'" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    (tmp_path / "expect.yaml").write_text("")
    p = run_cli("verify", *sum((["--" + k, str(v)] for k, v in zip(("spec", "impl", "relation"), files(d))), []),
                "--expect", tmp_path / "expect.yaml")
    assert p.returncode == 2 and "expect" in p.stderr


def test_expect_file_allows_partial(tmp_path, plugins):
    s, d, rel = _row_parallel(plugins, 2)
    (tmp_path / "expect.yaml").write_text("allow_partial: [out]\n")
    assert graphguard.verify(s, d, rel, expect=tmp_path / "expect.yaml").verdict == "refines"


# -- expectations written by capture -----------------------------------------------------------------------

def test_gradient_expectations_follow_the_input_layout():
    from graphguard.frontends.fx.relations import gradient_expectations
    inputs = {"w": ["w@0", "w@1"], "v": "concat(v@0, v@1, dim=0)", "p": "sum(p@0, p@1)", "m": "max(m@0, m@1)",
              "x": "concat(x@0, x@1, dim=0)", "t": "t@0"}
    s_out = ["out0", "grad.w", "grad.v", "grad.p", "grad.m", "grad.x"]
    d_out = [f"{n}@{r}" for n in ("out0", "grad.w", "grad.v", "grad.p", "grad.m") for r in (0, 1)] + ["grad.x@0"]
    assert gradient_expectations(inputs, s_out, d_out) == {
        "grad.w": ["grad.w@0", "grad.w@1"],  # replicated stays replicated: all-reduced, not partial
        "grad.v": "concat(grad.v@0, grad.v@1, dim=0)",
        "grad.p": ["grad.p@0", "grad.p@1"],  # the gradient of a partial value is the whole gradient on each rank
    }  # (no layout for a max; none where G_d lacks a piece: grad.x@1; none for a tensor with no gradient: t)


def _linear():
    import torch
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4, bias=False)


def _row_parallel_dtensor(use_local_output: bool, **user):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Partial
    from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module
    import graphguard.torch as ggt
    plan = RowwiseParallel(output_layouts=Partial(), use_local_output=use_local_output)
    s = ggt.capture(lambda r: _linear(), (torch.randn(3, 8),))
    d = ggt.capture(lambda r: parallelize_module(_linear(), init_device_mesh("cpu", (2,)), plan),
                    lambda r: (torch.randn(3, 4),), world_size=2)
    user = {"inputs": {"args.0": "concat(args.0@0, args.0@1, dim=1)"}, **user}
    return s, d, ggt.input_relation(s, d, user)


def test_dtensor_partial_output_placement_allows_the_sum():
    """RowwiseParallel(output_layouts=Partial()) returns a DTensor stating its partial sums: expected, allowed."""
    s, d, rel = _row_parallel_dtensor(use_local_output=False)
    assert rel["expect"] == {"out0": "sum(out0@0, out0@1)"}
    r = graphguard.verify(s.graph(), d.graph(), rel, replay=True)
    assert r.verdict == "refines", r.render()
    assert r.r_o_lines() == ["out0 = sum(out0@0, out0@1)"] and r.replay["ok"]


def test_dtensor_partial_output_taken_local_is_left_partial():
    """The same program with to_local(): a plain tensor states nothing, and the partial sums reach the output."""
    s, d, rel = _row_parallel_dtensor(use_local_output=True)
    assert "expect" not in rel
    r = graphguard.verify(s.graph(), d.graph(), rel, replay=True)
    assert r.verdict == "does-not-refine" and PARTIAL in r.failure.reason
    assert r.failure.op == "aten.mm" and r.failure.replay["max_abs_diff"] > 1e-3
    # a model file's relation() may allow it (kept in the relation written)
    s, d, rel = _row_parallel_dtensor(use_local_output=True, allow_partial="out0")
    assert rel["allow_partial"] == ["out0"]
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "refines" and r.r_o_lines() == ["out0 = sum(out0@0, out0@1)"]


def test_jax_output_shardings_are_expectations():
    import graphguard.jax  # noqa: F401  (before jax: host devices)
    import importlib.util
    import jax
    from jax.sharding import AxisType
    spec = importlib.util.spec_from_file_location("jax_mlp_gspmd_refines", EXAMPLES / "jax-mlp-gspmd" / "model.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    mesh = jax.make_mesh((2,), ("tp",), axis_types=(AxisType.Auto,), devices=jax.devices()[:2])
    cap = graphguard.jax.capture(m.spec(), m.inputs(), mesh=mesh, in_shardings=m.in_specs(2), backward=True)
    # the result and the gradients of the replicated x and b2 on every rank; the others sharded like their inputs
    assert cap.relation["expect"] == {
        "out0": ["out0@0", "out0@1"], "out1": ["out1@0", "out1@1"], "out2": "concat(out2@0, out2@1, dim=1)",
        "out3": "concat(out3@0, out3@1, dim=0)", "out4": "concat(out4@0, out4@1, dim=0)", "out5": ["out5@0", "out5@1"]}
    r = cap.verify(replay=True)
    assert r.verdict == "refines" and r.expect == {"checked": 9, "missing": []} and r.replay["ok"]


def _tp_mlp(world: int, reduce: bool):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    class MLP(torch.nn.Module):  # column-parallel fc1, GeLU, row-parallel fc2: the block's output projection
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.fc1, self.fc2 = torch.nn.Linear(8, 16 // world), torch.nn.Linear(16 // world, 8, bias=False)

        def forward(self, x):
            y = self.fc2(torch.nn.functional.gelu(self.fc1(x)))
            return funcol.all_reduce(y, "sum", dist.group.WORLD) if world > 1 and reduce else y
    return MLP()


@pytest.mark.parametrize("reduce", [True, False])
def test_pytorch_row_parallel_output_projection(reduce):
    """Megatron's MLP returning fc2's output: without the all-reduce, exit 1 with no expectation written."""
    import torch
    import graphguard.torch as ggt
    x = torch.randn(4, 8)
    s = ggt.capture(lambda r: _tp_mlp(1, reduce), (x,))
    d = ggt.capture(lambda r: _tp_mlp(2, reduce), (x,), world_size=2)
    cat = lambda n, k: f"concat({n}@0, {n}@1, dim={k})"  # noqa: E731
    rel = ggt.input_relation(s, d, {"inputs": {"x": ["x@0", "x@1"], "fc1.weight": cat("fc1.weight", 0),
                                               "fc1.bias": cat("fc1.bias", 0), "fc2.weight": cat("fc2.weight", 1)}})
    assert "expect" not in rel
    r = graphguard.verify(s.graph(), d.graph(), rel, replay=True)
    if reduce:
        assert r.verdict == "refines" and sorted(r.r_o_lines()) == ["out0 = out0@0", "out0 = out0@1"]
    else:
        assert r.verdict == "does-not-refine" and r.exit_code == 1 and PARTIAL in r.failure.reason
        assert r.failure.op == "aten.mm" and r.failure.partial_output == "out0"
        assert r.failure.replay["max_abs_diff"] > 1e-3
    assert r.replay["ok"]


@pytest.mark.parametrize("extra", [None, "core.neg", "other-op"])
def test_a_replicated_output_one_rank_computes_otherwise_names_where_the_ranks_part(plugins, extra):
    """An output every rank should hold alike (expected ``[out@0, out@1]``): where rank 1 runs another operator,
    or one more, the hint names it; where both run the same operators, the failure keeps the general hint."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [4, 8])
    s.op("core.relu", ["X"], "A", name="act", loc="m.py:1")
    s.op("core.identity", ["A"], "out", name="output")
    s.output("out")
    for r in range(2):
        d.input(f"X@{r}", [4, 8])
        op = "core.exp" if (r == 1 and extra == "other-op") else "core.relu"
        d.op(op, [f"X@{r}"], f"A@{r}", loc="m.py:1")
        last = f"A@{r}"
        if r == 1 and extra == "core.neg":
            d.op("core.neg", [last], "N@1", loc="m.py:9")
            last = "N@1"
        d.op("core.identity", [last], f"out@{r}")
    d.output("out@0", "out@1")
    text = "inputs:\n  X: [X@0, X@1]\nexpect:\n  out: [out@0, out@1]\n"
    rel = parse_relation_text(text, "relation.yaml", plugins.registry)
    cx = rel.constraints()
    r = graphguard.verify(s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel, plugins=plugins)
    if extra is None:
        assert r.verdict == "refines", r.render()
        return
    assert r.verdict == "does-not-refine" and "not the expected out@1" in r.failure.reason, r.render()
    if extra == "core.neg":
        assert "until core.neg (" in r.failure.hint and "m.py:9" in r.failure.hint, r.failure.hint
    else:
        assert "until core.exp (" in r.failure.hint and "where the other rank runs core.relu" in r.failure.hint, \
            r.failure.hint
