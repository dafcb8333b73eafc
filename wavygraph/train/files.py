"""Atomic file writes: write a temporary file in the same folder, then
``os.replace`` it over the target, so a reader never sees half a file."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any, Callable, IO

import torch


@contextlib.contextmanager
def _atomic(path: str, mode: str):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: str, writer: Callable[[IO], Any], binary: bool = False) -> None:
    """Call ``writer(file)`` on a temporary file, then move it to ``path``."""
    with _atomic(path, "wb" if binary else "w") as f:
        writer(f)


def atomic_write_text(path: str, text: str) -> None:
    atomic_write(path, lambda f: f.write(text))


def atomic_write_json(path: str, obj: Any) -> None:
    atomic_write(path, lambda f: json.dump(obj, f, indent=2, sort_keys=False, allow_nan=True))


def atomic_torch_save(obj: Any, path: str) -> None:
    atomic_write(path, lambda f: torch.save(obj, f), binary=True)
