"""OGB node property prediction data sets through OGB's own loader.

``PygNodePropPredDataset`` of ogb 1.3.6 reads its processed file and its
``split_dict.pt`` with a bare ``torch.load``; torch >= 2.6 loads with
``weights_only=True`` and refuses the PyG classes unless they are allow-listed.
:func:`ogb_safe_load` allow-lists exactly the PyG storage classes, only while
OGB loads (``torch.serialization.safe_globals``), so the process keeps
torch's safe default everywhere else.

Before OGB's loader runs, the raw and split files it needs are checked.
When they are missing and ``download`` is true, OGB's own ``download`` fetches
the archive (``master.csv``'s URL) into a staging folder, OGB processes it
there, and the finished folder is moved into place (see
:mod:`wavygraph.data.download`). With ``download=False``, or when the
download fails, a one-line :class:`DatasetNotFoundError` names the URL, the
archive and the folder to unzip it into. Checking, fetching, processing
and reading hold the lock of the data set's folder (:mod:`wavygraph.data.lock`),
so concurrent runs on one root wait for the first instead of racing it.
"""
from __future__ import annotations

import contextlib
import os
import shutil

import torch
from torch_geometric.data import Data
from torch_geometric.utils import scatter, to_undirected

from wavygraph.utils import one_line

from .download import answer_ogb_prompts, move_into_place, network_error, staging_folder
from .errors import DatasetNotFoundError, WavygraphDataError
from .info import DatasetInfo
from .lock import dataset_lock
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
    how = manual_steps(root, name)
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


def manual_steps(root: str, name: str) -> str:
    """How to put ``name`` under ``root`` by hand (one line)."""
    meta = ogb_meta(name)
    return (
        f"download {os.path.basename(meta['url'])} ({meta['url']}), unzip it in {root} and rename "
        f"{os.path.join(root, meta['download_name'])} to {ogb_folder(root, name)}"
    )


def _fetching_class(name: str, root: str):
    from ogb.nodeproppred import PygNodePropPredDataset

    class _Fetching(PygNodePropPredDataset):
        def download(self):  # OGB's own download; any failure names the URL and the manual steps
            try:
                super().download()
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                raise network_error(name, self.meta_info["url"], exc, manual_steps(root, name)) from exc

    return _Fetching


def fetch_ogb(name: str, root: str, log=print) -> str:
    """Download and process ``name`` with OGB's own code in a staging folder,
    then move the finished folder to ``<root>/ogbn_*``; returns that folder."""
    target = ogb_folder(root, name)
    cls = _fetching_class(name, root)
    with staging_folder(root) as tmp, answer_ogb_prompts(True, log):
        try:
            with ogb_safe_load():
                dataset = cls(name=name, root=tmp)
                dataset.get_idx_split()
        except (WavygraphDataError, KeyboardInterrupt):
            raise
        except BaseException as exc:  # SystemExit included: OGB exits when a download is declined
            why = one_line(exc, with_type=True)
            raise WavygraphDataError(f"{name}: OGB could not process the download ({why})") from exc
        move_into_place(dataset.root, target)
    return target


def _load_ogb(name: str, root: str, download: bool = True):
    """OGB's dataset and split, checked, fetched and processed under the lock
    of ``<root>/ogbn_*`` (concurrent processes wait for the first)."""
    with dataset_lock(os.path.join(root, "_".join(name.split("-")))):
        return _load_ogb_locked(name, root, download)


def _load_ogb_locked(name: str, root: str, download: bool):
    from ogb.nodeproppred import PygNodePropPredDataset

    class _Offline(PygNodePropPredDataset):
        def download(self):  # files were checked; never reach the network
            raise DatasetNotFoundError(f"{name}: raw files missing in {self.raw_dir}")

    try:
        folder = _check_ogb_files(root, name)
    except DatasetNotFoundError as exc:
        if not download:
            raise DatasetNotFoundError(f"{exc} (data.download=false; set data.download=true to let OGB fetch it)") from None
        fetch_ogb(name, root)
        folder = _check_ogb_files(root, name)
    processed_dir = os.path.join(folder, "processed")
    had_processed = os.path.isdir(processed_dir)
    try:
        with ogb_safe_load(), answer_ogb_prompts(False):
            dataset = _Offline(name=name, root=root)
            split_idx = dataset.get_idx_split()
    except BaseException as exc:
        if not had_processed:  # leave no half-processed folder behind
            shutil.rmtree(processed_dir, ignore_errors=True)
        if isinstance(exc, (WavygraphDataError, KeyboardInterrupt)):
            raise
        raise WavygraphDataError(f"{name}: OGB could not read {folder} ({one_line(exc, with_type=True)})") from exc
    return dataset, split_idx


def _set_official_masks(data: Data, split_idx: dict) -> None:
    """``data``'s boolean masks from OGB's ``split_idx`` node indices."""
    n = data.num_nodes
    for key, attr in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[split_idx[key]] = True
        data[attr] = mask


def load_ogbn(name: str, root: str, split: int = 0, download: bool = True) -> tuple[Data, DatasetInfo]:
    """``ogbn-arxiv`` (edges made undirected), ``ogbn-products`` or
    ``ogbn-proteins`` (x = mean of the incident edges' features, as in
    DIFFormer; 112 binary tasks) with OGB's official split as masks.
    Missing files are fetched by OGB's own code when ``download`` is true."""
    if split != 0:
        raise WavygraphDataError(f"{name} has one official split; data.split must be 0, got {split}")
    dataset, split_idx = _load_ogb(name, root, download)
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
    _set_official_masks(data, split_idx)
    return data, info
