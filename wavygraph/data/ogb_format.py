"""Write a homogeneous node-property graph in OGB's on-disk format.

The layout is the one OGB's ``PygNodePropPredDataset`` reads after
unzipping an archive (``arxiv.zip`` -> ``<root>/ogbn_arxiv``)::

    <root>/ogbn_arxiv/RELEASE_v1.txt
    <root>/ogbn_arxiv/raw/{edge,num-node-list,num-edge-list,node-label}.csv.gz
    <root>/ogbn_arxiv/raw/node-feat.csv.gz, node_year.csv.gz   (per master.csv)
    <root>/ogbn_arxiv/split/time/{train,valid,test}.csv.gz
    <root>/ogbn_arxiv/mapping/README.md

Use it to build small stand-ins of OGB data sets for tests and offline
machines: OGB's loader then processes them like the real download.
"""
from __future__ import annotations

import os
from typing import Mapping

import numpy as np
import pandas as pd
from torch import Tensor


def _write(path: str, array) -> None:
    array = array.detach().cpu().numpy() if isinstance(array, Tensor) else np.asarray(array)
    if array.ndim == 1:
        array = array[:, None]
    pd.DataFrame(array).to_csv(path, header=False, index=False, compression="gzip")


def ogb_meta(name: str) -> pd.Series:
    """The column of OGB's ``master.csv`` for the node data set ``name``."""
    import ogb.nodeproppred

    master = pd.read_csv(
        os.path.join(os.path.dirname(ogb.nodeproppred.__file__), "master.csv"),
        index_col=0,
        keep_default_na=False,
    )
    return master[name]


def write_ogb_node_dataset(
    root: str,
    name: str,
    edge_index,
    y,
    split_idx: Mapping[str, object],
    x=None,
    edge_attr=None,
    node_files: Mapping[str, object] | None = None,
) -> str:
    """Write a graph as OGB's raw files for the node data set ``name``.

    Args:
        root: the folder that holds OGB data sets (``data.root``).
        name: an OGB node data set, e.g. ``"ogbn-arxiv"``; its
            ``master.csv`` entry decides the folder and the split name.
        edge_index: ``(2, E)`` edges, written as stored (OGB adds the
            inverse edges itself for the data sets that ask for it).
        y: ``(N,)`` or ``(N, T)`` labels.
        split_idx: ``{"train": idx, "valid": idx, "test": idx}``.
        x: ``(N, F)`` node features (for data sets that have them).
        edge_attr: ``(E, F_e)`` edge features (for data sets that have them).
        node_files: extra per-node files, e.g. ``{"node_year": years}``.

    Returns:
        The data set folder, e.g. ``<root>/ogbn_arxiv``.
    """
    meta = ogb_meta(name)
    folder = os.path.join(root, "_".join(name.split("-")))
    raw = os.path.join(folder, "raw")
    split = os.path.join(folder, "split", meta["split"])
    for d in (raw, split, os.path.join(folder, "mapping")):
        os.makedirs(d, exist_ok=True)
    num_nodes = len(y)
    edge_index = np.asarray(edge_index.cpu() if isinstance(edge_index, Tensor) else edge_index)
    _write(os.path.join(raw, "edge.csv.gz"), edge_index.T)
    _write(os.path.join(raw, "num-node-list.csv.gz"), [num_nodes])
    _write(os.path.join(raw, "num-edge-list.csv.gz"), [edge_index.shape[1]])
    _write(os.path.join(raw, "node-label.csv.gz"), y)
    if x is not None:
        _write(os.path.join(raw, "node-feat.csv.gz"), x)
    if edge_attr is not None:
        _write(os.path.join(raw, "edge-feat.csv.gz"), edge_attr)
    for key, values in (node_files or {}).items():
        _write(os.path.join(raw, f"{key}.csv.gz"), values)
    for key in ("train", "valid", "test"):
        _write(os.path.join(split, f"{key}.csv.gz"), split_idx[key])
    with open(os.path.join(folder, "mapping", "README.md"), "w") as f:
        f.write("Written by wavygraph.data.ogb_format: no mapping to original ids.\n")
    with open(os.path.join(folder, f"RELEASE_v{meta['version']}.txt"), "w") as f:
        f.write(f"{name} stand-in written by wavygraph\n")
    return folder
