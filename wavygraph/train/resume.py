"""Training checkpoints for ``train.resume``.

``checkpoint.pt`` (written atomically every ``train.checkpoint_every``
epochs and at the end into the run's folder: the work folder while the run
lasts, ``out_dir`` once it is published, see :mod:`.run_folder`) holds everything the loop needs to continue exactly
where it stopped: model and optimizer state, the RNG states of Python, NumPy,
torch (and CUDA) and of the partition generator, per rank, the epoch, the
best-so-far scores and weights, the history and the early-stopping counter.
A CPU run resumed from it ends with the same scores as an uninterrupted run.
"""
from __future__ import annotations

import copy
import math
import os
import random
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch

from wavygraph.config import ConfigError
from wavygraph.fingerprint import changed_files, content_of
from wavygraph.keys import MISSING, resume_ignores
from wavygraph.utils import atomic_torch_save, flatten

from .distributed import gather

if TYPE_CHECKING:  # the run's state is built from this module's TrainState
    from .run_state import TrainingRun

CHECKPOINT = "checkpoint.pt"


def checkpoint_path(out_dir: str) -> str:
    return os.path.join(str(out_dir), CHECKPOINT)


def config_diff(saved: dict, current: dict) -> list[str]:
    """Dotted keys whose values differ, but for the keys that do not change
    the training (:func:`wavygraph.keys.resume_ignores`: among them a key
    added to the config after the checkpoint was written, while it holds the
    value that keeps the old behaviour); ``train.device`` does not differ
    where both name the same device (``cpu`` and ``auto`` on a machine
    without a GPU)."""
    a, b = flatten(saved), flatten(current)

    def differs(key: str) -> bool:
        old, new = a.get(key, MISSING), b.get(key, MISSING)
        if old == new or resume_ignores(key, old, new):
            return False
        if key == "train.device":
            return _device_of(old) != _device_of(new)
        return True

    return sorted(k for k in set(a) | set(b) if differs(k))


def _device_of(name) -> str | None:
    from wavygraph.train.env import resolve_device

    try:
        return str(resolve_device(str(name)))
    except ConfigError:
        return None


