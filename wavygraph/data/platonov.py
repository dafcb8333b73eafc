"""The filtered Wikipedia graphs of Platonov et al. in their authors' format.

`A critical look at the evaluation of GNNs under heterophily: are we really
making progress? <https://arxiv.org/abs/2302.11640>`_ (ICLR 2023) removes the
duplicated nodes of PyG's ``chameleon`` and ``squirrel`` (they leak test
labels into training) and publishes the filtered graphs as one ``.npz`` each
with ``node_features`` (N, F), ``node_labels`` (N,), ``edges`` (E, 2) and ten
splits ``train_masks`` / ``val_masks`` / ``test_masks`` (10, N). PyG's
:class:`~torch_geometric.datasets.HeterophilousGraphDataset` reads the same
format for the authors' other graphs but not for these two.

The file is read from ``<root>/<stem>/raw/<stem>.npz`` with ``stem``
``chameleon_filtered`` or ``squirrel_filtered`` (the authors' file names; a
folder spelt with a hyphen is found too). The edges are made undirected, as
the authors' training code and PyG's loader of the same format do. With
``download`` a missing file is fetched from the authors' repository into a
staging folder and moved into place (:mod:`wavygraph.data.download`), under
the data set's lock (:mod:`wavygraph.data.lock`).
"""
from __future__ import annotations

import os

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from wavygraph.utils import one_line

from .download import move_into_place, network_error, staging_folder
from .errors import DatasetNotFoundError, WavygraphDataError
from .info import DatasetInfo
from .lock import dataset_lock
from .splits import select_split

#: where the authors publish the files (``<URL>/<stem>.npz``)
URL = "https://github.com/yandex-research/heterophilous-graphs/raw/main/data"
#: registered name -> the authors' file stem
FILTERED = {"chameleon-filtered": "chameleon_filtered", "squirrel-filtered": "squirrel_filtered"}
KEYS = ("node_features", "node_labels", "edges", "train_masks", "val_masks", "test_masks")


def raw_path(root: str, stem: str) -> str:
    """``<root>/<stem>/raw/<stem>.npz``, or the hyphenated folder when only that exists."""
    for folder in (stem, stem.replace("_", "-")):
        path = os.path.join(root, folder, "raw", f"{stem}.npz")
        if os.path.exists(path):
            return path
    return os.path.join(root, stem, "raw", f"{stem}.npz")


def fetch(name: str, stem: str, root: str) -> None:
    """Download ``<stem>.npz`` into ``<root>/<stem>/raw`` through a staging folder."""
    from torch_geometric.data import download_url

    url = f"{URL}/{stem}.npz"
    with staging_folder(root) as tmp:
        try:
            download_url(url, os.path.join(tmp, stem, "raw"), log=False)
        except Exception as exc:
            manual = f"put {stem}.npz into {os.path.join(root, stem, 'raw')}"
            raise network_error(name, url, exc, manual) from exc
        read_npz(name, os.path.join(tmp, stem, "raw", f"{stem}.npz"))  # a broken download never moves
        move_into_place(os.path.join(tmp, stem), os.path.join(root, stem))


def read_npz(name: str, path: str) -> dict[str, np.ndarray]:
    """The arrays of the authors' file; a missing key or a file that is not an
    ``.npz`` is one :class:`WavygraphDataError` naming the file."""
    try:
        with np.load(path) as npz:
            arrays = {key: npz[key] for key in KEYS if key in npz.files}
    except Exception as exc:
        raise WavygraphDataError(f"{name}: cannot read {path} ({one_line(exc, with_type=True)})") from exc
    missing = [key for key in KEYS if key not in arrays]
    if missing:
        raise WavygraphDataError(f"{name}: {path} lacks {', '.join(missing)} (the authors' format has {', '.join(KEYS)})")
    return arrays


def to_data(name: str, arrays: dict[str, np.ndarray], split: int) -> tuple[Data, int]:
    """A PyG graph with undirected edges and the masks of column ``split``."""
    x = torch.from_numpy(arrays["node_features"]).float()  # (N, F)
    y = torch.from_numpy(arrays["node_labels"]).long().view(-1)  # (N,)
    edges = torch.from_numpy(arrays["edges"]).long()  # (E, 2)
    if edges.dim() != 2 or edges.shape[1] != 2:
        raise WavygraphDataError(f"{name}: edges must have shape (E, 2), got {tuple(edges.shape)}")
    edge_index = to_undirected(edges.t().contiguous(), num_nodes=x.shape[0])
    masks = [torch.from_numpy(arrays[key]).bool().t() for key in ("train_masks", "val_masks", "test_masks")]  # (N, S)
    count = masks[0].shape[1] if masks[0].dim() == 2 else 1
    data = Data(x=x, edge_index=edge_index, y=y, num_nodes=x.shape[0])
    data.train_mask, data.val_mask, data.test_mask = select_split(
        masks, split, lambda n: WavygraphDataError(f"{name} has {n} splits (0..{n - 1}); got data.split={split}")
    )
    return data, count


def load_filtered(name: str, root: str, split: int = 0, download: bool = True) -> tuple[Data, DatasetInfo]:
    """Load ``chameleon-filtered`` or ``squirrel-filtered`` and select ``split`` (0-9)."""
    stem = FILTERED[name]
    with dataset_lock(os.path.join(root, stem)):
        path = raw_path(root, stem)
        if not os.path.exists(path):
            if not download:
                raise DatasetNotFoundError(
                    f"{name} not found: put {stem}.npz into {os.path.dirname(path)} (from {URL}/{stem}.npz) "
                    "(data.download=false; set data.download=true to fetch it)"
                )
            fetch(name, stem, root)
            path = raw_path(root, stem)
        arrays = read_npz(name, path)
    data, count = to_data(name, arrays, split)
    info = DatasetInfo(name, "multiclass", "acc", data.x.shape[1], int(data.y.max()) + 1, num_splits=count)
    return data, info
