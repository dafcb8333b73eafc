"""The process a run trains in: seeds, device, CPU threads and peak memory.

``train.device`` is resolved here (:func:`resolve_device`); the device a run
trained on is ``TrainingRun.device`` (:mod:`.run_state`).
"""
from __future__ import annotations

import random
import resource
import sys

import numpy as np
import torch

from wavygraph.config import ConfigError


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU runs are then repeatable)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    """The torch device of ``train.device``: ``auto`` is the current GPU where
    there is one, else the CPU; a GPU is always numbered (``cuda`` ->
    ``cuda:0``), so that runs report which one they used. A name torch does
    not know, a device type wavygraph does not train on (``meta``, ``xla``,
    ...), or a device this machine lacks (CUDA without a GPU, ``cuda:7`` on
    two GPUs, ``mps`` off Apple silicon) is a one-line :class:`ConfigError`."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"train.device={name!r} is not a torch device; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type not in TRAIN_DEVICE_TYPES:
        raise ConfigError(f"train.device={name!r}: wavygraph trains on {', '.join(TRAIN_DEVICE_TYPES)} only; "
                          "use train.device=auto")
    if device.type != "cpu" and not _backend(device.type).is_available():
        kind = "CUDA" if device.type == "cuda" else device.type.upper()
        raise ConfigError(f"train.device={name!r} but {kind} is not available; use train.device=cpu or auto")
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if device.index is not None and 0 < count <= device.index:
            raise ConfigError(f"train.device={name!r} but this machine has {count} CUDA device(s) "
                              f"(cuda:0..cuda:{count - 1}); use one of them or train.device=auto")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


#: ``train.device`` types wavygraph trains on (with an index where the type has several).
TRAIN_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def _backend(device_type: str):
    """The module that says whether ``device_type`` is usable (``is_available()``)."""
    return torch.backends.mps if device_type == "mps" else getattr(torch, device_type)


def set_num_threads(num_threads: int | None) -> None:
    """``train.num_threads``: torch's CPU threads (unset or 0: torch's default)."""
    if num_threads:
        torch.set_num_threads(num_threads)


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory: CUDA's max allocated on a GPU, else the process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10
