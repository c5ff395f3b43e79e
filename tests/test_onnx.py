"""The onnx frontend and the onnx lemma pack: reading models (and every malformed-input class: exit 2, one
line), shape functions against onnx.shape_inference, references against onnx.reference, every lemma of the pack
through the fuzzer, proofs and must-not-proves, TP models built with onnx.helper (fast), and the examples
(captured with torch.onnx.export: tests/test_onnx_examples.py)."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import run_cli

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from graphguard.engine.fuzz import check_identity, fuzz_rule  # noqa: E402
from graphguard.testing import proves  # noqa: E402
from graphguard.frontends import LoadRequest  # noqa: E402
from graphguard.ir.scalar import Constraints  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def model(nodes, inputs, outputs, inits=(), opset=20, ms=False, **kw):
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1),
                                                helper.make_opsetid("ai.graphguard", 1)] if ms else [])
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=ops, **kw)


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def w(name, shape, t=np.float32):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal(shape).astype(t), name)


def ints(name, values):
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def save(tmp_path, name, m):
    p = tmp_path / name
    p.write_bytes(m.SerializeToString())
    return p


# -- a Megatron-style TP MLP built with onnx.helper (spec, rank models with com.microsoft AllReduce) -----

def mlp(world: int, rank: int | None, allreduce: bool = True):
    f = 16 // world
    nodes = [helper.make_node("Transpose", ["w1"], ["w1t"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "w1t"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Gelu", ["hb"], ["g"]),
             helper.make_node("Transpose", ["w2"], ["w2t"], perm=[1, 0]),
             helper.make_node("MatMul", ["g", "w2t"], ["y"])]
    last = "y"
    if rank is not None and allreduce:
        nodes.append(helper.make_node("AllReduce", ["y"], ["yr"], domain="com.microsoft"))
        last = "yr"
    nodes += [helper.make_node("Add", [last, "b2"], ["z"]), helper.make_node("Relu", ["z"], ["out"])]
    inits = [w("w1", [f, 8]), w("b1", [f]), w("w2", [8, f]), w("b2", [8])]
    return model(nodes, [vi("x", ["B", 4, 8])], [vi("out", ["B", 4, 8])], inits, ms=rank is not None)


MLP_REL = """inputs:
  x: [x@0, x@1]
  w1: concat(w1@0, w1@1, dim=0)
  b1: concat(b1@0, b1@1, dim=0)
  w2: concat(w2@0, w2@1, dim=1)
  b2: [b2@0, b2@1]
expect:
  out0: [out0@0, out0@1]
