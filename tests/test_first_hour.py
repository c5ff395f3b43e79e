"""What a new user meets in the first hour (issue 42): each error at the earliest point, in the user's terms,
with the exit code that means what happened (0 refines / done, 1 does not refine, 2 bad input, 3 inconclusive).

* ``capture --backward`` of a model whose forward is wrong reports the forward (exit 1, its report), never
  "write the tangent's relation" (exit 2);
* a relation that does not fit the captured programs is reported by ``capture``, naming the model file's
  ``relation(...)`` and the entry, not by ``verify`` afterwards;
* an HF TP plan that splits heads across more ranks than there are heads names the head count, the TP size
  and the plan entries;
* a closed output pipe (``| head``) exits 0 quietly;
* a model file imports the modules beside it;
* ``--help`` lists the exit codes; ``dump`` takes ``--world-size``.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from graphguard.cli import main

# a TP MLP in the shape of examples/mlp-tp/model.py: fc1 column-parallel, fc2 row-parallel, GELU after the
# all-reduce of fc2's partial sums; DROP=True drops the all-reduce (the forward bug)
MLP = '''
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

H, F, B = 8, 16, 4
DROP = {drop}
FC1_DIM = {fc1_dim}


class MLP(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.world = world
        self.fc1 = torch.nn.Linear(H, F // world, bias=False)
        self.fc2 = torch.nn.Linear(F // world, H, bias=False)

    def forward(self, x):
        y = self.fc2(torch.relu(self.fc1(x)))
        if self.world > 1 and not DROP:
            y = funcol.all_reduce(y, "sum", dist.group.WORLD)
        return torch.nn.functional.gelu(y)


def spec():
    return MLP(1)


def impl(rank, world):
    return MLP(world)


def inputs(rank, world):
    return (torch.randn(B, H, requires_grad=True),)


def relation(world, backward):
    cat = lambda n, d: f"concat({{', '.join(f'{{n}}@{{r}}' for r in range(world))}}, dim={{d}})"
    return {{"inputs": {{"x": [f"x@{{r}}" for r in range(world)], "{fc1_name}": cat("fc1.weight", FC1_DIM),
                       "fc2.weight": cat("fc2.weight", 1)}}}}
'''


def _model(tmp_path: Path, drop=False, fc1_dim=0, fc1_name="fc1.weight") -> Path:
    d = tmp_path / "model"
    d.mkdir()
    p = d / "model.py"
    p.write_text(MLP.format(drop=drop, fc1_dim=fc1_dim, fc1_name=fc1_name))
    return p


def gg(capsys, *args) -> tuple[int, str, str]:
    """``graphguard ARGS`` in this process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_backward_capture_of_a_forward_bug_reports_the_forward(tmp_path, capsys):
    """The forward drops its all-reduce: no tangent can be derived from a certificate it does not have. The
    user is told the forward does not refine, where (its report), and that the backward was not derived."""
    model = _model(tmp_path, drop=True)
    rc, out, err = gg(capsys, "capture", model, "--world-size", 2, "--backward", "-o", tmp_path / "out")
    assert rc == 1, (out, err)
    assert "DOES NOT REFINE" in out and "stopped at G_s operator aten.gelu" in out
    assert "model.py:" in out and "missing all-reduce" in out  # the forward's report: where, and its hint
    assert "the forward does not refine, so the backward was not derived" in err
    assert "write it in relation" not in err and "cannot derive" not in err
    assert not (tmp_path / "out" / "relation.yaml").exists()  # nothing to verify: no relation written


def test_relation_that_does_not_fit_is_reported_by_capture(tmp_path, capsys):
    """fc1.weight related as a concatenation along the wrong dim: capture says so (exit 2), naming the model
    file's relation(...) and both shapes -- not verify after it."""
    model = _model(tmp_path, fc1_dim=1)
    rc, out, err = gg(capsys, "capture", model, "--world-size", 2, "-o", tmp_path / "out")
    assert rc == 2, (out, err)
    assert err.startswith(f"graphguard: error: {model}: relation(world=2, backward=False): relation for fc1.weight "
                          f"has shape [8, 16] but fc1.weight has [16, 8]"), err
    assert not (tmp_path / "out" / "relation.yaml").exists()
    assert "Traceback" not in err


