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
    _C::rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size, Tensor cos_sin_cache,
                         bool is_neox) -> ()
        each head's first rot_dim entries of query and key rotated by row positions[t] of cos_sin_cache
        ([max_position, rot_dim]: cosines, then sines); neox pairs (x[i], x[i + rot/2]), GPT-J (x[2i], x[2i+1])
    vllm::unified_attention_with_output(Tensor query, Tensor key, Tensor value, Tensor! output, str layer_name,
                                        Tensor? output_scale=None, Tensor? output_block_scale=None) -> ()
        output = causal grouped-query attention, scale head_size ** -0.5 (what the layer asks for)
    vllm::all_reduce(Tensor tensor, str group_name) -> Tensor

The attention stand-in plays one sequence in prefill: vLLM's kernel reads the scale, the mask and the KV
cache from the layer named ``layer_name`` and the forward context, which a stand-in does not have.

Import it as a module (``sys.path`` + ``import vllm_ops``): an operator can be registered only once.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F


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


def _rotate(positions, x, head_size, cos_sin_cache, is_neox):
    """vLLM's ``RotaryEmbedding.forward_native`` on one of query/key ([tokens, ...], whole heads per token)."""
    t, rot = positions.shape[0], cos_sin_cache.shape[1]
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
    cos, sin = cos.unsqueeze(-2).to(x.dtype), sin.unsqueeze(-2).to(x.dtype)
    heads = x.reshape(t, -1, head_size)
    x_rot, x_pass = heads[..., :rot], heads[..., rot:]
    if is_neox:
        x1, x2 = torch.chunk(x_rot, 2, dim=-1)
    else:
        x1, x2 = x_rot[..., ::2], x_rot[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    o = torch.cat((o1, o2), dim=-1) if is_neox else torch.stack((o1, o2), dim=-1).flatten(-2)
    return torch.cat((o, x_pass), dim=-1).reshape(x.shape)


@torch.library.custom_op("_C::rotary_embedding", mutates_args=("query", "key"),
                         schema="(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, "
                                "Tensor cos_sin_cache, bool is_neox) -> ()")
def rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox):
    query.copy_(_rotate(positions, query, head_size, cos_sin_cache, is_neox))
    if key is not None:
        key.copy_(_rotate(positions, key, head_size, cos_sin_cache, is_neox))


@rotary_embedding.register_fake
def _(positions, query, key, head_size, cos_sin_cache, is_neox):
    return None


@torch.library.custom_op("vllm::unified_attention_with_output", mutates_args=("output",),
                         schema="(Tensor query, Tensor key, Tensor value, Tensor(a!) output, str layer_name, "
                                "Tensor? output_scale=None, Tensor? output_block_scale=None) -> ()")
def unified_attention_with_output(query, key, value, output, layer_name, output_scale=None, output_block_scale=None):
    if output_scale is not None or output_block_scale is not None:
        raise NotImplementedError("quantised attention outputs")
    q, k, v = (x.transpose(0, 1) for x in (query, key, value))  # [heads, tokens, head_size]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    output.copy_(out.transpose(0, 1))


@unified_attention_with_output.register_fake
def _(query, key, value, output, layer_name, output_scale=None, output_block_scale=None):
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


def rotary_embedding_(positions, query, key, head_size, cos_sin_cache, is_neox=True):
    """vLLM's ``RotaryEmbedding.forward_cuda``: rotates query and key in place (views of the fused qkv
    output, as vLLM passes them) and returns them."""
    torch.ops._C.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)
    return query, key


def attention_(q, k, v, num_heads, num_kv_heads, head_size, layer_name):
    """vLLM's ``Attention.forward`` (use_output): the output buffer is allocated flat, viewed per head and
    written by the kernel; the flat view is returned."""
    out = torch.empty(q.shape[0], num_heads * head_size, dtype=q.dtype, device=q.device)
    torch.ops.vllm.unified_attention_with_output(
        q.view(-1, num_heads, head_size), k.view(-1, num_kv_heads, head_size), v.view(-1, num_kv_heads, head_size),
        out.view(-1, num_heads, head_size), layer_name)
    return out.view(-1, num_heads * head_size)


def tp_all_reduce(x, group=None):
    """vLLM's ``tensor_model_parallel_all_reduce``: ``vllm::all_reduce`` over the TP group's name."""
    group = group or dist.group.WORLD
    return torch.ops.vllm.all_reduce(x, group.group_name)
