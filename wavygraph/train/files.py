"""Atomic file writes: see :mod:`wavygraph.utils` (kept while imports move)."""
from wavygraph.utils import atomic_torch_save, atomic_write, atomic_write_json, atomic_write_text

__all__ = ["atomic_write", "atomic_write_text", "atomic_write_json", "atomic_torch_save"]