"""


def write_mlp(tmp_path, allreduce=True):
    spec = save(tmp_path, "spec.onnx", mlp(1, None))
    impl = [save(tmp_path, f"r{r}.onnx", mlp(2, r, allreduce)) for r in range(2)]
    rel = tmp_path / "rel.yaml"
    rel.write_text(MLP_REL)
    return spec, impl, rel


def test_tp_mlp_refines(tmp_path):
    spec, impl, rel = write_mlp(tmp_path)
    r = run_cli("verify", "--frontend", "onnx", "--spec", spec, "--impl", *impl, "--relation", rel, "--replay")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "REFINES" in r.stdout and "out0 = out0@0" in r.stdout and "replay: ok" in r.stdout


def verify_here(plugins, spec, impl, rel, **kw):
    import graphguard
    return graphguard.verify(str(spec), [str(p) for p in impl], str(rel), frontend="onnx", plugins=plugins, **kw)


def test_tp_mlp_without_its_all_reduce_is_flagged_at_the_add(tmp_path, plugins):
    spec, impl, rel = write_mlp(tmp_path, allreduce=False)
    r = verify_here(plugins, spec, impl, rel)
    assert r.exit_code == 1 and r.failure.op == "onnx.Add" and r.failure.node == "z", r.render()
    assert "y = sum(y@0, y@1)" in r.render()


def test_one_model_with_world_size(tmp_path, plugins):
    spec = save(tmp_path, "spec.onnx", mlp(1, None))
    m = mlp(1, 0)  # the full MLP and an all-reduce, on every rank
    impl = save(tmp_path, "impl.onnx", m)
    rel = tmp_path / "rel.yaml"
    rel.write_text("inputs:\n" + "".join(f"  {n}: [{n}@0, {n}@1]\n" for n in ("x", "w1", "b1", "w2", "b2")))
    r = verify_here(plugins, spec, [impl], rel, world_size=2)
    # each rank all-reduces a full result: out = relu(2 y + b2), not the spec's
    assert r.exit_code == 1 and r.failure.node == "z", r.render()


def test_dump_names_inputs_initializers_and_symbols(tmp_path, plugins):
    g = load_spec(plugins, save(tmp_path, "spec.onnx", mlp(1, None)))
    assert g.inputs == ["x", "w1", "b1", "w2", "b2"] and g.outputs == ["out0"]
    assert [str(d) for d in g.tensors["x"].shape] == ["B", "4", "8"]
    assert [(n.op, n.inputs) for n in g.nodes][:1] == [("core.permute", ["w1"])]


# -- a transformer block's operators: shapes against onnx.shape_inference -------------------------------

def block():
    """Attention + MLP pieces as torch.onnx.export writes them (static shapes, constant shape inputs)."""
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "g", "bt"], ["ln"], axis=-1, epsilon=1e-5),
        n("MatMul", ["ln", "wqkv"], ["qkv"]),
        n("Split", ["qkv", "split"], ["q", "k", "v"], axis=2),
        n("Reshape", ["q", "shp"], ["q4"]), n("Reshape", ["k", "shp"], ["k4"]), n("Reshape", ["v", "shp"], ["v4"]),
        n("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]), n("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        n("Transpose", ["v4"], ["vt"], perm=[0, 2, 1, 3]),
        n("MatMul", ["qt", "kt"], ["s"]), n("Div", ["s", "scale"], ["sd"]),
        n("Softmax", ["sd"], ["p"], axis=-1), n("MatMul", ["p", "vt"], ["a"]),
        n("Transpose", ["a"], ["at"], perm=[0, 2, 1, 3]), n("Reshape", ["at", "shp2"], ["a3"]),
        n("Slice", ["a3", "st", "en", "ax"], ["sl"]), n("Concat", ["sl", "sl"], ["cc"], axis=1),
        n("Unsqueeze", ["cc", "ax0"], ["un"]), n("Squeeze", ["un", "ax0"], ["sq"]),
        n("Cast", ["sq"], ["cd"], to=TensorProto.DOUBLE), n("ReduceSum", ["cd", "axl"], ["rs"], keepdims=1),
        n("ReduceMean", ["sq", "axl"], ["rm"], keepdims=0), n("Sigmoid", ["rm"], ["sg"]),
        n("Tanh", ["sg"], ["th"]), n("Erf", ["th"], ["ef"]), n("Sub", ["ef", "th"], ["sb"]),
        n("Mul", ["sb", "sb"], ["ml"]), n("Pow", ["ml", "two"], ["pw"]), n("Sqrt", ["pw"], ["sr"]),
        n("Flatten", ["a3"], ["a2"], axis=2), n("Gemm", ["a2", "wo", "bo"], ["o2"], transB=1),
        n("Expand", ["bo", "eshape"], ["ex"]),
        # Gemm without C (alpha A B^T), LayerNormalization without bias (torch's bias=False)
        n("Gemm", ["a2", "wo"], ["o3"], transB=1, alpha=0.5), n("LayerNormalization", ["x", "g"], ["lnb"], axis=-1),
    ]
    inits = [w("g", [8]), w("bt", [8]), w("wqkv", [8, 24]), ints("split", [8, 8, 8]), ints("shp", [2, 4, 2, 4]),
             numpy_helper.from_array(np.asarray(2.0, np.float32), "scale"), ints("shp2", [2, 4, 8]),
             w("wo", [6, 8]), w("bo", [6]), ints("st", [1]), ints("en", [3]), ints("ax", [1]), ints("ax0", [0]),
             ints("axl", [-1]), numpy_helper.from_array(np.asarray(2.0, np.float32), "two"),
             ints("eshape", [3, 6])]
    outs = ["rs", "sr", "o2", "ex", "o3", "lnb"]
    return model(nodes, [vi("x", [2, 4, 8])], [helper.make_value_info(o, helper.TypeProto()) for o in outs], inits)


def masks():
    """A causal mask and an embedding lookup as exports write them: Shape/Gather/Range chains folded,
    ConstantOfShape, Less/Not/Where/Trilu, Gather of a weight by integer indices, Equal/Cast/Max/Abs."""
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["sh"]), n("Gather", ["sh", "one"], ["s"], axis=0),
             n("Range", ["zero", "s", "onei"], ["r"]), n("Unsqueeze", ["r", "ax0"], ["r0"]),
             n("Unsqueeze", ["r", "ax1"], ["r1"]), n("Less", ["r0", "r1"], ["m"]), n("Not", ["m"], ["keep"]),
             n("ConstantOfShape", ["shape2"], ["neg"], value=numpy_helper.from_array(np.asarray([-1e9], np.float32))),
             n("Where", ["keep", "x", "neg"], ["y"]), n("Trilu", ["y"], ["t"], upper=0),
             n("Gather", ["w", "idx"], ["e"], axis=0), n("Equal", ["e", "e"], ["eq"]), n("Cast", ["eq"], ["ef"], to=1),
             n("Max", ["t", "ef"], ["mx"]), n("Abs", ["mx"], ["ab"]), n("Log", ["ab"], ["lg"]),
             n("Min", ["lg", "ab"], ["mn"])]
    inits = [ints(k, v) for k, v in dict(one=1, zero=0, onei=1, ax0=[0], ax1=[1], shape2=[4, 4]).items()] + \
        [w("w", [10, 4]), ints("idx", [[1, 2, 3, 0], [4, 5, 6, 7], [1, 1, 1, 1], [9, 8, 7, 6]])]
    return model(nodes, [vi("x", [4, 4])], [helper.make_value_info("mn", helper.TypeProto())], inits)


def load_spec(plugins, path):
    return plugins.frontend("onnx").load(LoadRequest([str(path)], "spec", plugins.registry, Constraints()))


@pytest.mark.parametrize("build,least", [(block, 30), (masks, 8)], ids=["block", "masks"])
def test_shapes_agree_with_onnx_shape_inference(tmp_path, plugins, build, least):
    m = build()
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    want = {v.name: ([d.dim_value for d in v.type.tensor_type.shape.dim],
                     onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name)
            for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    g = load_spec(plugins, save(tmp_path, "block.onnx", m))
    compared = 0
    for name, (shape, dtype) in want.items():
        if name in g.tensors:
            t = g.tensors[name]
            assert [int(d) for d in t.shape] == shape, name
            assert t.dtype == dtype, name
            compared += 1
    assert compared >= least, compared
    ops = {n.op for n in g.nodes}
    assert build is masks or {"onnx.LayerNormalization", "onnx.MatMul", "onnx.Softmax", "onnx.Gemm", "onnx.ReduceSum",
            "onnx.ReduceMean", "onnx.Cast", "onnx.Expand", "core.reshape", "core.permute", "core.slice",
            "core.concat", "onnx.Pow", "onnx.Sqrt", "onnx.Erf"} <= ops


@pytest.mark.parametrize("build,shape", [(block, [2, 4, 8]), (masks, [4, 4])], ids=["block", "masks"])
def test_references_are_onnx_reference_evaluator(tmp_path, plugins, build, shape):
    """The graph's references (the pack's) against running the whole model in ReferenceEvaluator."""
    from onnx.reference import ReferenceEvaluator

    from graphguard.engine.replay import run_graph
    m = build()
    g = load_spec(plugins, save(tmp_path, "m.onnx", m))
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    feeds = {"x": x} | {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    want = ReferenceEvaluator(m).run(None, {"x": x})
    env = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v) for k, v in feeds.items() if k in g.inputs}
    got = run_graph(g, env, plugins.registry, {})
    for k, wv in enumerate(want):
        np.testing.assert_allclose(got[f"out{k}"], wv, rtol=1e-4, atol=1e-5)


def test_split_to_sequence_and_sequence_at(tmp_path, plugins):
    """torch.onnx.export writes tensor.split(n) as SplitToSequence + SequenceAt with constant positions."""
    n = helper.make_node
    m = model([n("SplitToSequence", ["x", "n"], ["seq"], axis=-1), n("SequenceAt", ["seq", "one"], ["y"])],
              [vi("x", [2, 6])], [vi("y", [2, 2])], [ints("one", 1), numpy_helper.from_array(np.asarray(2), "n")])
    g = load_spec(plugins, save(tmp_path, "seq.onnx", m))
    (sl,) = [nd for nd in g.nodes if nd.op == "core.slice" and nd.outputs[0] in
             {i for d in g.nodes for i in d.inputs}]
    assert dict(sl.attrs) == {"dim": 1, "start": 2, "end": 4}


# -- malformed input: exit 2, one line naming the file and the node ------------------------------------

def bad_models():
    n = helper.make_node
    x = [vi("x", [2, 4])]
    y = [vi("y", [2, 4])]
    yield "not-protobuf", b"\x00\x01garbage" * 10, "not an ONNX model"
    yield "no-graph", onnx.ModelProto(ir_version=8).SerializeToString(), "not an ONNX model"
    yield "old-opset", model([n("Relu", ["x"], ["y"])], x, y, opset=9), "opset 9 is not supported"
    yield "unsupported-op", model([n("Conv", ["x", "x"], ["y"])], x, y), "node 'y' (Conv)"
    yield "other-domain", model([n("Foo", ["x"], ["y"], domain="my.domain")], x, y), "(my.domain::Foo)"
    yield "if-computed", model([n("If", ["x"], ["y"], then_branch=helper.make_graph([], "t", [], y),
                                  else_branch=helper.make_graph([], "e", [], y))], x, y), \
        "If's condition must be a constant"
    yield "loop", model([n("Loop", ["", ""], ["y"], body=helper.make_graph([], "b", [], y))], x, y), \
        "subgraphs (Loop, Scan"
    yield "dynamic-reshape", model([n("Reshape", ["x", "x"], ["y"])], x, y), "Reshape's shape must be a constant"
    yield "slice-step", model([n("Slice", ["x", "s", "e", "a", "t"], ["y"])], x, y,
                              [ints("s", [0]), ints("e", [4]), ints("a", [1]), ints("t", [2])]), "steps other than 1"
    yield "bad-reshape", model([n("Reshape", ["x", "s"], ["y"])], x, y, [ints("s", [3, -1])]), "cannot reshape"
    yield "undefined-input", model([n("Relu", ["z"], ["y"])], x, y), "input 'z' is used before it is defined"
    yield "unknown-rank", model([n("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, None)], y), \
        "the shape is unknown"
    yield "no-dim", model([n("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, [None, 4])], y), \
        "neither a size nor a name"
    yield "bad-dtype", model([n("Relu", ["x"], ["y"])], [vi("x", [2], TensorProto.STRING)], y), \
        "unsupported element type"
    yield "recursive-function", model([n("F", ["x"], ["y"], domain="f.dom")], x, y, functions=[
        helper.make_function("f.dom", "F", ["a"], ["b"], [n("F", ["a"], ["b"], domain="f.dom")],
                             [helper.make_opsetid("", 20), helper.make_opsetid("f.dom", 1)])]), "nest deeper than"
    yield "function-attribute", model([n("F", ["x"], ["y"], domain="f.dom", nope=1)], x, y, functions=[
        helper.make_function("f.dom", "F", ["a"], ["b"], [n("Relu", ["a"], ["b"])], [helper.make_opsetid("", 20)])]), \
        "function F has no attribute nope"
    yield "unknown-function", model([n("G", ["x"], ["y"], domain="f.dom")], x, y), "defines no function f.dom::G"
    yield "skip-ln-no-gamma", model([n("SkipLayerNormalization", ["x", "x"], ["y"], domain="com.microsoft")], x, y,
                                    ms=True), "needs input, skip and gamma"
    yield "collective-in-spec", model([n("AllReduce", ["x"], ["y"], domain="com.microsoft")], x, y, ms=True), \
        "may hold no collective"
    yield "shape-mismatch", model([n("Add", ["x", "z"], ["y"])], x + [vi("z", [3])], y), "do not broadcast"
    yield "sequence-use", model([n("SplitToSequence", ["x"], ["s"], axis=0), n("Relu", ["s"], ["y"])], x, y), \
        "sequences are read only by SequenceAt"
    yield "squeeze-symbolic", model([n("Squeeze", ["x"], ["y"])], [vi("x", ["B", 1])], y), "Squeeze without axes"
    yield "no-outputs", model([n("Relu", ["x"], ["y"])], x, []), "no outputs"


def load_one_line(plugins, role, paths, world=None):
    """Load through the frontend in-process: the InputError's text (the CLI prints it as its one line, exit 2)."""
    from graphguard.errors import InputError
    req = LoadRequest([str(p) for p in paths], role, plugins.registry, Constraints(), world)
    with pytest.raises(InputError) as e:
        plugins.frontend("onnx").load(req)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("name,data,needle", list(bad_models()), ids=[b[0] for b in bad_models()])
