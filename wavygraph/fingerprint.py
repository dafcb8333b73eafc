"""Fingerprints of the files a graph is read from (``data.name=file``).

A result depends on the graph's content, not on its file name: a sweep
cell's hash and a training checkpoint therefore include the SHA-256 of
``data.path`` (and of ``data.features`` / ``data.labels`` where set), so that
a sweep reruns the cells of a changed file and ``--resume`` refuses a
checkpoint trained on another version of it. The fingerprint also records the
file's size and modification time; the content hash alone decides whether two
versions are the same (a copy or a ``touch`` changes nothing). Hashes are
cached per process by (path, size, mtime, inode), so a sweep reads each file
once.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any

#: The ``data.*`` keys that name files of a ``data.name=file`` graph.
FILE_KEYS = ("path", "features", "labels")
_HASHES: dict[tuple, str] = {}


def file_fingerprint(path: str | os.PathLike) -> dict:
    """``{"size", "mtime", "sha256"}`` of the file at ``path``."""
    st = os.stat(path)
    key = (os.path.abspath(os.fspath(path)), st.st_size, st.st_mtime_ns, st.st_ino)
    digest = _HASHES.get(key)
    if digest is None:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        digest = _HASHES[key] = h.hexdigest()
    return {"size": st.st_size, "mtime": st.st_mtime, "sha256": digest}


def data_fingerprint(data: Any) -> dict | None:
    """``{key: file_fingerprint}`` of the files ``data`` (a config's
    ``data`` section, a dict or ``DictConfig``) names when ``data.name`` is
    ``file``; ``None`` for the other data sets (their content is fixed by
    their name and version)."""
    if data is None or str(data.get("name", "")).lower() != "file":
        return None
    out = {}
    for key in FILE_KEYS:
        path = data.get(key)
        if path and os.path.isfile(str(path)):
            out[key] = file_fingerprint(str(path))
    return out or None


def content_of(fingerprint: dict | None) -> dict:
    """``{key: sha256}``: what a result depends on (size and time aside)."""
    return {k: v.get("sha256") for k, v in (fingerprint or {}).items() if isinstance(v, dict)}


def changed_files(saved: dict | None, current: dict | None) -> list[str]:
    """The ``data.*`` keys whose content differs between two fingerprints."""
    a, b = content_of(saved), content_of(current)
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
