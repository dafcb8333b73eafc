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
blocks the next run. The file itself stays (deleting a lock file that others
wait on would let two processes hold "the" lock at once). On a network file
system the lock works where the file system supports ``flock`` (NFSv4, Lustre
mounted with ``-o flock``).
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Callable, Iterator

from filelock import FileLock, Timeout

#: Seconds between the "still waiting" lines while another process holds the lock.
REPORT_EVERY = 30.0


def lock_path(folder: str | os.PathLike) -> str:
    """The lock file of the data set folder ``folder``: ``<parent>/.<name>.lock``
    (name lower-cased, so that ``Cora`` and ``cora`` share one lock)."""
    parent, name = os.path.split(os.path.abspath(os.fspath(folder)).rstrip(os.sep))
    return os.path.join(parent, f".{name.lower()}.lock")


def _log(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(message, file=sys.stderr)  # above a running progress bar, not through it


@contextlib.contextmanager
def dataset_lock(
    folder: str | os.PathLike, log: Callable[[str], None] | None = None, report_every: float = REPORT_EVERY
) -> Iterator[str]:
    r"""Hold the lock of the data set folder ``folder`` inside the block.

    Returns immediately when no other process holds it. Otherwise prints one
    line saying whose lock it waits for, then one line every ``report_every``
    seconds with the time waited so far, and enters the block once the other
    process has finished (or died). The parent of ``folder`` (the data root)
    is created if missing; the folder itself is not.

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
    log = log or _log
    path = lock_path(folder)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"wavygraph: waiting for {path} (another process is preparing or reading {os.fspath(folder)})")
        start = time.monotonic()
        while True:
            try:
                lock.acquire(timeout=report_every)
                break
            except Timeout:
                log(f"wavygraph: still waiting for {path} ({time.monotonic() - start:.0f} s; "
                    "the other process holds it until it has finished or ended)")
    try:
        yield path
    finally:
        lock.release()
