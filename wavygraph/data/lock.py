"""One lock per data set folder, so that concurrent runs share one data root.

Preparing a data set writes under its folder: PyG and OGB process the raw
files into ``processed/``, a download is moved into place. Two processes
that do it at once (two ``wavygraph train``, the workers of ``wavygraph sweep
--jobs N``, the ``--shard i/n`` jobs of a cluster array on a shared file
system) delete or read each other's half-written files. Every loader that may
write therefore holds :func:`dataset_lock` around the whole preparation *and*
the read: the first process prepares the folder, the others wait and then read
the finished files.

The lock is :class:`filelock.FileLock` on ``<root>/.<folder>.lock`` (``flock``
on Unix, ``msvcrt`` locking on Windows): the operating system releases it when
the holding process ends, killed or not, so a lock file left behind never
blocks the next run. After a successful preparation the file stays. After a
failed one it is removed while still held, with the data root when the failed
run created it, so that a failure leaves nothing behind; filelock discards a
lock taken on a file removed in between and takes the new one instead. On a
network file system the lock works where the file system supports ``flock``
(NFSv4; Lustre mounted with ``-o flock``).
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Callable, Iterator

import filelock
from filelock import FileLock, Timeout

try:
    from .errors import WavygraphDataError
except ImportError:  # loaded by its path, outside the package (a plain holder process)
    WavygraphDataError = ValueError

#: Seconds between the "still waiting" lines while another process holds the lock.
REPORT_EVERY = 30.0


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


#: Whether a held lock file may be removed: filelock re-takes a lock whose file was removed
#: while it waited from 3.20.4 on (the Unix lock of those versions removes its own file on
#: release and relies on that check); with an older filelock a failed run leaves the file.
REMOVE_ON_FAILURE = _version(getattr(filelock, "__version__", "0")) >= (3, 20, 4)


def lock_path(folder: str | os.PathLike) -> str:
    """The lock file of the data set folder ``folder``: ``<parent>/.<name>.lock``
    (name lower-cased, so that ``Cora`` and ``cora`` share one lock)."""
    parent, name = os.path.split(os.path.abspath(os.fspath(folder)).rstrip(os.sep))
    return os.path.join(parent, f".{name.lower()}.lock")


def _log(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(message, file=sys.stderr)  # above a running progress bar, not through it


def _try(lock: FileLock, path: str, timeout: float) -> bool:
    try:
        lock.acquire(timeout=timeout)
        return True
    except Timeout:
        return False
    except FileNotFoundError:  # a failed holder removed the root it had created: make it again
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return False


def _acquire(lock: FileLock, path: str, folder: str, log: Callable[[str], None], report_every: float) -> None:
    if _try(lock, path, 0):
        return
    log(f"wavygraph: waiting for {path} (another process is preparing or reading {folder})")
    start = last = time.monotonic()
    while not _try(lock, path, report_every):
        if time.monotonic() - last >= report_every:
            last = time.monotonic()
            log(f"wavygraph: still waiting for {path} ({last - start:.0f} s; "
                "the other process holds it until it has finished or ended)")


@contextlib.contextmanager
def dataset_lock(
    folder: str | os.PathLike, log: Callable[[str], None] | None = None, report_every: float = REPORT_EVERY
) -> Iterator[str]:
    r"""Hold the lock of the data set folder ``folder`` inside the block.

    Returns immediately when no other process holds it. Otherwise prints one
    line saying which lock it waits for, then one line every ``report_every``
    seconds with the time waited so far, and enters the block once the other
    process has finished (or died). The parent of ``folder`` (the data root)
    is created if missing; the folder itself is not. When the block raises,
    the lock file (and a data root created here, if empty) is removed before
    the lock is released.

    Args:
        folder (str or os.PathLike): the data set's folder, e.g.
            ``<root>/Cora`` or ``<root>/ogbn_arxiv``.
        log (callable, optional): receives the waiting lines (default:
            :func:`tqdm.write` to standard error).
        report_every (float, optional): seconds between the "still waiting"
            lines. (default: :obj:`30.0`)

    Yields:
        str: the path of the lock file.
    """
    path = lock_path(folder)
    root = os.path.dirname(path)
    created_root = not os.path.isdir(root)
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:  # a file in the way, no permission: data.root cannot hold the data set
        why = "a file, not a folder" if os.path.isfile(root) else exc.strerror
        raise WavygraphDataError(f"data.root: cannot use {root} as the data folder ({why}); "
                                 "set data.root to a folder you can write to") from None
    lock = FileLock(path)
    _acquire(lock, path, os.fspath(folder), log or _log, report_every)
    try:
        yield path
    except BaseException:
        if REMOVE_ON_FAILURE:  # removed while held: a waiter that opened it re-takes the new file
            with contextlib.suppress(OSError):
                os.unlink(path)
            if created_root:
                with contextlib.suppress(OSError):
                    os.rmdir(root)  # only when empty
        raise
    finally:
        lock.release()
