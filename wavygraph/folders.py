"""The names inside a sweep folder that the sweep (:mod:`wavygraph.sweep.store`,
which writes them) and the report (:mod:`wavygraph.report.results`, which reads
them) share: ``OUT/cells/<hash>/`` is one complete cell, and its
:data:`CELL_FILE` is the record of its grid values, config and metrics; and
their readers, which name a corrupted file and the fix in one line; and the
temporary folders ``OUT/tmp/<name>.<host>.<pid>.<token>`` in which a sweep's
cells and a study's trials are written before they are published."""
from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path
from typing import Iterator

from wavygraph.utils import pid_alive

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


def temp_dir(out_dir: str | os.PathLike, name: str) -> Path:
    """A new temporary folder name ``OUT/tmp/<name>.<host>.<pid>.<token>``
    (not created), which names the process that writes it."""
    return Path(out_dir) / "tmp" / f"{name}.{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"


def temp_dirs(out_dir: str | os.PathLike) -> Iterator[tuple[Path, str, bool]]:
    """Every :func:`temp_dir` under ``OUT/tmp`` as ``(path, name, dead)``:
    ``dead`` when its process ran on this host and has ended."""
    root, host = Path(out_dir) / "tmp", socket.gethostname()
    for entry in root.iterdir() if root.is_dir() else ():
        parts = entry.name.split(".")
        if len(parts) < 4:
            continue
        token, pid = ".".join(parts[1:-2]), parts[-2]
        yield entry, parts[0], token == host and pid.isdigit() and not pid_alive(int(pid))
