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
    not know, or CUDA without a GPU, is a one-line :class:`ConfigError`."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"train.device={name!r} is not a torch device") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"train.device={name!r} but CUDA is not available; use train.device=cpu or auto")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


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