def test_relation_typo_is_reported_before_the_ranks_are_captured(tmp_path, capsys, monkeypatch):
    """A misspelt name: the closest input named, found on the sequential program (no rank captured)."""
    from graphguard.frontends.fx import model_file
    ranks = []
    real = model_file.capture_programs
    monkeypatch.setattr(model_file, "capture_programs",
                        lambda mod, path, w, b, which, pl=None: ranks.extend(which) or real(mod, path, w, b, which, pl))
    model = _model(tmp_path, fc1_name="fc1.wieght")
    rc, out, err = gg(capsys, "capture", model, "--world-size", 2, "-o", tmp_path / "out")
    assert rc == 2, (out, err)
    assert err.strip() == (f"graphguard: error: {model}: relation(world=2, backward=False): 'fc1.wieght' is not an "
                           f"input of the specification (did you mean 'fc1.weight'?)")
    assert ranks == [None]


def test_correct_model_captures(tmp_path, capsys):
    """The same file with the all-reduce and the right relation: captured, exit 0, the relation written (the
    checks above refuse only what does not fit)."""
    model = _model(tmp_path)
    rc, out, err = gg(capsys, "capture", model, "--world-size", 2, "--backward", "-o", tmp_path / "out")
    assert rc == 0, (out, err)
    rel = (tmp_path / "out" / "relation.yaml").read_text()
    assert "fc1.weight" in rel and "tangent.out0" in rel


HF_QWEN2 = '''
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.distributed import DistributedConfig

CONFIG = dict(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=16, tie_word_embeddings=False, use_cache=False,
              attn_implementation="eager")


class Logits(Qwen2ForCausalLM):
    def forward(self, input_ids):
        return super().forward(input_ids=input_ids).logits


def _model():
    torch.manual_seed(0)
    return Logits(Qwen2Config(**CONFIG))


def spec():
    return _model()


def impl(rank, world):
    model = _model()
    cfg, _, mesh = Logits.prepare_distribute_model(DistributedConfig(tp_size=world, tp_plan=model.tp_plan))
    return Logits.maybe_distribute_model(model, cfg, mesh)


def inputs(rank, world):
    torch.manual_seed(1)
    return (torch.randint(0, 64, (2, 16)),)
'''


def test_hf_plan_that_splits_kv_heads_names_the_heads_and_the_plan(tmp_path, capsys):
    """HF Qwen2 with 2 KV heads at TP 4: torch's "shape '[2, 16, -1, 16]' is invalid" alone names nothing;
    the line says the KV-head count, the TP size and the plan entries that split them."""
    pytest.importorskip("transformers")
    model = tmp_path / "model.py"
    model.write_text(HF_QWEN2)
    rc, out, err = gg(capsys, "capture", model, "--world-size", 4, "-o", tmp_path / "out")
    assert rc == 2, (out, err)
    assert "in module 'model.layers.0.self_attn'" in err
    assert "num_key_value_heads is 2, not a multiple of the TP size 4" in err
    assert '"model.layers.*.self_attn.k_proj": "colwise"' in err and "plan entries" in err
    assert len(err.strip().splitlines()) == 1


