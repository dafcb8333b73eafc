"""The process a run trains in: seeds, device, CPU threads and peak memory.

``train.device`` is resolved here (:func:`resolve_device`); the device a run
trained on is ``TrainingRun.device`` (:mod:`.run_state`).
"""
from __future__ import annotations

import ctypes
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


#: glibc's ``mallopt`` parameter of the mmap threshold, and the threshold it is fixed at
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20


def fix_cpu_heap(mode: str, memory_mode: bool) -> bool:
    """``train.cpu_heap``: fix glibc's mmap threshold at 1 MiB (``"mmap"``,
    or ``"auto"`` with a memory mode: reversible or checkpointed layers).

    glibc serves a block above its mmap threshold with its own mapping,
    returned to the system when freed; but after the first such block is
    freed it raises the threshold (up to 32 MiB) and serves later blocks
    of that size from its heap, where blocks freed between ones still in use
    cannot be returned. A memory mode frees and reallocates ``N x C``
    tensors layer after layer, and the heap's resident size then grows with
    the depth although the live tensors do not (measured in docs/memory.md).
    A fixed threshold turns that raise off, at the price of fresh pages for
    every large tensor.

    Returns whether the threshold was set (never off glibc's Linux, or where
    ``mallopt`` is missing)."""
    if mode == "default" or (mode == "auto" and not memory_mode) or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory: CUDA's max allocated on a GPU, else the process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10