def test_malformed_spec(tmp_path, plugins, name, data, needle):
    p = tmp_path / f"{name}.onnx"
    p.write_bytes(data if isinstance(data, bytes) else data.SerializeToString())
    msg = load_one_line(plugins, "spec", [p])
    assert str(p) in msg and needle in msg, msg


def test_malformed_input_exits_2_with_one_line(tmp_path):
    p = tmp_path / "conv.onnx"
    p.write_bytes(model([helper.make_node("Conv", ["x", "x"], ["y"])], [vi("x", [2, 4])], [vi("y", [2, 4])])
                  .SerializeToString())
    r = run_cli("dump", "--frontend", "onnx", "--role", "spec", p)
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(p) in lines[0] and "node 'y' (Conv)" in lines[0], r.stderr


def rank_model(node):
    return model([node], [vi("x", [2, 4])], [vi("y", [2, 4])], ms=True)


@pytest.mark.parametrize("files,world,needle", [
    ([helper.make_node("AllGather", ["x"], ["y"], domain="com.microsoft", group_size=2)] * 2, None,
     "AllGather needs an explicit axis"),
    ([helper.make_node("AllReduce", ["x"], ["y"], domain="com.microsoft", group_size=4)] * 2, None,
     "group_size 4 is not the world size 2"),
    ([helper.make_node("DistributedMatMul", ["x"], ["y"], domain="com.microsoft")] * 2, None,
     "the com.microsoft operators read are the collectives AllReduce, AllGather, AllToAll"),
    ([helper.make_node("ReduceScatter", ["x"], ["y"], domain="ai.graphguard", group_size=2)] * 2, None,
     "ReduceScatter needs an explicit axis"),
    ([helper.make_node("ReduceScatter", ["x"], ["y"], domain="ai.graphguard", group_size=2, axis=0,
                       reduction="prod")] * 2, None, "reduction 'prod'"),
    ([helper.make_node("AllReduce", ["x"], ["y"], domain="com.microsoft", reduction="max")] * 2, None,
     "com.microsoft AllReduce sums"),
    ([helper.make_node("Broadcast", ["x"], ["y"], domain="ai.graphguard", src=2)] * 2, None, "src 2 is not a rank"),
    ([helper.make_node("CollectivePermute", ["x"], ["y"], domain="ai.graphguard", source_target_pairs=[0, 1, 1, 1])]
     * 2, None, "each target once"),
    ([helper.make_node("CollectivePermute", ["x"], ["y"], domain="ai.graphguard", source_target_pairs=[0, 1]),
      helper.make_node("CollectivePermute", ["x"], ["y"], domain="ai.graphguard", source_target_pairs=[1, 0])],
     None, "deadlock"),
    ([helper.make_node("AllReduce", ["x"], ["y"], domain="com.microsoft"),
      helper.make_node("Relu", ["x"], ["y"])], None, "deadlock"),
    ([helper.make_node("Relu", ["x"], ["y"])], None, "needs --world-size"),
    ([helper.make_node("Relu", ["x"], ["y"])] * 2, 3, "got 2 ONNX files but --world-size 3"),
])
def test_malformed_impl(tmp_path, plugins, files, world, needle):
    paths = [save(tmp_path, f"r{k}.onnx", rank_model(node)) for k, node in enumerate(files)]
    msg = load_one_line(plugins, "impl", paths, world)
    assert needle in msg, msg


