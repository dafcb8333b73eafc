"""Multi-process training with ``torch.distributed`` (launched by ``torchrun``).

With ``train.distributed=true`` every process joins the process group from
the ``env://`` variables torchrun sets (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``), wraps the model in
:class:`~torch.nn.parallel.DistributedDataParallel` and takes its share of
each epoch's random-partition chunks: all ranks draw the same permutation
from the shared seed, the chunk list is padded by repeating its first chunks
to a multiple of the world size (as ``DistributedSampler`` pads), and rank r
takes chunks ``r, r + W, ...``. Each optimiser step thus averages the
gradients of W chunks. Rank 0 alone evaluates, checkpoints and writes files.
"""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch_geometric.data import Data

from wavygraph.config import ConfigError
from wavygraph.data import induced_subgraph

from .evaluation import graph_input

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    enabled: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup(train_cfg, device: torch.device) -> tuple[DistContext, torch.device]:
    """Join the process group when ``train.distributed`` (else a no-op).
    Returns the context and the device of this rank (``cuda:LOCAL_RANK``)."""
    if not train_cfg.distributed:
        return DistContext(), device
    missing = [k for k in TORCHRUN_VARS if k not in os.environ]
    if missing:
        raise ConfigError(
            f"train.distributed=true needs the torchrun launcher ({', '.join(missing)} not set); "
            "run: torchrun --nproc_per_node N -m wavygraph train ..."
        )
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if device.type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    backend = train_cfg.dist_backend
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl" and device.type != "cuda":
        raise ConfigError("train.dist_backend=nccl needs train.device=cuda; use gloo on CPU")
    if not train_cfg.num_threads:
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1") or 1)))
    dist.init_process_group(backend)
    return DistContext(dist.get_rank(), dist.get_world_size(), local_rank, True), device


def chunks_of_rank(chunks: list, ctx: DistContext) -> list:
    """This rank's share of one epoch's node chunks (padded so that every
    rank takes the same number of optimiser steps)."""
    if not ctx.enabled or ctx.world_size == 1:
        return chunks
    extra = (-len(chunks)) % ctx.world_size
    padded = chunks + [chunks[i % len(chunks)] for i in range(extra)]
    return padded[ctx.rank :: ctx.world_size]


def has_unused_parameters(model: torch.nn.Module, data: Data, device: torch.device) -> bool:
    """True when a forward/backward in eval mode (no dropout, no RNG drawn)
    on a small piece of the graph leaves some parameter without a gradient:
    then DDP needs ``find_unused_parameters``."""
    nodes = torch.arange(min(data.num_nodes, 64))
    part = induced_subgraph(data, nodes)
    x, adj = graph_input(part, device)
    was_training = model.training
    model.eval()
    model.zero_grad(set_to_none=True)
    model(x, adj).float().sum().backward()
    unused = any(p.requires_grad and p.grad is None for p in model.parameters())
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return unused


def wrap_model(model: torch.nn.Module, data: Data, device: torch.device, ctx: DistContext,
               seed: int) -> torch.nn.Module:
    """``model`` itself, or, when distributed, ``model`` in
    :class:`~torch.nn.parallel.DistributedDataParallel` (probed with
    :func:`has_unused_parameters`); ranks > 0 then reseed torch with
    ``seed + 7919 * rank`` for distinct dropout masks, rank 0 keeps the
    single-process stream."""
    if not ctx.enabled:
        return model
    unused = has_unused_parameters(model, data, device)
    wrapped = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=unused
    )
    if ctx.rank > 0:
        torch.manual_seed(seed + 7919 * ctx.rank)
    return wrapped


def broadcast_flag(flag: bool, ctx: DistContext, device: torch.device) -> bool:
    """Rank 0's ``flag`` on every rank."""
    if not ctx.enabled:
        return flag
    t = torch.tensor([int(flag)], device=device if dist.get_backend() == "nccl" else "cpu")
    dist.broadcast(t, 0)
    return bool(t.item())


def gather(obj, ctx: DistContext) -> list:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank."""
    if not ctx.enabled:
        return [obj]
    out = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def teardown(ctx: DistContext) -> None:
    """Leave the process group: a barrier, then the group destroyed.

    The run's DDP model must be gone by then (:func:`~wavygraph.train.loop.run`
    frees it first; ``gc.collect`` here frees one caught in a reference
    cycle). Its C++ reducer holds the process group; were it the group's
    last holder, the group's destructor would run inside the reducer's
    deallocation, which keeps the GIL while it joins gloo's worker threads,
    and a worker still releasing a finished collective's tensors waits for
    the GIL: a deadlock, seen as a rank that never exits (torch's issue
    56297). The group's own Python object releases the GIL before that join."""
    if ctx.enabled and dist.is_initialized():
        gc.collect()
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
