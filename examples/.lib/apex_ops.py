"""Apex/Megatron-style fused layer norm as PyTorch custom operators (what ``apex.normalization.FusedLayerNorm``
gets from its CUDA extension), written in plain torch so the examples run anywhere.

Captured graphs hold them as opaque operators, ``apex.fused_layer_norm_affine`` (forward) and
``apex.fused_layer_norm_affine_bwd`` (the backward, called from the forward's ``register_autograd``);
graphguard knows them through the ``apex`` lemma pack (``lemma_packs/apex``). Like apex's
``forward_affine``, the forward returns (output, mean, invvar) with the statistics flattened to one value
per normalised row, in float32 (float64 for float64 input).

Import it as a module (``sys.path`` + ``import apex_ops``): an operator can be registered only once.
"""
import math

import torch


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _stat_shape(x: torch.Tensor, k: int) -> tuple:
    return tuple(x.shape[:x.dim() - k]) + (1,) * k


@torch.library.custom_op("apex::fused_layer_norm_affine", mutates_args=())
def fused_layer_norm_affine(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                            normalized_shape: list[int], eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    x = input.to(_acc(input.dtype))
    mean = x.mean(dims, keepdim=True)
    invvar = torch.rsqrt(x.var(dims, unbiased=False, keepdim=True) + eps)
    out = (x - mean) * invvar * weight.to(x.dtype) + bias.to(x.dtype)
    return out.to(input.dtype), mean.reshape(-1), invvar.reshape(-1)


@fused_layer_norm_affine.register_fake
def _(input, weight, bias, normalized_shape, eps):
    rows = math.prod(input.shape[:input.dim() - len(normalized_shape)])
    acc = _acc(input.dtype)
    return torch.empty_like(input), input.new_empty(rows, dtype=acc), input.new_empty(rows, dtype=acc)


@torch.library.custom_op("apex::fused_layer_norm_affine_bwd", mutates_args=())
def fused_layer_norm_affine_bwd(grad_output: torch.Tensor, mean: torch.Tensor, invvar: torch.Tensor,
                                input: torch.Tensor, weight: torch.Tensor,
                                normalized_shape: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    k = len(normalized_shape)
    dims = tuple(range(input.dim() - k, input.dim()))
    stat = _stat_shape(input, k)
    mean, invvar = mean.reshape(stat), invvar.reshape(stat)
    x, g = input.to(mean.dtype), grad_output.to(mean.dtype)
    xhat = (x - mean) * invvar
    gw = g * weight.to(mean.dtype)
    gx = invvar * (gw - gw.mean(dims, keepdim=True) - xhat * (gw * xhat).mean(dims, keepdim=True))
    d_w = (g * xhat).reshape(-1, *normalized_shape).sum(0)
    d_b = g.reshape(-1, *normalized_shape).sum(0)
    return gx.to(input.dtype), d_w.to(weight.dtype), d_b.to(weight.dtype)


@fused_layer_norm_affine_bwd.register_fake
def _(grad_output, mean, invvar, input, weight, normalized_shape):
    return torch.empty_like(input), torch.empty_like(weight), torch.empty_like(weight)


def _setup_context(ctx, inputs, output):
    input, weight, _bias, normalized_shape, _eps = inputs
    _, mean, invvar = output
    ctx.save_for_backward(input, weight, mean, invvar)
    ctx.normalized_shape = normalized_shape


def _backward(ctx, grad_out, _grad_mean, _grad_invvar):
    input, weight, mean, invvar = ctx.saved_tensors
    gx, gw, gb = fused_layer_norm_affine_bwd(grad_out, mean, invvar, input, weight, ctx.normalized_shape)
    return gx, gw, gb, None, None


fused_layer_norm_affine.register_autograd(_backward, setup_context=_setup_context)


def fused_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, normalized_shape, eps: float = 1e-5):
    """``torch.nn.functional.layer_norm`` through the fused operator (apex's ``fused_layer_norm_affine``)."""
    return fused_layer_norm_affine(x, weight, bias, list(normalized_shape), eps)[0]