def test_all_gather_is_stitched(tmp_path, plugins):
    """AllGather(axis=1) of the column shards of x @ w1^T on every rank: the full product."""
    n = helper.make_node
    ranks = [model([n("MatMul", ["x", "w"], ["h"]), n("AllGather", ["h"], ["y"], domain="com.microsoft", axis=1,
                                                      group_size=2)],
                   [vi("x", [2, 4]), vi("w", [4, 3])], [vi("y", [2, 6])], ms=True) for _ in range(2)]
    spec = model([n("MatMul", ["x", "w"], ["y"])], [vi("x", [2, 4]), vi("w", [4, 6])], [vi("y", [2, 6])])
    rel = tmp_path / "rel.yaml"
    rel.write_text("inputs:\n  x: [x@0, x@1]\n  w: concat(w@0, w@1, dim=1)\nexpect:\n  out0: [out0@0, out0@1]\n")
    r = verify_here(plugins, save(tmp_path, "s.onnx", spec), [save(tmp_path, f"r{k}.onnx", m)
                                                               for k, m in enumerate(ranks)], rel, replay=True)
    assert r.exit_code == 0, r.render()


# -- the other collectives (com.microsoft AllToAll; ai.graphguard ReduceScatter, Broadcast, CollectivePermute):
# each proves its layout and is flagged where its attributes are wrong ------------------------------------

