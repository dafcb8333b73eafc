"""One train run's state and its set-up: data, model, optimiser, restore.

:class:`TrainingRun` holds what the epoch loop (:mod:`.loop`) and the written
files (:mod:`.outputs`) need, so that their functions take one argument
instead of a long list.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf
from torch_geometric.data import Data

from wavygraph.config import import_modules
from wavygraph.data import DatasetInfo, load_dataset
from wavygraph.fingerprint import data_fingerprint

from . import distributed as dist_utils
from .env import fix_cpu_heap, resolve_device, seed_everything, set_num_threads
from .models import build_model, param_groups
from .resume import TrainState, restore
from .run_folder import RunFolder


@dataclass
class TrainingRun:
    """One train run from set-up to its files.

    Args:
        cfg (DictConfig): the run's config.
        data (Data): the graph, on the CPU, with ``train_mask``, ``val_mask``
            and ``test_mask``.
        info (DatasetInfo): task, metric and scorer of the data set.
        device (torch.device): where this process trains (``train.device``,
            ``cuda:LOCAL_RANK`` under torchrun).
        ctx (DistContext): rank and world size (one process: rank 0 of 1).
        model (torch.nn.Module): what the optimiser steps: ``core``, or
            ``core`` in :class:`~torch.nn.parallel.DistributedDataParallel`.
        core (torch.nn.Module): the unwrapped model: evaluation, checkpoints,
            ``model.pt``.
        optimizer (torch.optim.Optimizer): Adam over ``core``'s parameter groups.
        generator (torch.Generator): draws every epoch's random partition.
        config (dict): the resolved config, stored in the checkpoints.
        state (TrainState): best scores and weights, history, epoch.
        start (float): ``time.time()`` when the run started.
        work_dir (str, optional): the folder the files are written into
            while the run lasts (:mod:`.run_folder`), or ``None``:
            ``cfg.out_dir`` itself.
        fingerprint (dict, optional): the graph file's fingerprint
            (:mod:`wavygraph.fingerprint`), kept in the checkpoints.
    """

    cfg: DictConfig
    data: Data
    info: DatasetInfo
    device: torch.device
    ctx: dist_utils.DistContext
    model: torch.nn.Module
    core: torch.nn.Module
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    config: dict
    state: TrainState
    start: float
    work_dir: str | None = None
    fingerprint: dict | None = None

    @property
    def out_dir(self) -> str:
        """Where the run's files go now: ``work_dir``, else ``cfg.out_dir``."""
        return self.work_dir or str(self.cfg.out_dir)


def dataset_options(d: DictConfig) -> dict:
    """The loader options of ``cfg.data``: ``data.csbm.*`` for ``csbm``, the
    file keys for ``file``, none for the other data sets."""
    name = d.name.lower()
    if name == "csbm":
        return dict(OmegaConf.to_container(d.csbm))
    if name == "file":
        return {k: d[k] for k in ("path", "features", "labels", "train_fraction", "val_fraction")}
    return {}


def load_data(d: DictConfig) -> tuple[Data, DatasetInfo]:
    """The data set of ``cfg.data`` and its :class:`DatasetInfo`."""
    return load_dataset(d.name, d.root, d.split, d.normalize_features, download=d.download,
                        split_mode=d.split_mode, per_class=d.per_class, num_val=d.num_val,
                        num_test=d.num_test, **dataset_options(d))


def prepare_process(cfg: DictConfig) -> torch.device:
    """Plugins (``imports``; a sweep worker starts without them), the device,
    CPU threads and seeds of this process; returns the device."""
    import_modules(cfg.get("imports", ()))
    t = cfg.train
    device = resolve_device(t.device)
    set_num_threads(t.num_threads)
    memory_mode = bool(cfg.model.get("reversible") or cfg.model.get("gradient_checkpointing"))
    fix_cpu_heap(t.get("cpu_heap", "auto"), memory_mode and device.type == "cpu")
    seed_everything(t.seed)
    return device


def prepare(cfg: DictConfig, data: Data, info: DatasetInfo, device: torch.device, ctx: dist_utils.DistContext,
            start: float | None = None, folder: RunFolder | None = None) -> TrainingRun:
    """Build the model (wrapped in DDP when distributed) and the optimiser,
    and restore them with ``train.resume`` from the checkpoint ``folder``
    names (:class:`~.run_folder.RunFolder`; without one, from
    ``out_dir/checkpoint.pt``)."""
    t = cfg.train
    core = build_model(cfg, info).to(device)
    model = dist_utils.wrap_model(core, data, device, ctx, t.seed)
    optimizer = torch.optim.Adam(param_groups(core, t.weight_decay), lr=t.lr, weight_decay=t.weight_decay)
    generator = torch.Generator().manual_seed(t.seed)
    config = OmegaConf.to_container(cfg, resolve=True)
    job = TrainingRun(cfg=cfg, data=data, info=info, device=device, ctx=ctx, model=model, core=core,
                      optimizer=optimizer, generator=generator, config=config, state=TrainState(),
                      start=time.time() if start is None else start,
                      work_dir=folder.work_dir if folder is not None else None,
                      fingerprint=data_fingerprint(cfg.data))
    job.state = restore(job, path=folder.checkpoint if folder is not None else None)
    return job
