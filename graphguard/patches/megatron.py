"""megatron-core (0.16) on a CPU-only machine, captured on graphguard's fake process group.

A model file calls :func:`initialize` in its ``spec()`` / ``impl(rank, world)`` before building a model
(it applies :func:`patch` once, then sets up Megatron's parallel state on the process group capture made),
may state its input relation with :func:`input_relation`, and names :func:`finalize_grads` its
``after_backward`` so that the gradient step Megatron runs after backward is part of the captured program
(``examples/megatron-gpt/model.py``)::

    from graphguard.patches import megatron as gm
    def impl(rank, world):
        gm.initialize(tensor_parallel=world)
        return GPTModel(config, get_gpt_layer_local_spec(), ...)
    after_backward = gm.finalize_grads

What :func:`patch` changes, and why none of it changes what the model computes:

* ``torch.cuda.current_device()`` returns the CPU device (only while CUDA is unavailable). Megatron
  allocates sequence-parallel buffers, rotary frequencies and backward buffers there; every such buffer is
  written before it is read, so where it lives does not matter.
* ``warnings.warn`` is ignored by TorchDynamo (``ignore_logging_functions``), and the one-time warning of
  ``linear_with_grad_accumulation_and_async_allreduce`` (about ``CUDA_DEVICE_MAX_CONNECTIONS``, a GPU
  scheduling hint) is marked as already given: it sets an attribute on a function, which a full-graph
  capture cannot trace. Warnings compute nothing.
* Collectives issued with ``async_op=True`` (the backward of ``LinearWithGradAccumulationAndAsyncCommunication``
  all-reduces or reduce-scatters the input gradient asynchronously and all-gathers the sequence-parallel
  input, then calls ``handle.wait()``) run synchronously and return a handle whose ``wait()`` does nothing.
  Megatron waits on every such handle before reading the result, so the values are those of the
  synchronous collective; only the overlap with computation is lost. While compiling, ``dist.all_reduce``
  is issued as the in-place functional collective TorchDynamo itself rewrites it to.
* ``WrappedTorchNorm`` (the local spec's norm without Apex) refuses ``sequence_parallel``; it now builds
  the same ``torch.nn.LayerNorm`` / ``RMSNorm`` and marks its parameters ``sequence_parallel`` as Apex's
  ``FusedLayerNorm`` and Transformer Engine's norms do, so that Megatron's own gradient step
  (``finalize_model_grads``, :func:`finalize_grads`) all-reduces their gradients across the tensor-parallel group. The norm is
  row-wise, so normalising a sequence shard is normalising those rows.
* ``megatron.core.transformer.moe.moe_utils.te_general_gemm`` is defined (as ``None``) where Transformer
  Engine is missing: the module reads that name to choose between TE's GEMM and ``torch.mm`` but defines it
  only when TE imports (a ``NameError`` in the router's gating linear otherwise). With ``None`` the router
  takes Megatron's own ``torch.mm`` path, the computation it documents for TE's absence.
* ``MoEAlltoAllTokenDispatcher.cuda_dtoh_stream`` (a class attribute its constructor fills with a new
  ``torch.cuda.Stream()``, which cannot be made without CUDA) is set to a stand-in that names itself in an
  error if used. The stream only carries the dropless path's device-to-host copies of token counts; with
  ``moe_pad_expert_input_to_capacity`` (the configuration graphguard captures: fixed shapes) Megatron never
  touches it.
* ``SequentialMLP.forward`` (the local experts one after another) receives its per-expert token counts as
  Python ints when ``moe_pad_expert_input_to_capacity`` is set (all-to-all or all-gather dispatcher). There
  every local expert gets the same number of rows -- the all-to-all dispatcher makes the counts with
  ``torch.full((local experts,), capacity * TP * EP)``; with the all-gather one each expert's column of the
  padded routing map holds min(capacity, tokens) ones on every rank -- so the counts are the input's rows
  divided by the number of local experts, the numbers passed (run eagerly, the patch checks that they are). ``SequentialMLP`` splits its
  input with ``tokens_per_expert.tolist()``, which TorchDynamo reads as sizes the data decides (it does not
  fold a tensor's values); as ints the split has the fixed sizes it has.
* ``get_default_causal_mask`` (the causal mask built when ``attention_mask`` is None) is built on the CPU:
  the same upper-triangular boolean matrix.
* ``MoEAuxLossAutoScaler`` (the MoE auxiliary losses' gradient injector) reads its backward scale as a number,
  1.0 as Megatron's schedule sets it for one micro-batch without loss scaling (``set_loss_scale`` still sets
  it), instead of the class attribute TorchDynamo cannot read inside an autograd.Function: the same gradients.

:func:`initialize` uses Megatron's *inference* RNG tracker (its ``fork()`` leaves the generator alone), the
training tracker reads and writes CUDA generator states. Random numbers are drawn only by dropout, so models
must be built with ``hidden_dropout=0`` and ``attention_dropout=0`` (graphguard relates deterministic
programs); weights are initialised on the CPU (``use_cpu_initialization=True``) from ``torch.manual_seed``,
the same full tensors on every rank, each rank keeping its shard.
"""
from __future__ import annotations