def check(tmp_path, plugins, spec_nodes, rank_nodes, ins, out_shape, rel, inits=(), rank_ins=None, **kw):
    """Verify a spec against per-rank models (rank_nodes(r) -> nodes); the result."""
    spec = model(spec_nodes, [vi(k, v) for k, v in ins.items()], [vi("y", out_shape)], inits)
    ranks = [model(rank_nodes(r), [vi(k, v) for k, v in (rank_ins or ins).items()], [vi("y", None)], ms=True)
             for r in range(2)]
    p = tmp_path / "rel.yaml"
    p.write_text(rel)
    return verify_here(plugins, save(tmp_path, "s.onnx", spec), [save(tmp_path, f"r{r}.onnx", m)
                                                                  for r, m in enumerate(ranks)], p, **kw)


def n(*a, **k):
    return helper.make_node(*a, **k)


@pytest.mark.parametrize("reduction,ok", [("sum", True), ("max", False)])
def test_reduce_scatter_of_partial_products(tmp_path, plugins, reduction, ok):
    """Row-parallel MatMul whose partial sums are reduce-scattered over the rows (sequence parallelism)."""
    r = check(tmp_path, plugins, [n("MatMul", ["x", "w"], ["y"])],
              lambda k: [n("MatMul", ["x", "w"], ["p"]),
                         n("ReduceScatter", ["p"], ["y"], domain="ai.graphguard", axis=0, group_size=2,
                           reduction=reduction)],
              {"x": [4, 6], "w": [6, 3]}, [4, 3],
              "inputs:\n  x: concat(x@0, x@1, dim=1)\n  w: concat(w@0, w@1, dim=0)\nexpect:\n"
              "  out0: concat(out0@0, out0@1, dim=0)\n", rank_ins={"x": [4, 3], "w": [3, 3]}, replay=ok)
    assert r.exit_code == (0 if ok else 1), r.render()
    if not ok:
        assert r.failure.op == "core.identity" or r.failure.node == "out0", r.render()


@pytest.mark.parametrize("twice", [True, False])
def test_all_to_all_twice_is_the_identity_at_two_ranks(tmp_path, plugins, twice):
    """AllToAll sends row-chunk j to rank j: at two ranks, applied twice it restores each rank's rows; once, the
    ranks hold interleaved rows -- not the row shards the expectation states."""
    def rank(k):
        nodes = [n("Relu", ["x"], ["h"]), n("AllToAll", ["h"], ["a"], domain="com.microsoft", group_size=2)]
        nodes += [n("AllToAll", ["a"], ["y"], domain="com.microsoft", group_size=2)] if twice else \
            [n("Identity", ["a"], ["y"])]
        return nodes
    r = check(tmp_path, plugins, [n("Relu", ["x"], ["y"])], rank, {"x": [4, 3]}, [4, 3],
              "inputs:\n  x: concat(x@0, x@1, dim=0)\nexpect:\n  out0: concat(out0@0, out0@1, dim=0)\n",
              rank_ins={"x": [2, 3]}, replay=True)
    if twice:
        assert r.exit_code == 0, r.render()
    else:
        assert r.exit_code != 0 and "out0 = concat(out0@0, out0@1, dim=0)" not in r.render(), r.render()


@pytest.mark.parametrize("src,ok", [(0, True), (1, False)])
def test_broadcast_from_the_rank_that_holds_the_input(tmp_path, plugins, src, ok):
    r = check(tmp_path, plugins, [n("Relu", ["x"], ["y"])],
              lambda k: [n("Broadcast", ["x"], ["b"], domain="ai.graphguard", src=src, group_size=2),
                         n("Relu", ["b"], ["y"])],
              {"x": [2, 3]}, [2, 3], "inputs:\n  x: x@0\nexpect:\n  out0: [out0@0, out0@1]\n")
    assert r.exit_code == (0 if ok else 1), r.render()
    if not ok:
        assert r.failure.op == "onnx.Relu", r.render()


@pytest.mark.parametrize("pairs,ok", [([0, 1], True), ([1, 0], False)])
def test_collective_permute_sends_to_its_target(tmp_path, plugins, pairs, ok):
    """Rank 0 holds x and sends it to rank 1, which computes y; pairs reversed, rank 1 gets rank 0's zeros and
    rank 0 rank 1's unrelated tensor."""
    r = check(tmp_path, plugins, [n("Relu", ["x"], ["y"])],
              lambda k: [n("CollectivePermute", ["x"], ["b"], domain="ai.graphguard", source_target_pairs=pairs),
                         n("Relu", ["b"], ["y"])],
              {"x": [2, 3]}, [2, 3], "inputs:\n  x: x@0\nexpect:\n  out0: out0@1\n", replay=ok)
    assert r.exit_code == (0 if ok else 1), r.render()
    if ok:
        assert "out0 = out0@1" in r.render()
    else:
        assert r.failure.op == "onnx.Relu", r.render()


# -- ONNX functions and If with a constant condition are inlined ---------------------------------------------

