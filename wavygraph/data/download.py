"""Fetching missing data sets with OGB's and PyG's own download code.

Everything is fetched and processed in a staging folder
``<root>/.wavygraph-download-*``; only when the download, the extraction and
the processing have all succeeded is the data set's folder moved to its
place under ``root`` (a rename on the same file system). A failure or an
interruption removes the staging folder, so nothing half-made ever sits
where the loaders look.

OGB asks on standard input before downloading more than 1 GB and before
replacing an outdated folder. :func:`answer_ogb_prompts` answers both from
the configuration (``data.download=true`` means yes) for the duration of
the block, so a run never waits for a keyboard.
"""
from __future__ import annotations

import builtins
import contextlib
import os
import shutil
import tempfile
from typing import Callable, Iterator

from wavygraph.utils import one_line

from .errors import DatasetNotFoundError

STAGING_PREFIX = ".wavygraph-download-"


@contextlib.contextmanager
def staging_folder(root: str) -> Iterator[str]:
    """A fresh folder inside ``root`` (same file system), removed on exit;
    a ``root`` created here is removed again when the block fails."""
    created = not os.path.isdir(root)
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=root)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created and not os.listdir(root):
            os.rmdir(root)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def move_into_place(src: str, dst: str) -> None:
    """Move the complete folder ``src`` to ``dst``; an existing (incomplete or
    outdated) ``dst`` is removed only once ``src`` is complete."""
    if os.path.exists(dst):
        old = dst + ".wavygraph-old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)


@contextlib.contextmanager
def answer_ogb_prompts(answer: bool, log: Callable[[str], None] = print) -> Iterator[None]:
    """Inside the block, OGB's questions (``input()``) are answered by ``answer``
    and OGB's size check (``decide_download``) agrees without asking."""
    import ogb.nodeproppred.dataset_pyg as dataset_pyg

    def _input(prompt: str = "") -> str:
        reply = "y" if answer else "n"
        log(f"{str(prompt).strip()} -> {reply} (data.download={str(answer).lower()})")
        return reply

    saved_input, saved_decide = builtins.input, dataset_pyg.decide_download
    builtins.input = _input
    dataset_pyg.decide_download = lambda url: answer
    try:
        yield
    finally:
        builtins.input, dataset_pyg.decide_download = saved_input, saved_decide


def network_error(name: str, url: str, exc: BaseException, manual: str) -> DatasetNotFoundError:
    """The one-line error for a failed download: the URL, the cause, the manual steps."""
    return DatasetNotFoundError(
        f"{name}: could not download {url} ({one_line(exc, with_type=True)}); without a network: {manual}"
    )