def test_closed_pipe_exits_0_quietly():
    """``graphguard lemmas list | head``: the reader closes the pipe; exit 0 (1 would mean "does not refine"),
    nothing on stderr."""
    p = subprocess.Popen([sys.executable, "-m", "graphguard", "lemmas", "list"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout.readline()  # a first line, then the reader goes away
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=300) == 0
    assert err == b""


def test_model_file_imports_its_neighbours(tmp_path):
    """``from layers import Block`` beside the model file works, each model file getting its own folder's
    module of that name; sys.path is as it was afterwards."""
    from graphguard.frontends.fx.model_file import load_model_file
    paths = []
    for width in (8, 6):
        d = tmp_path / f"m{width}"
        d.mkdir()
        (d / "layers.py").write_text(f"H = {width}\n")
        (d / "model.py").write_text(textwrap.dedent("""
            from layers import H
            def spec(): return H
            def impl(rank, world): return H
            def inputs(rank, world): return ()
        """))
        paths.append(d / "model.py")
    before = list(sys.path)
    assert [load_model_file(p).H for p in paths] == [8, 6]
    assert load_model_file(paths[0]).H == 8  # (again: not the other folder's cached module)
    assert sys.path == before


def test_help_lists_the_exit_codes(capsys):
    """``verify --help`` lists every verdict's exit code as the code returns it, and the others."""
    from graphguard.engine.result import EXIT_CODES
    rc, out, _ = gg(capsys, "verify", "--help")
    assert rc == 0 and "Exit codes:" in out
    for verdict, code in EXIT_CODES.items():
        assert f"  {code}  {verdict.replace('-', ' ')}" in out, verdict
    assert "  2  bad input" in out and "  4  graphguard's own error" in out
    rc, out, _ = gg(capsys, "capture", "--help")
    assert rc == 0 and "  1  --backward: the forward does not refine" in out and "  0  captured" in out
    for cmd in (["sweep"], ["dump"], ["lemmas", "check"], ["lemmas", "list"], ["report"], ["plugins"]):
        rc, out, _ = gg(capsys, *cmd, "--help")
        assert rc == 0 and "Exit codes:" in out and "  2  " in out, cmd


HLO = """HloModule mlp_impl

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (x: f32[4,6], w: f32[6,6]) -> f32[4,6] {
  %x = f32[4,6]{1,0} parameter(0)
  %w = f32[6,6]{1,0} parameter(1)
  %p = f32[4,6]{1,0} dot(f32[4,6]{1,0} %x, f32[6,6]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %y = f32[4,6]{1,0} all-reduce(f32[4,6]{1,0} %p), channel_id=1, replica_groups={{0,1}}, to_apply=%sum
}
"""


def test_dump_takes_world_size(tmp_path, capsys):
    """A per-rank HLO module that declares no partitions: dump asks for --world-size, and takes it."""
    f = tmp_path / "impl.hlo"
    f.write_text(HLO)
    rc, out, err = gg(capsys, "dump", "--frontend", "hlo", "--role", "impl", f)
    assert rc == 2 and "pass --world-size" in err
    rc, out, err = gg(capsys, "dump", "--frontend", "hlo", f, "--world-size", 2)
    assert rc == 0, err
    assert out.startswith("graph ") and "(world size 2)" in out.splitlines()[0] and "x@1" in out
    rc, out, err = gg(capsys, "dump", "--frontend", "hlo", "--role", "spec", f, "--world-size", 2)
    assert rc == 2 and "--world-size is for a distributed graph" in err


# -- hints from the numbers: a constant factor says how many times, where it entered and why -------------

def _verify_captured(out: Path):
    import graphguard
    return graphguard.verify(str(out / "spec.gg.json"), str(out / "impl.gg.json"), str(out / "relation.yaml"))


@pytest.mark.parametrize("which", ["hand-written", "examples/bugs/mlp-tp-grad-scale"])
def test_a_differentiable_all_reduce_gets_the_factor_hint(tmp_path, capsys, which):
    """A TP MLP reducing fc2's partial sums with the plain functional all_reduce: forward refines, backward
    all-reduces the replicated output gradient again -- every rank holds 2x the gradient at the backward
    matmul. The hint states the factor, the all-reduce where it entered (the user's line) and the usual causes;
    the verdict is does-not-refine (never refines)."""
    from conftest import EXAMPLES
    model = _model(tmp_path) if which == "hand-written" else EXAMPLES / "bugs" / "mlp-tp-grad-scale" / "model.py"
    rc, out, err = gg(capsys, "capture", model, "--world-size", 2, "--backward", "-o", tmp_path / "out")
    assert rc == 0, err
    r = _verify_captured(tmp_path / "out")
    assert r.verdict == "does-not-refine" and r.failure.op == "aten.mm", r.render()
    hint = r.failure.hint
    assert hint.startswith("the ranks hold 2 times the value G_s computes (a constant factor 2)"), hint
    line = 21 if which == "hand-written" else 51  # the all_reduce call in the model file
    assert f"the factor entered at core.all_reduce over ranks [0, 1] (all_reduce.g0_1.1 at model.py:{line} in " \
           f"forward, its backward)" in hint, hint
    assert "a differentiable all-reduce whose backward reduces again" in hint
    assert "a loss not divided by the micro-batch count" in hint and "averaged and summed" in hint
    assert "no G_d collective is within" not in hint


def test_the_factor_hint_is_not_given_where_the_gradient_is_right(tmp_path, capsys):
    """The same MLP with Megatron's f/g (examples/mlp-tp): refines forward and backward; no failure, no hint."""
    from conftest import EXAMPLES
    rc, out, err = gg(capsys, "capture", EXAMPLES / "mlp-tp" / "model.py", "--world-size", 2, "--backward", "-o",
                      tmp_path / "out")
    assert rc == 0, err
    r = _verify_captured(tmp_path / "out")
    assert r.verdict == "refines" and r.failure is None, r.render()