def scaled_relu(factor_attr: float | None):
    """Function S(a) = Relu(a * s), s an attribute of the call (default 2.0 when the call omits it)."""
    body = [n("Constant", [], ["c"]), n("Mul", ["a", "c"], ["m"]), n("Relu", ["m"], ["b"])]
    ref = helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT)
    ref.ref_attr_name = "s"
    body[0].attribute.append(ref)
    f = helper.make_function("my.fns", "S", ["a"], ["b"], body, [helper.make_opsetid("", 20)], [])
    f.attribute_proto.append(helper.make_attribute("s", 2.0))
    call = n("S", ["x"], ["y"], domain="my.fns", **({} if factor_attr is None else {"s": factor_attr}))
    return call, f


@pytest.mark.parametrize("factor,ok", [(None, True), (2.0, True), (3.0, False)])
def test_function_calls_are_inlined_with_their_attributes(tmp_path, plugins, factor, ok):
    call, f = scaled_relu(factor)
    spec = helper.make_model(helper.make_graph([call], "g", [vi("x", [4, 3])], [vi("y", [4, 3])]),
                             opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("my.fns", 1)],
                             functions=[f])
    ranks = [model([n("Constant", [], ["two"], value_float=2.0), n("Mul", ["x", "two"], ["m"]),
                    n("Relu", ["m"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])], ms=True) for _ in range(2)]
    p = tmp_path / "rel.yaml"
    p.write_text("inputs:\n  x: concat(x@0, x@1, dim=0)\n")
    r = verify_here(plugins, save(tmp_path, "s.onnx", spec), [save(tmp_path, f"r{k}.onnx", m)
                                                               for k, m in enumerate(ranks)], p, replay=ok)
    assert r.exit_code == (0 if ok else 1), r.render()
    if not ok:
        assert r.failure.op == "onnx.Mul" and "function my.fns::S" in (r.failure.loc or "") + r.render(), r.render()


def test_whole_tp_mlp_as_one_function(tmp_path, plugins):
    """The specification's MLP written as one local function of its inputs and weights (exporters emit
    functions per module): inlined, it is the same program; the implementation is plain."""
    m = mlp(1, None)
    g = m.graph
    params = [t.name for t in g.initializer]
    f = helper.make_function("mods", "MLP", ["x"] + params, ["out"], list(g.node), [helper.make_opsetid("", 20)])
    g2 = helper.make_graph([n("MLP", ["x"] + params, ["out"], domain="mods")], "g", list(g.input), list(g.output),
                           initializer=list(g.initializer))
    spec = helper.make_model(g2, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("mods", 1)],
                             functions=[f])
    impl = [save(tmp_path, f"r{r}.onnx", mlp(2, r)) for r in range(2)]
    rel = tmp_path / "rel.yaml"
    rel.write_text(MLP_REL)
    r = verify_here(plugins, save(tmp_path, "spec.onnx", spec), impl, rel, replay=True)
    assert r.exit_code == 0 and r.replay["ok"], r.render()
    bad = [save(tmp_path, f"b{r}.onnx", mlp(2, r, allreduce=False)) for r in range(2)]
    r = verify_here(plugins, save(tmp_path, "spec.onnx", spec), bad, rel)
    assert r.exit_code == 1 and r.failure.op == "onnx.Add", r.render()


