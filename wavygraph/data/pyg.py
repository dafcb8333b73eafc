"""PyG's data sets by name.

Each is read from ``<root>/<Name>/raw`` (Planetoid: ``<root>/Cora/raw``,
``<root>/CiteSeer/raw``; Actor: ``<root>/Actor/raw``; ...). The first attempt
is offline: the PyG class is subclassed with a ``download`` that never
reaches the network and raises :class:`DatasetNotFoundError` naming the
missing files and the folder (the folders the attempt created are removed
again). With ``download=True`` the plain PyG class then fetches and processes
the files in a staging folder, and the finished folder is moved under
``root`` (see :mod:`wavygraph.data.download`). Reading, processing and
fetching hold the data set's lock (:mod:`wavygraph.data.lock`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field

from torch_geometric.data import Data

from wavygraph.utils import one_line

from .download import move_into_place, network_error, staging_folder
from .errors import DatasetNotFoundError, WavygraphDataError
from .info import DatasetInfo
from .lock import dataset_lock
from .ogbn import ogb_safe_load
from .splits import random_split, select_split


@dataclass(frozen=True)
class PyGSource:
    """How to build one PyG data set: ``cls(root=<root>[/subdir], **kwargs)``."""

    cls_name: str
    kwargs: dict = field(default_factory=dict)
    subdir: str | None = None  # for classes whose root *is* the data set folder
    metric: str = "acc"
    case_dir: str | None = None  # folder name to look up case-insensitively


def _dirs(root: str, depth: int = 4) -> set[str]:
    found = set()
    if not os.path.isdir(root):
        return found
    base = root.rstrip(os.sep).count(os.sep)
    for path, dirs, _ in os.walk(root):
        found.add(path)
        if path.count(os.sep) - base >= depth:
            dirs[:] = []
    return found


@contextlib.contextmanager
def remove_new_dirs_on_error(root: str):
    """Remove the folders under ``root`` (and ``root``) created inside the
    block when it raises, so that no half-made data set folder remains."""
    root = os.path.abspath(root)
    parent_existed = os.path.isdir(root)
    before = _dirs(root)
    try:
        yield
    except BaseException:
        if not parent_existed:
            shutil.rmtree(root, ignore_errors=True)
        else:
            new = sorted(_dirs(root) - before, key=len)
            removed: list[str] = []
            for d in new:
                if not any(d.startswith(r + os.sep) for r in removed):
                    shutil.rmtree(d, ignore_errors=True)
                    removed.append(d)
        raise


def _refuse_download(self) -> None:
    paths = self.raw_paths
    missing = [os.path.basename(p) for p in paths if not os.path.exists(p)] or [os.path.basename(p) for p in paths]
    url = getattr(self, "url", None)
    src = f" (from {url})" if isinstance(url, str) else ""
    name = getattr(self, "_wavygraph_name", type(self).__name__)
    raise DatasetNotFoundError(f"{name} not found: put {', '.join(missing)} into {self.raw_dir}{src}")


def _offline_class(cls_name: str, name: str):
    import torch_geometric.datasets as datasets

    cls = getattr(datasets, cls_name)
    # same class name: PyG's processed files and reprs are unchanged
    return type(cls.__name__, (cls,), {"download": _refuse_download, "__module__": cls.__module__, "_wavygraph_name": name})


def _case_insensitive(root: str, name: str) -> str:
    if os.path.isdir(root) and not os.path.isdir(os.path.join(root, name)):
        for entry in os.listdir(root):
            if entry.lower() == name.lower() and os.path.isdir(os.path.join(root, entry)):
                return entry
    return name


def _fetching_class(cls_name: str, name: str, root: str, tmp: str):
    import torch_geometric.datasets as datasets

    cls = getattr(datasets, cls_name)

    def download(self) -> None:  # PyG's own download; a failure names the URL and the manual steps
        try:
            cls.download(self)
        except Exception as exc:
            url = getattr(self, "url", None)
            files = ", ".join(os.path.basename(p) for p in self.raw_paths)
            manual = f"put {files} into {os.path.join(root, os.path.relpath(self.raw_dir, tmp))}"
            raise network_error(name, url if isinstance(url, str) else cls.__name__, exc, manual) from exc

    return type(cls.__name__, (cls,), {"download": download, "__module__": cls.__module__})


def fetch_pyg(name: str, source: PyGSource, root: str, kwargs: dict) -> None:
    """Download and process ``name`` with PyG's own code in a staging folder,
    then move the finished folder(s) under ``root``."""
    with staging_folder(root) as tmp:
        cls = _fetching_class(source.cls_name, name, root, tmp)
        ds_root = os.path.join(tmp, source.subdir) if source.subdir else tmp
        try:
            with ogb_safe_load():
                cls(root=ds_root, **kwargs)
        except WavygraphDataError:
            raise
        except Exception as exc:
            why = one_line(exc, with_type=True)
            raise WavygraphDataError(f"{name}: PyG could not process the download ({why})") from exc
        for entry in os.listdir(tmp):
            move_into_place(os.path.join(tmp, entry), os.path.join(root, entry))


def _read_offline(name: str, source: PyGSource, root: str, kwargs: dict):
    ds_root = os.path.join(root, source.subdir) if source.subdir else root
    cls = _offline_class(source.cls_name, name)
    with remove_new_dirs_on_error(root):
        try:
            with ogb_safe_load():  # PyG's own weights-only load, without its unsafe fallback
                return cls(root=ds_root, **kwargs)
        except WavygraphDataError:
            raise
        except Exception as exc:
            raise WavygraphDataError(f"{name}: PyG could not read {ds_root} ({one_line(exc, with_type=True)})") from exc


def _prepare(name: str, source: PyGSource, root: str, download: bool) -> Data:
    """The PyG data set's graph, read (processed first if need be, fetched first
    when missing and ``download``) under the lock of its folder, so that
    concurrent processes never see each other's half-written files."""
    kwargs = dict(source.kwargs)
    with dataset_lock(os.path.join(root, source.subdir or kwargs.get("name") or name)):
        if "name" in kwargs and source.case_dir:
            kwargs["name"] = _case_insensitive(root, kwargs["name"])
        try:
            return _read_offline(name, source, root, kwargs)[0]
        except DatasetNotFoundError as exc:
            if not download:
                raise DatasetNotFoundError(
                    f"{exc} (data.download=false; set data.download=true to let PyG fetch it)"
                ) from None
            fetch_pyg(name, source, root, kwargs)
            return _read_offline(name, source, root, kwargs)[0]