def rng_state(generator: torch.Generator) -> dict:
    """Every RNG the loop draws from (all tensors/primitives: loads with weights_only)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(keys.copy()), int(pos), int(has_gauss), float(cached)),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "partition": generator.get_state(),
    }


def set_rng_state(state: dict, generator: torch.Generator) -> None:
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    generator.set_state(state["partition"])


def load_checkpoint(path: str, config: dict, world_size: int, fingerprint: dict | None = None) -> dict | None:
    """The checkpoint at ``path`` if there is one (else ``None``); refuses one
    written for another config, number of processes or version of the graph
    file (``fingerprint``, :mod:`wavygraph.fingerprint`) with a
    one-line :class:`ConfigError` naming what differs."""
    if not os.path.isfile(path):
        return None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file
        raise ConfigError(f"cannot read checkpoint {path}: {type(exc).__name__}; delete it to start over") from None
    if not isinstance(ckpt, dict) or "config" not in ckpt or "rng" not in ckpt:
        raise ConfigError(f"{path} is not a wavygraph training checkpoint; delete it to start over")
    diff = config_diff(ckpt["config"], config)
    if diff:
        raise ConfigError(
            f"checkpoint {path} was written with another config (differs in {', '.join(diff)}); "
            "use the same config or another out_dir"
        )
    _check_data(path, ckpt.get("data_fingerprint"), fingerprint, config)
    if len(ckpt["rng"]) != world_size:
        raise ConfigError(
            f"checkpoint {path} was written by {len(ckpt['rng'])} process(es), this run has {world_size}; "
            "resume with the same number of processes"
        )
    return ckpt


def _check_data(path: str, saved: dict | None, current: dict | None, config: dict) -> None:
    """Refuse a checkpoint trained on another version of the graph file (a
    checkpoint from before fingerprints were kept cannot be checked)."""
    changed = changed_files(saved, current) if saved is not None else []
    if changed:
        key = changed[0]
        old, new = content_of(saved).get(key) or "none", content_of(current).get(key) or "none"
        raise ConfigError(
            f"checkpoint {path} was trained on another version of data.{key}={config['data'].get(key)} "
            f"(sha256 {old[:12]} then, {new[:12]} now); restore that file, or start over with --overwrite "
            "or another out_dir"
        )


@dataclass
class TrainState:
    """What the epoch loop carries from one epoch to the next (and what a
    checkpoint restores): the best-so-far scores (``val``, ``test``,
    ``train``, ``epoch``) and weights, the evaluation history, the
    early-stopping counter, the seconds of every epoch, the last finished
    epoch and whether training had stopped."""

    best: dict = field(default_factory=lambda: {"val": -math.inf, "test": float("nan"), "train": float("nan"),
                                                "epoch": 0})
    best_state: dict | None = None
    history: list = field(default_factory=list)
    since_best: int = 0
    epoch_seconds: list = field(default_factory=list)
    epoch: int = 0
    stopped: bool = False

    def observe(self, epoch: int, scores: dict, model: torch.nn.Module) -> None:
        """Record an evaluation; keep the weights when the validation score improved."""
        if scores["val"] > self.best["val"]:
            self.best = {"val": scores["val"], "test": scores["test"], "train": scores["train"], "epoch": epoch}
            self.best_state = copy.deepcopy(model.state_dict())
            self.since_best = 0
        else:
            self.since_best += 1


_STATE_KEYS = ("best", "best_state", "history", "since_best", "epoch_seconds", "epoch", "stopped")


def restore(job: TrainingRun, path: str | None = None) -> TrainState:
    """A fresh :class:`TrainState` (best weights: ``job.core``'s initial
    ones), or, with ``train.resume`` and a checkpoint at ``path`` (default:
    in ``job.out_dir``), the checkpoint's state with ``job.core``,
    ``job.optimizer`` and this rank's RNGs loaded from it (refused for
    another version of the graph file, ``job.fingerprint``). The messages
    name the run by ``cfg.out_dir``."""
    resume, out_dir, ctx, model = job.cfg.train.resume, str(job.cfg.out_dir), job.ctx, job.core
    path = checkpoint_path(job.out_dir) if path is None else path
    ckpt = load_checkpoint(path, job.config, ctx.world_size, job.fingerprint) if resume else None
    if ckpt is None:
        if resume and ctx.is_main:
            print(f"wavygraph: no checkpoint in {out_dir}; starting from epoch 1", file=sys.stderr, flush=True)
        return TrainState(best_state=copy.deepcopy(model.state_dict()))
    model.load_state_dict(ckpt["model"])
    job.optimizer.load_state_dict(ckpt["optimizer"])
    set_rng_state(ckpt["rng"][ctx.rank], job.generator)
    if ctx.is_main:
        print(f"wavygraph: resuming {out_dir} after epoch {ckpt['epoch']}", file=sys.stderr, flush=True)
    return TrainState(**{key: ckpt[key] for key in _STATE_KEYS})


def save_checkpoint(job: TrainingRun) -> None:
    """Write ``job.state``, ``job.core``, ``job.optimizer``, the RNG states
    and the graph file's fingerprint to ``out_dir/checkpoint.pt`` atomically
    (rank 0); every rank must call it, as the RNG states of all ranks are
    gathered."""
    rngs = gather(rng_state(job.generator), job.ctx)
    if not job.ctx.is_main:
        return
    ckpt = {"config": job.config, "model": job.core.state_dict(), "optimizer": job.optimizer.state_dict(),
            "rng": rngs, **{key: getattr(job.state, key) for key in _STATE_KEYS}}
    if job.fingerprint is not None:
        ckpt["data_fingerprint"] = job.fingerprint
    atomic_torch_save(ckpt, checkpoint_path(job.out_dir))