import warnings

_PATCHED = False


class _Done:
    """The handle of a collective that already completed."""

    def wait(self):
        return None

    def is_completed(self):
        return True


def _sync(fn):
    """``fn`` (an in-place collective of torch.distributed) run synchronously whatever ``async_op`` says."""
    def run(*args, async_op=False, **kwargs):
        fn(*args, **kwargs)
        return _Done() if async_op else None
    run.__name__ = getattr(fn, "__name__", "collective")
    run.__doc__ = f"{run.__name__}, run synchronously (graphguard.patches.megatron)."
    return run


def _all_reduce_sync(orig):
    import torch
    import torch.distributed as dist
    from torch.distributed import _functional_collectives as funcol

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if torch.compiler.is_compiling():  # what TorchDynamo rewrites dist.all_reduce to
            funcol.all_reduce_inplace(tensor, funcol.REDUCE_OP_TO_STR[op], group or dist.group.WORLD)
        else:
            orig(tensor, op=op, group=group)
        return _Done() if async_op else None
    all_reduce.__doc__ = "torch.distributed.all_reduce, run synchronously (graphguard.patches.megatron)."
    all_reduce.__wrapped__ = orig
    return all_reduce


class _NoStream:
    """Stands for the CUDA stream of Megatron's all-to-all dispatcher on a machine without CUDA."""

    def __getattr__(self, name):
        raise RuntimeError("MoEAlltoAllTokenDispatcher.cuda_dtoh_stream: a CUDA stream, used only by the dropless "
                           "dispatch; without CUDA (graphguard.patches.megatron) set moe_pad_expert_input_to_capacity")


class _Counts(list):
    """Token counts per local expert as Python ints, readable as Megatron reads a tensor of them."""

    def tolist(self):
        return list(self)


