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


def _global_hooks() -> list:
    """The module backward hooks registered for every module (``register_module_full_backward_hook`` /
    ``register_module_full_backward_pre_hook``)."""
    from torch.nn.modules import module as m
    return [(what, reg, h) for what, reg, hooks in (
        ("backward hook", "register_module_full_backward_hook", getattr(m, "_global_backward_hooks", {})),
        ("backward pre-hook", "register_module_full_backward_pre_hook", getattr(m, "_global_backward_pre_hooks", {})))
        for h in hooks.values()]


def translate_backward_hooks(model, where: str) -> None:
    """Replace the known module backward hooks of ``model`` (see the module docstring); refuse the others,
    naming the module's path and, for a model distributed by a TP plan, the plan entry (or DTensor style) that
    applies to it -- the plan is where such a hook usually comes from."""
    from .failure import plan_entry
    express = "express it in the forward (an autograd.Function whose backward does the same)"
    for what, reg, hook in _global_hooks():
        raise InputError(f"{where}: a global module {what} ({_name(hook)}, registered with {reg} for every "
                         f"module, e.g. "
                         f"'{next((p for p, _ in model.named_modules() if p), type(model).__name__)}') is set, "
                         f"which TorchDynamo cannot capture; remove it before capture, or {express}")
    for path, module in model.named_modules():
        entry = plan_entry(model, path) if path else None
        named = f"module '{path or type(model).__name__}'" + (f" ({entry})" if entry else "")
        for key, hook in list(module._backward_hooks.items()):
            translate = KNOWN.get(_name(hook))
            if translate is None:
                raise InputError(f"{where}: {named} has a backward hook ({_name(hook)}), which TorchDynamo cannot "
                                 f"capture; graphguard translates only "
                                 f"{', '.join(k.split('.<locals>')[0] for k in KNOWN)} -- {express}")
            del module._backward_hooks[key]
            translate(module, hook)
        if not module._backward_hooks:
            module._is_full_backward_hook = None
        if module._backward_pre_hooks:
            hook = next(iter(module._backward_pre_hooks.values()))
            raise InputError(f"{where}: {named} has a backward pre-hook ({_name(hook)}), which TorchDynamo cannot "
                             f"capture; {express}")


def refuse_tensor_hooks(model, args, where: str) -> None:
    """A hook registered on a parameter, buffer or input tensor before capture (``p.register_hook(fn)``,
    ``register_post_accumulate_grad_hook``) changes the gradient autograd delivers, but lives on the tensor, not
    in the program TorchDynamo traces: the captured backward would leave it out and could be certified for a
    program that computes something else. Refused, naming the tensor. (A hook registered *in* forward, on a
    value the forward computes, is traced with it.)"""
    import torch
    named = []
    if isinstance(model, torch.nn.Module):
        named += [(f"parameter '{n}'", t) for n, t in model.named_parameters(remove_duplicate=False)]
        named += [(f"buffer '{n}'", t) for n, t in model.named_buffers(remove_duplicate=False)]
    named += [(f"input {i}", t) for i, t in enumerate(args) if isinstance(t, torch.Tensor)]
    for what, t in named:
        for kind, hooks in (("gradient hook (register_hook)", getattr(t, "_backward_hooks", None)),
                            ("post-accumulate-grad hook", getattr(t, "_post_accumulate_grad_hooks", None))):
            if hooks:
                fn = next(iter(hooks.values()))
                raise InputError(f"{where}: {what} has a {kind} ({_name(fn)}), which changes its gradient outside "
                                 f"the traced program: graphguard would verify the program without it; remove it "
                                 f"before capture, or express it in the forward (an autograd.Function whose "
                                 f"backward does the same)")