def load_pyg(name: str, source: PyGSource, root: str, split: int = 0, download: bool = True) -> tuple[Data, DatasetInfo]:
    """Load a PyG data set (fetched by PyG when missing and ``download``)
    and select ``split`` of its masks.

    Data sets with several splits (Actor, WebKB, WikipediaNetwork,
    HeterophilousGraphDataset: 10; WikiCS: 20) take column ``split``; those
    with one (Planetoid: the public split) need ``split=0``; those with none
    (Amazon, Coauthor) get a random 60/20/20 split seeded by ``split``.
    """
    g = _prepare(name, source, root, download)
    y = g.y.view(-1).long()
    data = Data(x=g.x.float(), edge_index=g.edge_index, y=y, num_nodes=g.num_nodes)
    if getattr(g, "train_mask", None) is None:
        data.train_mask, data.val_mask, data.test_mask = random_split(y, split)
        num_splits = None
    else:
        num_splits = g.train_mask.shape[1] if g.train_mask.dim() == 2 else 1
        if num_splits == 1 and split != 0:
            raise WavygraphDataError(f"{name} has one split; data.split must be 0, got {split}")
        data.train_mask, data.val_mask, data.test_mask = select_split(
            [g.train_mask, g.val_mask, g.test_mask], split,
            lambda count: WavygraphDataError(f"{name} has {count} splits (0..{count - 1}); got data.split={split}"),
        )
    num_classes = int(y.max()) + 1
    info = DatasetInfo(
        name, "multiclass", source.metric, data.x.shape[1], num_classes, num_splits=num_splits or 0
    )
    return data, info


#: name -> how to build it (see :func:`load_pyg`).
PYG_SOURCES: dict[str, PyGSource] = {
    "cora": PyGSource("Planetoid", {"name": "Cora"}, case_dir="Cora"),
    "citeseer": PyGSource("Planetoid", {"name": "CiteSeer"}, case_dir="CiteSeer"),
    "pubmed": PyGSource("Planetoid", {"name": "PubMed"}, case_dir="PubMed"),
    "actor": PyGSource("Actor", subdir="Actor"),
    "cornell": PyGSource("WebKB", {"name": "Cornell"}),
    "texas": PyGSource("WebKB", {"name": "Texas"}),
    "wisconsin": PyGSource("WebKB", {"name": "Wisconsin"}),
    "chameleon": PyGSource("WikipediaNetwork", {"name": "chameleon"}),
    "squirrel": PyGSource("WikipediaNetwork", {"name": "squirrel"}),
    "roman-empire": PyGSource("HeterophilousGraphDataset", {"name": "Roman-empire"}),
    "amazon-ratings": PyGSource("HeterophilousGraphDataset", {"name": "Amazon-ratings"}),
    "minesweeper": PyGSource("HeterophilousGraphDataset", {"name": "Minesweeper"}, metric="rocauc"),
    "tolokers": PyGSource("HeterophilousGraphDataset", {"name": "Tolokers"}, metric="rocauc"),
    "questions": PyGSource("HeterophilousGraphDataset", {"name": "Questions"}, metric="rocauc"),
    "amazon-computers": PyGSource("Amazon", {"name": "Computers"}),
    "amazon-photo": PyGSource("Amazon", {"name": "Photo"}),
    "coauthor-cs": PyGSource("Coauthor", {"name": "CS"}),
    "coauthor-physics": PyGSource("Coauthor", {"name": "Physics"}),
    "wikics": PyGSource("WikiCS", {"is_undirected": True}, subdir="WikiCS"),
}
