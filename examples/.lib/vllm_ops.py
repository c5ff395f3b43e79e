"""vLLM's custom operators as PyTorch stand-ins with vLLM's names and schemas, in plain torch (no GPU, no vllm).

vLLM's CUDA kernels write into an ``out`` argument (``Tensor!``) and return nothing; captured graphs hold
them under ``auto_functionalized`` (graphguard's fx frontend maps the mutated argument to the op's
functional result). ``vllm::all_reduce(tensor, group_name)`` is vLLM's tensor-parallel all-reduce: a
sum over the named process group, like ``torch.distributed._functional_collectives.all_reduce``.
graphguard knows them through the ``vllm`` lemma pack (``lemma_packs/vllm``).

    _C::rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()
    _C::fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor weight, float epsilon) -> ()
        residual <- input + residual; input <- rms_norm(input + residual)
    _C::silu_and_mul(Tensor! result, Tensor input) -> ()       result = silu(x[..., :d]) * x[..., d:]
    vllm::all_reduce(Tensor tensor, str group_name) -> Tensor

Import it as a module (``sys.path`` + ``import vllm_ops``): an operator can be registered only once.
"""
import torch
import torch.distributed as dist


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * w.to(y.dtype)).to(x.dtype)


@torch.library.custom_op("_C::rms_norm", mutates_args=("result",))
def rms_norm(result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    result.copy_(_rms(input, weight, epsilon))


@rms_norm.register_fake
def _(result, input, weight, epsilon):
    return None


@torch.library.custom_op("_C::fused_add_rms_norm", mutates_args=("input", "residual"))
def fused_add_rms_norm(input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float) -> None:
    s = input + residual
    residual.copy_(s)
    input.copy_(_rms(s, weight, epsilon))


@fused_add_rms_norm.register_fake
def _(input, residual, weight, epsilon):
    return None


@torch.library.custom_op("_C::silu_and_mul", mutates_args=("result",))
def silu_and_mul(result: torch.Tensor, input: torch.Tensor) -> None:
    d = input.shape[-1] // 2
    result.copy_(torch.nn.functional.silu(input[..., :d]) * input[..., d:])


@silu_and_mul.register_fake
def _(result, input):
    return None


@torch.library.custom_op("vllm::all_reduce", mutates_args=())
def all_reduce(tensor: torch.Tensor, group_name: str) -> torch.Tensor:
    c10d = torch.ops._c10d_functional
    return c10d.wait_tensor(c10d.all_reduce(tensor, "sum", group_name))


@all_reduce.register_fake
def _(tensor, group_name):
    return torch.empty_like(tensor)


# -- how vLLM's layers call them (allocate the output, let the kernel write it) ------------------------

def rms_norm_(x, weight, eps):
    out = torch.empty_like(x)
    torch.ops._C.rms_norm(out, x, weight, eps)
    return out


def fused_add_rms_norm_(x, residual, weight, eps):
    """(normed, new residual) -- vLLM's ``RMSNorm.forward(x, residual)``; clones so the caller's tensors stay."""
    x, residual = x.clone(), residual.clone()
    torch.ops._C.fused_add_rms_norm(x, residual, weight, eps)
    return x, residual


def silu_and_mul_(x):
    out = x.new_empty(*x.shape[:-1], x.shape[-1] // 2)
    torch.ops._C.silu_and_mul(out, x)
    return out


def tp_all_reduce(x, group=None):
    """vLLM's ``tensor_model_parallel_all_reduce``: ``vllm::all_reduce`` over the TP group's name."""
    group = group or dist.group.WORLD
    return torch.ops.vllm.all_reduce(x, group.group_name)
