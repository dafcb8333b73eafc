"""The run folder of ``wavygraph train``: complete or untouched.

A run writes its files (``config.yaml``, ``checkpoint.pt``, ``model.pt``,
``metrics.json``) into a work folder beside ``out_dir``,
``<parent>/.<name>.partial/`` (same file system), and publishes it by
renaming it to ``out_dir`` when it ends, as a sweep publishes a cell
(:func:`wavygraph.utils.publish_dir`). A run stopped at any moment, even by
``kill -9``, leaves ``out_dir`` as it was. While it lasts, rank 0 holds an
``flock`` on the work folder, so that a second run into the same ``out_dir``
can tell a live run from one that was killed.

:func:`plan` checks ``out_dir`` before anything is written, and refuses in one
line (:class:`~wavygraph.config.ConfigError`):

* an ``out_dir`` that is a file, lies under a file, or whose parent is not
  writable; a non-empty folder that holds no run (it is never replaced);
* an ``out_dir`` that holds a run (``config.yaml``, ``model.pt``,
  ``metrics.json`` or ``checkpoint.pt``), unless ``overwrite`` (the old run is
  replaced when the new one ends) or ``train.resume`` with its
  ``checkpoint.pt`` (the run continues from it and replaces the folder when
  it ends: a finished run's last checkpoint has stopped, so only the files
  are written again);
* a work folder of a live run;
* a work folder that an interrupted run left with a ``checkpoint.pt``,
  unless ``train.resume`` (continue from it; where ``out_dir`` holds a run,
  which it would replace, with ``overwrite`` too) or ``overwrite`` (discard
  it). One without a checkpoint holds nothing to continue and is removed.

A run that fails or is interrupted (Ctrl-C) keeps its work folder when it
holds a checkpoint (``--resume`` continues it) and removes it otherwise.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Iterator

from wavygraph.config import ConfigError
from wavygraph.utils import folder_problem, publish_dir

from .resume import CHECKPOINT

try:
    import fcntl
except ImportError:  # Windows: no lock, a second live run is not detected
    fcntl = None

#: The files a train run writes; a folder that holds one of them holds a run.
RUN_FILES = ("config.yaml", "model.pt", "metrics.json", CHECKPOINT)
WORK_SUFFIX = ".partial"


def work_dir_of(out_dir: str | os.PathLike) -> str:
    """``<parent>/.<name>.partial``: where the run of ``out_dir`` is written."""
    parent, name = os.path.split(os.path.abspath(os.fspath(out_dir)))
    return os.path.join(parent, f".{name}{WORK_SUFFIX}")


def _lock(path: str) -> int | None:
    """An open descriptor of folder ``path`` holding its exclusive ``flock``,
    or ``None`` when another process holds it. Where the file system has no
    ``flock`` the descriptor is returned unlocked."""
    if fcntl is None:
        return os.open(os.devnull, os.O_RDONLY)
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError:
        pass
    return fd


def _live(path: str) -> bool:
    """Whether a running process holds the lock of work folder ``path``."""
    fd = _lock(path)
    if fd is None:
        return True
    os.close(fd)
    return False


@dataclass
class RunFolder:
    """Where a run writes and what it continues from.

    Args:
        out_dir (str): the folder the run is published as (absolute).
        work_dir (str): where it is written while it lasts.
        resume_from (str, optional): the checkpoint to continue from.
        discard_work (bool): remove an interrupted run's work folder first.
    """

    out_dir: str
    work_dir: str
    resume_from: str | None = None
    discard_work: bool = False

    @property
    def checkpoint(self) -> str:
        """The checkpoint :func:`~wavygraph.train.resume.restore` looks for
        (with no ``resume_from``, one that does not exist)."""
        return self.resume_from or os.path.join(self.work_dir, CHECKPOINT)


def _refuse_run(shown: str, entries: list[str], resume: bool) -> ConfigError:
    what = "a finished run" if "metrics.json" in entries else "an unfinished run (no metrics.json)"
    if CHECKPOINT in entries:
        return ConfigError(f"out_dir={shown} already holds {what}; pass --overwrite to replace it when this run "
                           "ends, choose a new out_dir, or pass --resume to continue from its checkpoint.pt")
    why = "; it has no checkpoint.pt to resume from" if resume else " (and no checkpoint.pt to --resume from)"
    return ConfigError(f"out_dir={shown} already holds {what}{why}; pass --overwrite to replace it when this run "
                       "ends, or choose a new out_dir")


def plan(cfg, overwrite: bool = False, check_lock: bool = True) -> RunFolder:
    """Check ``cfg.out_dir`` (see the module's rules) and return the
    :class:`RunFolder`; writes nothing. ``check_lock=False`` (the ranks
    other than 0, whose rank 0 holds the lock) skips the live-run check."""
    shown, resume = str(cfg.out_dir), bool(cfg.train.resume)
    problem = folder_problem(shown, "out_dir", beside=True)
    if problem:
        raise ConfigError(problem)
    folder = RunFolder(os.path.abspath(shown), work_dir_of(shown))
    entries = sorted(os.listdir(folder.out_dir)) if os.path.isdir(folder.out_dir) else []
    if entries and not set(entries) & set(RUN_FILES):
        raise ConfigError(f"out_dir={shown} holds other files ({', '.join(entries[:3])}...), not a wavygraph run; "
                          "choose a new or an empty out_dir")
    work = folder.work_dir
    if os.path.isdir(work):
        if check_lock and _live(work):
            raise ConfigError(f"another run is writing into out_dir={shown} (in {work}); wait for it to end or "
                              "choose another out_dir")
        if os.path.isfile(os.path.join(work, CHECKPOINT)):
            if resume:
                folder.resume_from = os.path.join(work, CHECKPOINT)
            elif not overwrite:
                raise ConfigError(f"an interrupted run of out_dir={shown} left its checkpoint in {work}; continue it "
                                  "with --resume, or pass --overwrite to discard it and start over")
        folder.discard_work = folder.resume_from is None
    if entries and folder.resume_from is None:
        if resume and CHECKPOINT in entries:
            folder.resume_from = os.path.join(folder.out_dir, CHECKPOINT)
        elif not overwrite:
            raise _refuse_run(shown, entries, resume)
    elif entries and not overwrite:  # the interrupted run would replace another one
        raise ConfigError(f"out_dir={shown} already holds a run, which the interrupted run in {work} would replace "
                          "when it ends; pass --resume --overwrite to continue it and replace out_dir, or choose a "
                          "new out_dir")
    return folder


def _claim(folder: RunFolder) -> int | None:
    """Create (or take over) the work folder and lock it; returns the lock."""
    work = folder.work_dir
    if folder.discard_work:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(work), exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(work)
    fd = _lock(work)
    if fd is None:
        raise ConfigError(f"another run started writing into out_dir={folder.out_dir} (in {work}); wait for it to "
                          "end or choose another out_dir")
    for entry in os.listdir(work):  # an atomic write a killed run left unfinished (utils.atomic_write's temp)
        if entry.startswith(".") and entry.endswith(".tmp"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(work, entry))
    return fd


@contextlib.contextmanager
def publishing(folder: RunFolder | None, is_main: bool) -> Iterator[None]:
    """Around the part of a run that writes (rank 0; a no-op for the other
    ranks and for ``folder=None``): claim the work folder, and publish it as
    ``out_dir`` when the block ends, or keep it (with a checkpoint) / remove
    it when the block fails."""
    if folder is None or not is_main:
        yield
        return
    fd = _claim(folder)
    try:
        yield
        publish_dir(folder.work_dir, folder.out_dir, replace=True)
    except BaseException:
        if os.path.isfile(os.path.join(folder.work_dir, CHECKPOINT)):
            print(f"wavygraph: the unfinished run is kept in {folder.work_dir}; continue it with --resume",
                  file=sys.stderr, flush=True)
        else:
            shutil.rmtree(folder.work_dir, ignore_errors=True)
        raise
    finally:
        os.close(fd)