def _static_counts(forward):
    """``SequentialMLP.forward`` given its (equal, padded-to-capacity) token counts as ints."""
    def run(self, permuted_local_hidden_states, tokens_per_expert, permuted_probs):
        import torch
        cfg = self.config
        if (cfg.moe_pad_expert_input_to_capacity and self.num_local_experts > 1
                and cfg.moe_token_dispatcher_type in ("alltoall", "allgather")):
            rows = permuted_local_hidden_states.shape[0]
            counts = _Counts([rows // self.num_local_experts] * self.num_local_experts)
            if not torch.compiler.is_compiling() and tokens_per_expert.tolist() != counts:  # (eager: check)
                raise RuntimeError(f"graphguard.patches.megatron: SequentialMLP got token counts "
                                   f"{tokens_per_expert.tolist()}, not the equal counts {counts} of a padded dispatch")
            tokens_per_expert = counts
        return forward(self, permuted_local_hidden_states, tokens_per_expert, permuted_probs)
    run.__wrapped__ = forward
    run.__doc__ = forward.__doc__
    return run


def _cpu_device():
    """``torch.cuda.current_device()`` on a machine without CUDA: where Megatron's buffers go."""
    import torch
    return torch.device("cpu")


def _cpu_causal_mask(sq: int):
    import torch
    return torch.triu(torch.ones(sq, sq), diagonal=1).bool()


def patch() -> None:
    """Apply the patches listed in the module docstring (once per process; later calls do nothing)."""
    global _PATCHED
    if _PATCHED:
        return
    import torch
    import torch.distributed as dist
    from megatron.core.fusions import fused_softmax
    from megatron.core.tensor_parallel import layers
    from megatron.core.transformer import torch_norm, utils

    if not torch.cuda.is_available():
        from torch._dynamo.variables import torch as dynamo_torch
        torch.cuda.current_device = _cpu_device
        # TorchDynamo classifies whatever torch.cuda.current_device is as a torch function: let it fold the
        # call into its constant result, as it folds torch's own device queries
        dynamo_torch.constant_fold_functions[_cpu_device] = None
    torch._dynamo.config.ignore_logging_functions.add(warnings.warn)
    layers.linear_with_grad_accumulation_and_async_allreduce.warned = True
    layers.dist_all_gather_func = _sync(layers.dist_all_gather_func)
    layers.dist_reduce_scatter_func = _sync(layers.dist_reduce_scatter_func)
    dist.all_reduce = _all_reduce_sync(dist.all_reduce)
    fused_softmax.get_default_causal_mask = utils.get_default_causal_mask = _cpu_causal_mask
    from megatron.core.transformer.moe import moe_utils
    if not hasattr(moe_utils, "te_general_gemm"):  # defined only where Transformer Engine imports
        moe_utils.te_general_gemm = None
    if not torch.cuda.is_available():
        from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher
        if MoEAlltoAllTokenDispatcher.cuda_dtoh_stream is None:
            MoEAlltoAllTokenDispatcher.cuda_dtoh_stream = _NoStream()
    from megatron.core.transformer.moe import experts
    experts.SequentialMLP.forward = _static_counts(experts.SequentialMLP.forward)

    build_norm = torch_norm.WrappedTorchNorm.__new__

    def wrapped_torch_norm(cls, config, hidden_size, eps=1e-5, persist_layer_norm=False,
                           zero_centered_gamma=False, normalization="LayerNorm"):
        import dataclasses
        sp = config.sequence_parallel
        norm = build_norm(cls, dataclasses.replace(config, sequence_parallel=False) if sp else config,
                          hidden_size, eps, persist_layer_norm, zero_centered_gamma, normalization)
        for p in norm.parameters():
            p.sequence_parallel = sp  # as Apex's FusedLayerNorm: finalize_model_grads all-reduces these
        return norm
    torch_norm.WrappedTorchNorm.__new__ = wrapped_torch_norm
    _aux_loss_scale(moe_utils.MoEAuxLossAutoScaler)
    _PATCHED = True


_AUX_SCALE = 1.0  # MoEAuxLossAutoScaler's backward scale (_aux_loss_scale)


def _aux_loss_scale(scaler) -> None:
    """``MoEAuxLossAutoScaler``'s backward reads (and, first time, sets) a class attribute, the aux losses'
    backward scale, which TorchDynamo cannot trace inside an autograd.Function. Its backward now reads the
    scale as a number (``_AUX_SCALE``: 1.0, as Megatron's training schedule sets it for one micro-batch without
    loss scaling; ``set_loss_scale`` still sets it, read when the backward is traced): the same gradients,
    ``grad_output`` and ``ones_like(aux_loss) * scale``."""
    import torch
    set_scale = scaler.set_loss_scale

    def set_loss_scale(scale):
        global _AUX_SCALE
        _AUX_SCALE = float(scale)
        set_scale(scale)

    def backward(ctx, grad_output):
        (aux_loss,) = ctx.saved_tensors
        return grad_output, torch.ones_like(aux_loss) * _AUX_SCALE
    scaler.backward = staticmethod(backward)
    scaler.set_loss_scale = staticmethod(set_loss_scale)


def initialize(tensor_parallel: int = 1, expert_parallel: int = 1, expert_tensor_parallel: int | None = None,
               seed: int = 0) -> None:
    """Patch (:func:`patch`), then set up Megatron's parallel state on the process group graphguard's
    capture made for this rank -- or, for a sequential capture, on a one-rank ``fake`` group, so that
    Megatron's collectives over one rank (its vocab-parallel cross-entropy all-reduces even then) are
    captured and read as identities -- with the inference RNG tracker, and seed torch's generator."""
    patch()
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import random as mrandom

    if not dist.is_initialized():
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=1, store=FakeStore())
    ps.destroy_model_parallel()
    ps.initialize_model_parallel(tensor_model_parallel_size=tensor_parallel,
                                 expert_model_parallel_size=expert_parallel,
                                 expert_tensor_parallel_size=expert_tensor_parallel,
                                 create_gloo_process_groups=False)
    mrandom.model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True, force_reset_rng=True)
    torch.manual_seed(seed)