@pytest.mark.parametrize("cond,ok", [(True, True), (False, False)])
def test_if_with_a_constant_condition_takes_its_branch(tmp_path, plugins, cond, ok):
    """The branch reads the enclosing scope (x) and has an initializer of its own."""
    then = helper.make_graph([n("Relu", ["x"], ["t"])], "then", [], [vi("t", [4, 3])])
    other = helper.make_graph([n("Mul", ["x", "k"], ["e"])], "else", [], [vi("e", [4, 3])],
                              initializer=[numpy_helper.from_array(np.asarray([[1, 1, -1]], np.int64), "ki")])
    other.node.insert(0, n("Cast", ["ki"], ["k"], to=F))
    c = numpy_helper.from_array(np.asarray(cond), "c")
    spec = model([n("If", ["c"], ["y"], then_branch=then, else_branch=other)], [vi("x", [4, 3])],
                 [vi("y", [4, 3])], [c])
    ranks = [model([n("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])], ms=True) for _ in range(2)]
    p = tmp_path / "rel.yaml"
    p.write_text("inputs:\n  x: concat(x@0, x@1, dim=0)\n")
    r = verify_here(plugins, save(tmp_path, "s.onnx", spec), [save(tmp_path, f"r{k}.onnx", m)
                                                               for k, m in enumerate(ranks)], p)
    assert r.exit_code == (0 if ok else 1), r.render()


# -- com.microsoft normalisations as the default-domain ops they fuse -------------------------------------------

def skip_norms():
    nodes = [n("SkipLayerNormalization", ["x", "s", "g", "b", "bias"], ["y1", "", "", "sum1"], domain="com.microsoft",
               epsilon=1e-5),
             n("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y2"], domain="com.microsoft", epsilon=1e-6),
             n("SimplifiedLayerNormalization", ["x", "g"], ["y3"], domain="com.microsoft", axis=-1, epsilon=1e-6),
             n("SkipLayerNormalization", ["x", "s", "g"], ["y4"], domain="com.microsoft")]
    inits = [w("s", [3, 4]), w("g", [4]), w("b", [4]), w("bias", [4])]
    return model(nodes, [vi("x", [2, 3, 4])], [vi(k, [2, 3, 4]) for k in ("y1", "sum1", "y2", "y3", "y4")], inits,
                 ms=True)


def test_com_microsoft_normalisations_compute_what_onnx_runtime_documents(tmp_path, plugins):
    from graphguard.engine.replay import run_graph
    m = skip_norms()
    g = load_spec(plugins, save(tmp_path, "m.onnx", m))
    assert {"onnx.LayerNormalization", "onnx.RMSNormalization", "onnx.Add"} <= {d.op for d in g.nodes}
    x = np.random.default_rng(1).standard_normal([2, 3, 4])
    p = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    got = run_graph(g, {"x": x} | {k: v for k, v in p.items() if k in g.inputs}, plugins.registry, {})

    def ln(v, eps, beta=0.0):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + eps) * p["g"] + beta

    def rms(v, eps):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * p["g"]
    s = x + p["s"] + p["bias"]
    for k, want in enumerate([ln(s, 1e-5, p["b"]), s, rms(x + p["s"], 1e-6), rms(x, 1e-6), ln(x + p["s"], 1e-12)]):
        np.testing.assert_allclose(got[f"out{k}"], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("before_allreduce", [False, True])
def test_skip_layer_norm_after_a_row_parallel_matmul(tmp_path, plugins, before_allreduce):
    """ORT's fused residual + LayerNorm after a row-parallel projection: right after the AllReduce; flagged on
    the partial sums."""
    ln = lambda a: n("SkipLayerNormalization", [a, "r", "g", "b"], ["y"], domain="com.microsoft")  # noqa: E731
    rank = [n("MatMul", ["x", "w"], ["p"])]
    rank += [ln("p"), n("Identity", ["y"], ["z"])] if before_allreduce else \
        [n("AllReduce", ["p"], ["q"], domain="com.microsoft"), ln("q")]
    spec = model([n("MatMul", ["x", "w"], ["p"]), ln("p")], [vi("x", [4, 6]), vi("r", [4, 3])], [vi("y", [4, 3])],
                 [w("w", [6, 3]), w("g", [3]), w("b", [3])])
    ranks = [model(rank, [vi("x", [4, 3]), vi("r", [4, 3])], [vi("y", [4, 3])], [w("w", [3, 3]), w("g", [3]),
                                                                                    w("b", [3])], ms=True)
             for _ in range(2)]
    p = tmp_path / "rel.yaml"
    p.write_text("inputs:\n  x: concat(x@0, x@1, dim=1)\n  w: concat(w@0, w@1, dim=0)\n  r: [r@0, r@1]\n"
                 "  g: [g@0, g@1]\n  b: [b@0, b@1]\n")
    r = verify_here(plugins, save(tmp_path, "s.onnx", spec), [save(tmp_path, f"r{k}.onnx", m)
                                                               for k, m in enumerate(ranks)], p, replay=True)
    if before_allreduce:  # the residual add still relates (added on one rank's share); the norm does not
        assert r.exit_code == 1 and r.failure.op == "onnx.LayerNormalization", r.render()
    else:
        assert r.exit_code == 0 and r.replay["ok"], r.render()


# -- the pack's lemmas: fuzzed against the ReferenceEvaluator references; proofs and must-not-proves -----

def test_every_onnx_lemma_passes_the_fuzzer(plugins):
    rules = [r for r in plugins.lemmas if r.lemma.pack == "onnx-ops"]
    assert len(rules) >= 60
    reports = [fuzz_rule(r, plugins.registry) for r in rules]
    bad = [(rep.rule.lemma.name, rep.why()) for rep in reports if not rep.ok]
    assert not bad, bad
    assert {r.lemma.ref for r in rules} >= {2001, 2002, 2003, 2004, 2010, 2011, 2012, 1201, 1203, 1205, 1207}


def test_identity_declarations(plugins):
    for op in plugins.registry:
        if op.name.startswith("onnx.") and op.identity:
            for decl, trials, why in check_identity(op, plugins.registry):
                assert why is None, (op.name, decl, why)


SH = {"X": [2, 3, 4], "A": [4, 2], "B": [4, 3], "P": [2, 3, 2], "Q": [2, 3, 2], "C": [2, 5], "E": [2, 5],
      "b1": [2], "b2": [3], "G": [4], "H": [4]}


@pytest.mark.parametrize("lhs,rhs", [
    ("onnx.MatMul(X, concat(A, B, dim=1))", "concat(onnx.MatMul(X, A), onnx.MatMul(X, B), dim=2)"),
    ("onnx.MatMul(concat(P, Q, dim=2), concat(C, E, dim=0))", "sum(onnx.MatMul(P, C), onnx.MatMul(Q, E))"),
    ("onnx.Gelu(onnx.Add(onnx.MatMul(X, concat(A, B, dim=1)), concat(b1, b2, dim=0)), approximate=none)",
     "concat(onnx.Gelu(onnx.Add(onnx.MatMul(X, A), b1), approximate=none),"
     " onnx.Gelu(onnx.Add(onnx.MatMul(X, B), b2), approximate=none), dim=2)"),
    ("onnx.Softmax(concat(P, Q, dim=0), axis=2)", "concat(onnx.Softmax(P, axis=2), onnx.Softmax(Q, axis=2), dim=0)"),
    ("onnx.LayerNormalization(concat(X, X, dim=1), G, H, normalized_shape=[4], epsilon=1/100000)",
     "concat(onnx.LayerNormalization(X, G, H, normalized_shape=[4], epsilon=1/100000),"
     " onnx.LayerNormalization(X, G, H, normalized_shape=[4], epsilon=1/100000), dim=1)"),
    ("onnx.ReduceSum(concat(P, Q, dim=2), axes=[2], keepdims=true)",
     "sum(onnx.ReduceSum(P, axes=[2], keepdims=true), onnx.ReduceSum(Q, axes=[2], keepdims=true))"),
])
def test_proves(lhs, rhs):
    assert proves(lhs, rhs, SH)


@pytest.mark.parametrize("lhs,rhs", [
    # the contraction split without its partial sum (the missing all-reduce)
    ("onnx.MatMul(concat(P, Q, dim=2), concat(C, E, dim=0))", "concat(onnx.MatMul(P, C), onnx.MatMul(Q, E), dim=2)"),
    # softmax / layer norm / mean along the cut dim are not the pieces'
    ("onnx.Softmax(concat(P, Q, dim=2), axis=2)", "concat(onnx.Softmax(P, axis=2), onnx.Softmax(Q, axis=2), dim=2)"),
    ("onnx.ReduceMean(concat(P, Q, dim=2), axes=[2], keepdims=true)",
     "sum(onnx.ReduceMean(P, axes=[2], keepdims=true), onnx.ReduceMean(Q, axes=[2], keepdims=true))"),
    # a nonlinear op of a partial sum
    ("onnx.Gelu(sum(P, Q), approximate=none)", "sum(onnx.Gelu(P, approximate=none), onnx.Gelu(Q, approximate=none))"),
    # a bias added on every rank before the all-reduce
    ("onnx.Add(sum(P, Q), b1)", "sum(onnx.Add(P, b1), onnx.Add(Q, b1))"),
    # Gemm's transB is not ignorable
    ("onnx.Gemm(S1, S2, c3, transB=0)", "onnx.Gemm(S1, S2, c3, transB=1)"),
])
def test_must_not_prove(lhs, rhs):
    assert not proves(lhs, rhs, dict(SH, S1=[3, 3], S2=[3, 3], c3=[3]))


def test_mutated_models_give_one_line_errors(tmp_path, plugins):
    """Random byte mutations of a valid model: each loads or fails with one InputError line, never a traceback."""
    import random

    from graphguard.errors import GraphGuardError
    data = block().SerializeToString()
    rng = random.Random(0)
    p = tmp_path / "m.onnx"
    for _ in range(300):
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(len(b))
            r = rng.random()
            if r < 0.6:
                b[k] = rng.randrange(256)
            elif r < 0.8:
                del b[k:k + rng.randint(1, 20)]
            else:
                b[k:k] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        p.write_bytes(bytes(b))
        try:
            plugins.frontend("onnx").load(LoadRequest([str(p)], "spec", plugins.registry, Constraints()))
        except GraphGuardError as e:
            assert "\n" not in str(e), str(e)


@pytest.mark.parametrize("param", ["__import__('os').system('touch PWNED')", "B" * 5000, "1e999999", "x**99999999"])
def test_dim_params_are_data(tmp_path, plugins, param):
    """A dim_param is read by graphguard's scalar grammar (never evaluated): a symbol, or a one-line error."""
    from graphguard.errors import GraphGuardError
    p = save(tmp_path, "m.onnx", model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [param, 2])],
                                       [vi("y", [param, 2])]))
    try:
        g = load_spec(plugins, p)
        assert len(g.tensors["x"].shape) == 2
    except GraphGuardError as e:
        assert "\n" not in str(e) and str(p) in str(e)
    assert not (tmp_path / "PWNED").exists() and not any(tmp_path.parent.glob("PWNED"))


