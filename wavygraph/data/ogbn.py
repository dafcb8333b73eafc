"""OGB node property prediction data sets through OGB's own loader.

``PygNodePropPredDataset`` of ogb 1.3.6 reads its processed file and its
``split_dict.pt`` with a bare ``torch.load``; torch >= 2.6 loads with
``weights_only=True`` and refuses the PyG classes unless they are allow-listed.
:func:`ogb_safe_load` allow-lists exactly the PyG storage classes, only while
OGB loads (``torch.serialization.safe_globals``), so the process keeps
torch's safe default everywhere else.

Offline: nothing is downloaded. Before OGB's loader runs, the raw and split
files it needs are checked; when they are missing a
:class:`DatasetNotFoundError` names the archive and the folder.
"""
from __future__ import annotations

import contextlib
import os
import shutil

import torch
from torch_geometric.data import Data
from torch_geometric.utils import scatter, to_undirected

from .errors import DatasetNotFoundError, WavygraphDataError
from .info import DatasetInfo
from .ogb_format import ogb_meta


def _pyg_storage_classes() -> list:
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import BaseStorage, EdgeStorage, GlobalStorage, NodeStorage

    return [Data, DataEdgeAttr, DataTensorAttr, BaseStorage, GlobalStorage, NodeStorage, EdgeStorage]


@contextlib.contextmanager
def ogb_safe_load():
    """Allow-list PyG's ``Data`` classes for ``torch.load`` inside the block only."""
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is None:  # torch < 2.5: weights_only is not the default
        yield
        return
    with safe_globals(_pyg_storage_classes()):
        yield


def ogb_folder(root: str, name: str) -> str:
    """Where OGB looks for ``name`` under ``root`` (``ogbn_arxiv`` or ``ogbn_arxiv_pyg``)."""
    dir_name = "_".join(name.split("-"))
    if os.path.exists(os.path.join(root, dir_name + "_pyg")):
        dir_name += "_pyg"
    return os.path.join(root, dir_name)


def ogb_required_files(name: str) -> list[str]:
    """Files (relative to the data set folder) OGB needs to process ``name``."""
    meta = ogb_meta(name)
    raw = ["edge", "num-node-list", "num-edge-list", "node-label"]
    if meta["has_node_attr"] == "True":
        raw.append("node-feat")
    if meta["has_edge_attr"] == "True":
        raw.append("edge-feat")
    if meta["additional node files"] != "None":
        raw += meta["additional node files"].split(",")
    files = [os.path.join("raw", f"{f}.csv.gz") for f in raw]
    files += [os.path.join("split", meta["split"], f"{s}.csv.gz") for s in ("train", "valid", "test")]
    return files


def _check_ogb_files(root: str, name: str) -> str:
    meta = ogb_meta(name)
    folder = ogb_folder(root, name)
    archive = os.path.basename(meta["url"])
    how = (
        f"download {archive} ({meta['url']}), unzip it in {root} and rename "
        f"{os.path.join(root, meta['download_name'])} to {folder}"
    )
    processed = os.path.join(folder, "processed", "geometric_data_processed.pt")
    if not os.path.isdir(folder):
        raise DatasetNotFoundError(f"{name} not found: {folder} does not exist; {how}")
    release = os.path.join(folder, f"RELEASE_v{meta['version']}.txt")
    if not os.path.exists(release):
        raise DatasetNotFoundError(
            f"{name}: {release} is missing (OGB would ask to re-download); {how}"
        )
    split_dir = os.path.join(folder, "split", meta["split"])
    need = ogb_required_files(name)
    if os.path.exists(processed):
        need = [f for f in need if f.startswith("split")]
    # ogbn-proteins ships species.csv.gz, which OGB renames to node_species.csv.gz
    missing = [
        f
        for f in need
        if not os.path.exists(os.path.join(folder, f))
        and not (f.endswith("node_species.csv.gz") and os.path.exists(os.path.join(folder, "raw", "species.csv.gz")))
    ]
    if os.path.exists(os.path.join(split_dir, "split_dict.pt")):
        missing = [f for f in missing if not f.startswith("split")]
    if missing:
        raise DatasetNotFoundError(f"{name}: missing {', '.join(missing)} in {folder}; {how}")
    return folder


def _load_ogb(name: str, root: str):
    from ogb.nodeproppred import PygNodePropPredDataset

    class _Offline(PygNodePropPredDataset):
        def download(self):  # files were checked; never reach the network
            raise DatasetNotFoundError(f"{name}: raw files missing in {self.raw_dir}")

    folder = _check_ogb_files(root, name)
    processed_dir = os.path.join(folder, "processed")
    had_processed = os.path.isdir(processed_dir)
    try:
        with ogb_safe_load():
            dataset = _Offline(name=name, root=root)
            split_idx = dataset.get_idx_split()
    except BaseException as exc:
        if not had_processed:  # leave no half-processed folder behind
            shutil.rmtree(processed_dir, ignore_errors=True)
        if isinstance(exc, (WavygraphDataError, KeyboardInterrupt)):
            raise
        raise WavygraphDataError(
            f"{name}: OGB could not read {folder} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        ) from exc
    return dataset, split_idx


def _masks(data: Data, split_idx: dict) -> None:
    n = data.num_nodes
    for key, attr in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[split_idx[key]] = True
        data[attr] = mask


def load_ogbn(name: str, root: str, split: int = 0) -> tuple[Data, DatasetInfo]:
    """``ogbn-arxiv`` (edges made undirected), ``ogbn-products`` or
    ``ogbn-proteins`` (x = mean of the incident edges' features, as in
    DIFFormer; 112 binary tasks) with OGB's official split as masks."""
    if split != 0:
        raise WavygraphDataError(f"{name} has one official split; data.split must be 0, got {split}")
    dataset, split_idx = _load_ogb(name, root)
    g = dataset[0]
    n = g.num_nodes
    if name == "ogbn-proteins":
        # every edge is stored in both directions (add_inverse_edge), so the
        # mean over edges by source node is the mean over incident edges
        x = scatter(g.edge_attr.float(), g.edge_index[0], dim=0, dim_size=n, reduce="mean")
        data = Data(x=x, edge_index=g.edge_index, y=g.y.float(), num_nodes=n)
        info = DatasetInfo(name, "multilabel", "rocauc", x.shape[1], g.y.shape[1], ogb_name=name)
    else:
        edge_index = to_undirected(g.edge_index, num_nodes=n) if name == "ogbn-arxiv" else g.edge_index
        y = g.y.view(-1).long()
        data = Data(x=g.x.float(), edge_index=edge_index, y=y, num_nodes=n)
        info = DatasetInfo(name, "multiclass", "acc", g.x.shape[1], dataset.num_classes, ogb_name=name)
    _masks(data, split_idx)
    return data, info
