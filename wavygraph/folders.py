"""The names inside a sweep folder that the sweep (:mod:`wavygraph.sweep.store`,
which writes them) and the report (:mod:`wavygraph.report.results`, which reads
them) share: ``OUT/cells/<hash>/`` is one complete cell, and its
:data:`CELL_FILE` is the record of its grid values, config and metrics; and
their readers, which name a corrupted file and the fix in one line."""
from __future__ import annotations

import json
import os
from pathlib import Path

#: The record of one complete cell, written last into ``OUT/cells/<hash>/``.
CELL_FILE = "cell.json"


class CorruptFileError(ValueError):
    """A ``cell.json`` or ``sweep.json`` that is not what the sweep wrote."""


def _read_json(path: Path, shape: str, fix: str):
    """The JSON in ``path``; unreadable text or a non-object top level is a
    one-line :class:`CorruptFileError` that names the file and ``fix``."""
    try:
        with open(path) as fh:
            obj = json.load(fh)
    except UnicodeDecodeError:
        obj, why = None, "not text"
    except ValueError as exc:
        obj, why = None, f"not valid JSON: {exc}"
    else:
        why = f"a JSON {type(obj).__name__}, not {shape}"
    if not isinstance(obj, dict):
        raise CorruptFileError(f"{path} is corrupted ({why}); {fix}")
    return obj


def read_cell(path: str | os.PathLike) -> dict:
    """A finished cell's ``cell.json``: an object with ``hash``, ``params``,
    ``config`` and ``metrics``; a corrupted one is a :class:`CorruptFileError`
    that names the file and says how to recompute the cell."""
    path = Path(path)
    fix = f"delete the folder {path.parent} and rerun the sweep to recompute that cell"
    record = _read_json(path, "an object with hash, params, config and metrics", fix)
    for key, kind in (("hash", str), ("params", dict), ("config", dict), ("metrics", (dict, type(None)))):
        if not isinstance(record.get(key), kind):
            raise CorruptFileError(f"{path} is corrupted (its {key!r} is missing or of the wrong type); {fix}")
    return record


def read_manifest(out_dir: str | os.PathLike) -> dict | None:
    """``OUT/sweep.json`` (an object whose ``cells`` is a list), or ``None``
    when there is none; a corrupted one is a :class:`CorruptFileError` (never
    replaced silently: it lists the cells of earlier sweeps into the folder)."""
    path = Path(out_dir) / "sweep.json"
    if not path.is_file():
        return None
    fix = (f"move it away (the finished cells under {Path(out_dir) / 'cells'} are kept) and rerun the sweep, "
           "which writes a new one")
    manifest = _read_json(path, "an object with a list of cells", fix)
    if not isinstance(manifest.get("cells"), list):  # every sweep writes it, an empty one too
        raise CorruptFileError(f"{path} is corrupted (its 'cells' is missing or not a list); {fix}")
    return manifest