def input_relation(build, world: int, replicated: list[str] = ()) -> dict:
    """The input relation Megatron's own parameter attributes state, for a model file's ``relation()``:
    ``build()`` makes the model as rank 0 of ``world`` (on a ``fake`` group made here when none exists); a
    parameter marked ``tensor_model_parallel`` is the concatenation of the ranks' shards along its
    ``partition_dim``, any other is the same on every rank, and so is each input named in ``replicated``."""
    import torch.distributed as dist
    made = not dist.is_initialized()
    if made:
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    try:
        model = build()
        rel: dict = {}
        for name, p in model.named_parameters():
            if getattr(p, "tensor_model_parallel", False) and world > 1:
                if getattr(p, "partition_stride", 1) != 1:
                    raise ValueError(f"{name}: strided partitions (partition_stride != 1) are not supported")
                parts = ", ".join(f"{name}@{r}" for r in range(world))
                rel[name] = f"concat({parts}, dim={p.partition_dim})"
            else:
                rel[name] = [f"{name}@{r}" for r in range(world)]
        rel.update({name: [f"{name}@{r}" for r in range(world)] for name in replicated})
        return rel
    finally:
        if made:
            dist.destroy_process_group()


class _Chunk:
    """What Megatron's gradient step reads of a model chunk: its parameters and its DDP config."""

    def __init__(self, params: dict):
        from megatron.core.distributed import DistributedDataParallelConfig
        self.ddp_config = DistributedDataParallelConfig()
        self._params = params

    def named_parameters(self):
        return iter(self._params.items())


def finalize_grads(module, grads: dict) -> None:
    """Megatron's gradient step across the tensor-parallel group, on the gradients of one backward pass:
    the part of ``finalize_model_grads`` that data and pipeline parallelism do not need,
    ``_allreduce_non_tensor_model_parallel_grads`` (it sums the gradients of parameters marked
    ``sequence_parallel`` -- layer norms under sequence parallelism -- and of q/k layer norms, and averages
    those marked ``average_gradients_across_tp_domain``). ``grads`` maps parameter names to gradients and
    is updated in place, as Megatron updates ``main_grad``. The function is looked up in Megatron's module
    when called, so a model file that patches it is captured with its patch. Name it ``after_backward`` in
    a model file (capture runs it after backward and captures it with the rest of the program)."""
    import sys
    import megatron.core.distributed  # noqa: F401  (loads the module below)
    from megatron.core.utils import get_model_config
    fmg = sys.modules["megatron.core.distributed.finalize_model_grads"]

    params = dict(module.named_parameters())
    for name, g in grads.items():
        params[name].main_grad = g  # Megatron reads and updates main_grad where a parameter has one
    fmg._allreduce_non_tensor_model_parallel_grads([_Chunk(params)], get_model_config(module))
