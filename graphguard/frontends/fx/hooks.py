"""Module backward hooks, which TorchDynamo cannot capture, replaced by the autograd graph they stand for.

A full backward hook (``register_full_backward_hook``) runs Python once autograd has computed a module's
input gradients; TorchDynamo captures it only under compiled autograd, which capture does not use. Before
capture, :func:`translate_backward_hooks` replaces each hook whose meaning is known by the equivalent graph,
and refuses any other, naming the module and the hook (``KNOWN`` lists the known ones):

* HF transformers' ``replicated_with_grad_allreduce`` TP style (Qwen3's ``q_norm`` / ``k_norm``, which
  normalise per head and so see only the rank's heads): the hook all-reduces (sums) the gradient of each of
  the module's parameters over the TP mesh. The equivalent graph passes each parameter, where the module
  reads it, through an identity whose backward sums the gradient over the same process group. (This is the
  hook's effect on one backward pass from zero gradients -- what capture records. HF's hook sums
  ``param.grad`` as accumulated so far, so under gradient accumulation it would sum earlier micro-batches'
  gradients again: that is not modelled.)
"""
from __future__ import annotations

from graphguard.errors import InputError


def _closure(fn) -> dict:
    cells = fn.__closure__ or ()
    return dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in cells)))


def _grad_sum_function():
    import torch
    from torch.distributed._functional_collectives import all_reduce

    class SumGradients(torch.autograd.Function):
        """Identity forward; the backward sums the gradient over ``group`` (an all-reduce)."""

        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            return all_reduce(grad.contiguous(), "sum", ctx.group), None
    return SumGradients


def _sum_parameter_gradients(module, hook) -> None:
    """``replicated_with_grad_allreduce``: every parameter of the module read through SumGradients."""
    group = _closure(hook)["mesh"].get_group()
    fn = _grad_sum_function()
    names = [n for n, p in module.named_parameters(recurse=False)]
    inner = module.forward

    def forward(*args, **kwargs):
        params = {n: module._parameters[n] for n in names}
        for n, p in params.items():
            module._parameters[n] = fn.apply(p, group)
        try:
            return inner(*args, **kwargs)
        finally:
            module._parameters.update(params)
    module.forward = forward


# hook function (module.qualname) -> translation(module, hook)
KNOWN = {
    "transformers.distributed.tensor_parallel.ReplicatedWithGradAllReduce.install_forward.<locals>."
    "_all_reduce_grads": _sum_parameter_gradients,
}


def _name(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def translate_backward_hooks(model, where: str) -> None:
    """Replace the known module backward hooks of ``model`` (see the module docstring); refuse the others."""
    for path, module in model.named_modules():
        for key, hook in list(module._backward_hooks.items()):
            translate = KNOWN.get(_name(hook))
            if translate is None:
                raise InputError(f"{where}: module '{path or type(model).__name__}' has a backward hook "
                                 f"({_name(hook)}), which TorchDynamo cannot capture; graphguard translates "
                                 f"only {', '.join(k.split('.<locals>')[0] for k in KNOWN)} -- express it in "
                                 f"the forward (an autograd.Function whose backward does the same)")
            del module._backward_hooks[key]
            translate(module, hook)
        if not module._backward_hooks:
            module._is_full_backward_hook = None
        if module._backward_pre_hooks:
            hook = next(iter(module._backward_pre_hooks.values()))
            raise InputError(f"{where}: module '{path or type(model).__name__}' has a backward pre-hook "
                             f"({_name(hook)}), which TorchDynamo cannot capture; express it in the forward (an "
                             f"autograd.Function whose backward does the same)")
