"""Training and evaluation loops, metrics and checkpoints (see :mod:`.loop`)."""
from wavygraph.utils import atomic_torch_save, atomic_write_json, atomic_write_text
from .loop import build_model, evaluate, predict, run, seed_everything, train_epoch

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
