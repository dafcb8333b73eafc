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

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from wavygraph.config import ConfigError

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


def shard(parts: list, ctx: DistContext) -> list:
    """This rank's share of one epoch's chunks (padded so that every rank
    takes the same number of optimiser steps)."""
    if not ctx.enabled or ctx.world_size == 1:
        return parts
    extra = (-len(parts)) % ctx.world_size
    padded = parts + [parts[i % len(parts)] for i in range(extra)]
    return padded[ctx.rank :: ctx.world_size]


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
    if ctx.enabled and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
