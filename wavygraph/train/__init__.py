"""Training and evaluation of one model on one data set.

The modules, by level: :mod:`.loop` (:func:`run` and the epochs),
:mod:`.run_state` (the run's state and set-up), :mod:`.evaluation` (loss,
prediction, scores), :mod:`.outputs` (``config.yaml``, ``model.pt``,
``metrics.json``), :mod:`.diagnose` (per-layer diagnostics), :mod:`.env`
(seeds, device, threads, memory), :mod:`.models` (the model of
``model.arch``), :mod:`.resume` (checkpoints) and :mod:`.distributed` (DDP).
"""
from wavygraph.utils import atomic_torch_save, atomic_write_json, atomic_write_text

from .env import seed_everything
from .evaluation import evaluate, predict
from .loop import run, train_epoch
from .models import build_model

__all__ = [
    "run",
    "build_model",
    "evaluate",
    "predict",
    "train_epoch",
    "seed_everything",
    "atomic_write_text",
    "atomic_write_json",
    "atomic_torch_save",
]
