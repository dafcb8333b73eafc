"""Training checkpoints for ``train.resume``.

``out_dir/checkpoint.pt`` (written atomically every ``train.checkpoint_every``
epochs and at the end) holds everything the loop needs to continue exactly
where it stopped: model and optimizer state, the RNG states of Python, NumPy,
torch (and CUDA) and of the partition generator, per rank, the epoch, the
best-so-far scores and weights, the history and the early-stopping counter.
A CPU run resumed from it ends with the same scores as an uninterrupted run.
"""
from __future__ import annotations

import os
import random

import numpy as np
import torch

from wavygraph.config import ConfigError
from wavygraph.utils import flatten

CHECKPOINT = "checkpoint.pt"
#: Keys that may differ between the run that wrote a checkpoint and the one resuming it.
RESUME_IGNORED = ("train.resume", "train.progress", "train.checkpoint_every", "train.diagnostics", "out_dir")


def checkpoint_path(out_dir: str) -> str:
    return os.path.join(str(out_dir), CHECKPOINT)


def config_diff(saved: dict, current: dict) -> list[str]:
    """Dotted keys whose values differ (ignoring :data:`RESUME_IGNORED`)."""
    a, b = flatten(saved), flatten(current)
    return sorted(k for k in set(a) | set(b) if k not in RESUME_IGNORED and a.get(k, "<unset>") != b.get(k, "<unset>"))


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


def load_checkpoint(path: str, config: dict, world_size: int) -> dict | None:
    """The checkpoint at ``path`` if there is one (else ``None``); refuses one
    written for another config or number of processes with a one-line
    :class:`ConfigError` naming the differing keys."""
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
    if len(ckpt["rng"]) != world_size:
        raise ConfigError(
            f"checkpoint {path} was written by {len(ckpt['rng'])} process(es), this run has {world_size}; "
            "resume with the same number of processes"
        )
    return ckpt
