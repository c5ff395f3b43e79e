"""Bug (paper §6 bug 4): expert weights sharded instead of replicated under sequence parallelism.

An expert MLP (x @ A, GeLU, @ B) runs on sequence-sharded tokens. Under SP every rank needs the whole
expert, but this configuration still shards A on its output features and B on its input features, as tensor
parallelism would. Shapes stay consistent (X_r @ A_r, then @ B_r gives [tokens_r, hidden]), so nothing
crashes -- but the cross blocks X_0 @ A_1 and X_1 @ A_0 are never computed. Expected: flagged at the first
matmul (x @ A), the operator whose output no clean combination of the ranks' tensors rebuilds.
"""
import torch

HIDDEN, FFN, TOKENS = 8, 16, 8


class Expert(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.A = torch.nn.Parameter(torch.randn(HIDDEN, FFN // world))   # should be FFN on every rank
        self.B = torch.nn.Parameter(torch.randn(FFN // world, HIDDEN))

    def forward(self, x):  # x: [tokens (local shard), hidden]
        return torch.nn.functional.gelu(x @ self.A) @ self.B


def spec():
    return Expert(1)


def impl(rank, world):
    return Expert(world)


def inputs(rank, world):
    return (torch.randn(TOKENS if rank is None else TOKENS // world, HIDDEN),)


def relation(world, backward):
    cat = lambda n, d: f"concat({', '.join(f'{n}@{r}' for r in range(world))}, dim={d})"  # noqa: E731
    return {"inputs": {"x": cat("x", 0), "A": cat("A", 1), "B": cat("B", 0)}}
