"""Write the small torch.export archives the bad-input corpus mutates: ``spec.pt2`` (a linear layer plus
relu) and ``r0.pt2``/``r1.pt2`` (the same layer row-parallel on two ranks, joined by an all-reduce), with
``relation.yaml``: ``python3 tests/data/pt2/make.py``. Stack traces in the archives name this file
relative to this folder."""
from pathlib import Path

import zipfile

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.testing._internal.distributed.fake_pg import FakeStore

HERE = Path(__file__).resolve().parent


class Rowwise(torch.nn.Module):
    """y = relu(all_reduce(x_r @ w_r^T) + b)."""

    def __init__(self, world):
        super().__init__()
        self.world = world
        self.w = torch.nn.Parameter(torch.randn(4, 8 // world))
        self.b = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        y = x @ self.w.t()
        if self.world > 1:
            y = funcol.all_reduce(y, "sum", dist.group.WORLD)
        return torch.relu(y + self.b)


def export(module, args, path, rank=None, world=1):
    if rank is not None:
        dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        torch.export.save(torch.export.export(module, args).run_decompositions(), str(path))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    with zipfile.ZipFile(path) as z:
        members = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w") as z:
        for info, data in members:
            z.writestr(info, data.replace(f"{HERE}/".encode(), b"") if info.filename.endswith(".json") else data)


if __name__ == "__main__":
    torch.manual_seed(0)
    export(Rowwise(1), (torch.randn(3, 8),), HERE / "spec.pt2")
    for r in range(2):
        export(Rowwise(2), (torch.randn(3, 4),), HERE / f"r{r}.pt2", rank=r, world=2)
    (HERE / "relation.yaml").write_text("inputs:\n  x: concat(x@0, x@1, dim=1)\n  w: concat(w@0, w@1, dim=1)\n"
                                        "  b: [b@0, b@1]\n")
