"""The files of a train run (in its work folder, published as ``out_dir``), each written atomically:
``config.yaml`` (at the start), ``model.pt`` and ``metrics.json`` (at the end,
rank 0 only)."""
from __future__ import annotations

import os
import time
from dataclasses import asdict

import numpy as np

from wavygraph.config import to_yaml
from wavygraph.utils import atomic_torch_save, atomic_write_json, atomic_write_text

from .diagnose import run_diagnostics
from .env import peak_memory_mb
from .run_state import TrainingRun


def write_config(job: TrainingRun) -> None:
    """``out_dir/config.yaml``: the resolved config (rank 0)."""
    if job.ctx.is_main:
        os.makedirs(job.out_dir, exist_ok=True)
        atomic_write_text(os.path.join(job.out_dir, "config.yaml"), to_yaml(job.cfg))


def metrics_of(job: TrainingRun) -> dict:
    """The keys of ``metrics.json`` in their order; ``seconds`` and
    ``peak_memory_mb`` are filled in last, by :func:`finish`."""
    best, state, m = job.state.best, job.state, job.cfg.model
    info = job.info
    return {
        "dataset": info.name,
        "metric": info.metric,
        "num_tasks": info.num_outputs if info.task == "multilabel" else 1,  # OGB's count: proteins 112, arxiv 1
        "evaluator": info.ogb_name,  # the OGB Evaluator that scored the run, or None
        "best_val": best["val"],
        "test": best["test"],
        "train": best["train"],
        "best_epoch": best["epoch"],
        "epochs": state.epoch,
        "seconds": None,
        "seconds_per_epoch": float(np.mean(state.epoch_seconds)) if state.epoch_seconds else None,
        "num_params": sum(p.numel() for p in job.core.parameters()),
        "peak_memory_mb": None,
        "arch": m.get("arch", "wavy"),
        "residual": m.residual if m.get("arch", "wavy") == "wavy" else None,  # none for a baseline
        "num_layers": m.num_layers,
        "device": str(job.device),  # the one train.device chose (auto: cuda:0 where there is a GPU)
        "world_size": job.ctx.world_size,
        "history": state.history,
    }


def model_checkpoint(job: TrainingRun) -> dict:
    """The content of ``model.pt``: the best epoch's weights, the resolved
    config and the data set's info (enough to rebuild the model), and a
    graph file's fingerprint."""
    best = job.state.best
    out = {
        "state_dict": job.state.best_state,
        "config": job.config,
        "info": {k: v for k, v in asdict(job.info).items() if k != "extra"},
        "epoch": best["epoch"],
        "best_val": best["val"],
    }
    if job.fingerprint is not None:  # the graph file it was trained on
        out["data_fingerprint"] = job.fingerprint
    return out


def finish(job: TrainingRun) -> dict:
    """Load the best weights into ``job.core``, add the diagnostics
    (``train.diagnostics``), write ``model.pt`` and ``metrics.json``; returns
    the metrics."""
    job.core.load_state_dict(job.state.best_state)
    metrics = metrics_of(job)
    diagnostics = run_diagnostics(job)
    if diagnostics is not None:
        metrics["diagnostics"] = diagnostics
    atomic_torch_save(model_checkpoint(job), os.path.join(job.out_dir, "model.pt"))
    metrics["peak_memory_mb"] = peak_memory_mb(job.device)
    metrics["seconds"] = time.time() - job.start
    atomic_write_json(os.path.join(job.out_dir, "metrics.json"), metrics)
    return metrics
