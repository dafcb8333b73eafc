"""Small helpers shared by training, sweeps and reports: atomic file writes,
the flattening of nested dicts into dotted keys, an exception's message on
one line, the warning filter of the command line, and the device and CPU
threads of a pool's workers (sweeps and tunes).

An atomic write goes to a temporary file in the target's folder, which is
then moved over the target with :func:`os.replace`: a reader (or a process
killed half-way) never sees half a file. The file gets the mode of any
file the user creates (``0o666`` less the umask), not ``mkstemp``'s
``0o600``, so that colleagues sharing a machine can read the results.
JSON is written strictly (RFC 8259): a value that is not finite becomes
``null``.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import uuid
import warnings
from typing import IO, Any, Callable, Sequence


def umask() -> int:
    """The process's umask (read from ``/proc`` where it can be, so that it is
    never changed, even for a moment)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode a new file gets from ``open``: ``0o666`` less the umask."""
    return 0o666 & ~umask()


@contextlib.contextmanager
def _atomic(path: str | os.PathLike, mode: str):
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())  # mkstemp's 0o600 would hide the file from the user's group
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike, writer: Callable[[IO], Any], binary: bool = False) -> None:
    """Call ``writer(file)`` on a temporary file, then move it to ``path``."""
    with _atomic(path, "wb" if binary else "w") as f:
        writer(f)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda f: f.write(text))


def strict_json(obj: Any) -> Any:
    """``obj`` with every value JSON can hold as it is: dicts (keys as text),
    lists (from lists, tuples, tensors and arrays), numbers (NumPy and
    one-element tensor values too), text, booleans and ``None``; a float that
    is not finite (NaN, +-inf) becomes ``None`` and anything else its text."""
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k) if not isinstance(k, (str, int, float, bool)) else k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if hasattr(obj, "tolist"):  # tensors, arrays and NumPy scalars
        return strict_json(obj.tolist())
    if hasattr(obj, "item"):
        return strict_json(obj.item())
    return str(obj)


def dumps_json(obj: Any, **kwargs) -> str:
    """``json.dumps`` of :func:`strict_json` ``(obj)``: strict JSON (``null``
    where a value is not finite), for files and printed summaries alike."""
    return json.dumps(strict_json(obj), allow_nan=False, **kwargs)


def atomic_write_json(path: str | os.PathLike, obj: Any, sort_keys: bool = False) -> None:
    """``obj`` as indented strict JSON (:func:`strict_json`: ``null`` where a
    value is not finite; tensors and arrays as lists)."""
    text = dumps_json(obj, indent=2, sort_keys=sort_keys)
    atomic_write(path, lambda f: f.write(text))


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    import torch

    atomic_write(path, lambda f: torch.save(obj, f), binary=True)


def folder_problem(path: str | os.PathLike, key: str, beside: bool = False) -> str | None:
    """Why ``path`` cannot be a folder this process creates and writes, in
    one line that names ``key`` and the fix, or ``None`` when it can: it
    must not be a file nor lie under one, and the folder written in (the
    nearest existing one of ``path``, or with ``beside`` of its parent, where
    a folder published by rename is made) must be writable."""
    shown = os.fspath(path)
    path = os.path.abspath(shown)
    named = f"{key} {shown}" if key.startswith("-") else f"{key}={shown}"  # --out DIR, out_dir=DIR
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{named} is a file, not a folder; choose another {key} or move the file away"
    probe = os.path.dirname(path) if beside else path
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{named}: {probe} is a file, so no folder can be made under it; choose another {key}"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{named}: cannot write in {probe} (permission denied); choose a writable {key}"
    return None


def publish_dir(tmp: str | os.PathLike, final: str | os.PathLike, replace: bool = False) -> None:
    """Rename the complete folder ``tmp`` to ``final`` (same file system): one
    atomic :func:`os.rename`, which also takes the place of an empty
    ``final``. A ``final`` that holds files raises :class:`OSError`, or with
    ``replace`` is first renamed aside (``.<name>.replaced.<token>``, removed
    once ``tmp`` is in place; put back if the second rename fails)."""
    tmp, final = os.fspath(tmp), os.fspath(final)
    try:
        os.rename(tmp, final)
        return
    except OSError:
        if not (replace and os.path.isdir(final)):
            raise
    parent, name = os.path.split(os.path.abspath(final))
    aside = os.path.join(parent, f".{name}.replaced.{uuid.uuid4().hex[:8]}")
    os.rename(final, aside)
    try:
        os.rename(tmp, final)
    except BaseException:
        os.rename(aside, final)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user
    counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_yaml(path: str, what: str, error: Callable[[str], Exception]) -> Any:
    """The YAML document in ``path`` (``None`` when empty); a missing file or
    bad YAML raises ``error(one line)`` naming the file (``what``: "sweep
    file", "space file", ...)."""
    import yaml

    if not os.path.isfile(path):
        raise error(f"{what} not found: {path}")
    try:
        with open(path) as fh:
            return yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise error(f"cannot read {path}: {str(exc).splitlines()[0]}") from None


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "c": 2}`` -> ``{"a.b": 1, "c": 2}`` (a non-dict
    ``tree`` is ``{prefix: tree}``; an empty nested dict leaves no key)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(flatten(value, full))
        else:
            out[full] = value
    return out


def one_line(exc: BaseException, join: bool = False, with_type: bool = False) -> str:
    """The message of ``exc`` on one line, for errors printed without a
    traceback: its first line, or with ``join`` all its non-blank lines
    (each stripped) joined by ``"; "``; with ``with_type`` after the
    exception's type name (``"OSError: ..."``). An empty message gives the
    type name alone."""
    text = str(exc).strip()
    if join:
        message = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    else:
        message = text.splitlines()[0] if text else ""
    if not message:
        return type(exc).__name__
    return f"{type(exc).__name__}: {message}" if with_type else message


def ignore_import_warnings() -> None:
    """Hide torch's "``torch.jit.script`` is deprecated" warning (a
    ``FutureWarning`` since torch 2.14), which importing PyTorch Geometric
    raises: the command line prints its errors as one line, and this warning
    is not ours to fix."""
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated")


def worker_device(devices: Sequence[str], i: int) -> str | None:
    """The device of a pool's worker or task ``i``: ``devices`` in turn (``None``: none given)."""
    return devices[i % len(devices)] if devices else None


def worker_threads(devices: Sequence[str], jobs: int) -> int | None:
    """CPU threads for each of ``jobs`` workers on the CPU: the cores shared out, at least one;
    ``None`` (torch's own) where the workers run on accelerators."""
    if devices and not all(d.startswith("cpu") for d in devices):
        return None
    return max(1, (os.cpu_count() or 1) // jobs)