# -- external data: a small integer initializer (a shape input) read from beside the model ------------------

def external_reshape(tmp_path, location="shape.bin", length=None, data=None):
    t = ints("shp", [2, 4])
    raw = t.raw_data or np.asarray([2, 4], np.int64).tobytes()
    (tmp_path / "shape.bin").write_bytes(b"\x00" * 8 + (raw if data is None else data))
    t.ClearField("raw_data")
    t.ClearField("int64_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in {"location": location, "offset": "8", **({"length": str(length)} if length else {})}.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    big = w("wt", [2, 4])  # a floating initializer stored outside: a parameter, never read
    big.ClearField("raw_data")
    big.data_location = TensorProto.EXTERNAL
    e = big.external_data.add()
    e.key, e.value = "location", "../../etc/passwd"
    m = model([n("Reshape", ["x", "shp"], ["r"]), n("Add", ["r", "wt"], ["y"])], [vi("x", [8])], [vi("y", [2, 4])],
              [t, big])
    return save(tmp_path, "m.onnx", m)


def test_external_shape_input_is_read_beside_the_model(tmp_path, plugins):
    g = load_spec(plugins, external_reshape(tmp_path, length=16))
    assert [int(d) for d in g.tensors["r"].shape] == [2, 4] and "wt" in g.inputs


@pytest.mark.parametrize("kw,needle", [
    ({"location": "../shape.bin"}, "not a file name relative to the model's folder"),
    ({"location": "/etc/hostname"}, "not a file name relative to the model's folder"),
    ({"location": "missing.bin"}, "missing.bin"),
    ({"length": 8}, "do not fit 16 bytes"),
    ({"data": b"\x02"}, "fewer than offset 8 + 16"),
])
def test_bad_external_data_is_one_line(tmp_path, plugins, kw, needle):
    msg = load_one_line(plugins, "spec", [external_reshape(tmp_path, **kw)])
    assert needle in msg, msg
