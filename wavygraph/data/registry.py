"""One registry of node-prediction data sets by name."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
from torch_geometric.data import Data

from wavygraph.checks import check_positive_int

from .csbm import load_csbm
from .errors import UnknownDatasetError, WavygraphDataError
from .files import load_file_graph
from .info import DatasetInfo
from .ogbn import load_ogbn
from .platonov import FILTERED, load_filtered
from .pyg import PYG_SOURCES, load_pyg
from .splits import SPLIT_MODES, per_class_split
from .validate import check_data


@dataclass(frozen=True)
class DatasetSpec:
    """A registered data set: ``loader(root=..., split=..., **options)``."""

    name: str
    loader: Callable[..., tuple[Data, DatasetInfo]]
    description: str
    source: str  # "ogb", "pyg", "platonov", "synthetic" or "file"


DATASETS: dict[str, DatasetSpec] = {}


def register(spec: DatasetSpec) -> DatasetSpec:
    DATASETS[spec.name] = spec
    return spec


for _name in ("ogbn-arxiv", "ogbn-proteins", "ogbn-products"):
    register(DatasetSpec(_name, partial(load_ogbn, _name), f"{_name} (OGB loader, official split, OGB Evaluator)", "ogb"))
for _name, _src in PYG_SOURCES.items():
    register(DatasetSpec(_name, partial(load_pyg, _name, _src), f"PyG {_src.cls_name}", "pyg"))
for _name in FILTERED:
    register(DatasetSpec(
        _name, partial(load_filtered, _name), f"{_name} (Platonov et al.'s file, 10 splits)", "platonov"
    ))
register(
    DatasetSpec(
        "csbm",
        lambda root=None, split=0, **options: load_csbm(split=split, **options),
        "contextual stochastic block model, generated (options: preset, num_nodes, ...)",
        "synthetic",
    )
)

register(
    DatasetSpec(
        "file",
        load_file_graph,
        "a graph file of your own (options: path, features, labels, train_fraction, val_fraction; docs/own_graphs.md)",
        "file",
    )
)

#: the sources read from ``root`` and fetched when missing (they take no options but ``download``)
DOWNLOADED = ("ogb", "pyg", "platonov")

ALIASES = {"film": "actor", "arxiv": "ogbn-arxiv", "proteins": "ogbn-proteins", "products": "ogbn-products"}


def normalize_features(x: torch.Tensor) -> torch.Tensor:
    """Rows scaled to sum 1 (rows of zeros stay zero), like PyG's NormalizeFeatures."""
    x = x - x.min().clamp_max(0)  # PyG's transform also shifts negatives
    return x / x.sum(-1, keepdim=True).clamp_min(1e-12)


def load_dataset(
    name: str, root: str = "data", split: int = 0, normalize: bool = False, download: bool = True,
    split_mode: str = "given", per_class: int = 20, num_val: int = 500, num_test: int = 1000, **options
) -> tuple[Data, DatasetInfo]:
    """Load the data set ``name`` from ``root``.

    Returns ``(data, info)``: ``data`` a PyG :class:`Data` with ``x``
    (float), ``edge_index``, ``y`` (``(N,)`` long for multi-class,
    ``(N, T)`` float 0/1 for multi-label) and boolean ``train_mask``,
    ``val_mask``, ``test_mask`` of the chosen ``split``; ``info`` a
    :class:`DatasetInfo` (task, metric, sizes, ``info.score``).

    ``options`` go to the loader (only ``csbm`` and ``file`` take any;
    ``file``: :func:`~wavygraph.data.files.load_file_graph`). Missing OGB and
    PyG files are fetched by OGB's / PyG's own download code when
    ``download`` is true (see :mod:`wavygraph.data.download`). Raises
    :class:`UnknownDatasetError` for a name not in :data:`DATASETS` and
    :class:`DatasetNotFoundError` when the files are not under ``root`` and
    cannot be (or may not be) downloaded.

    ``split_mode="per_class"`` replaces the data set's split by a random one
    drawn from the seed ``split``: ``per_class`` training nodes of every
    class, ``num_val`` validation and ``num_test`` test nodes
    (:func:`~wavygraph.data.splits.per_class_split`, DIFFormer's protocol).
    """
    key = ALIASES.get(name.lower(), name.lower())
    if key not in DATASETS:
        raise UnknownDatasetError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)}")
    check_positive_int("split", split, WavygraphDataError, allow_zero=True)
    if split_mode not in SPLIT_MODES:
        raise WavygraphDataError(f"unknown split_mode {split_mode!r}; choose one of {', '.join(SPLIT_MODES)}")
    spec = DATASETS[key]
    if options and spec.source in DOWNLOADED:
        raise WavygraphDataError(f"{key} takes no options, got {', '.join(options)}")
    if spec.source in DOWNLOADED:
        options = {"download": bool(download)}
    drawn = split_mode == "per_class"
    data, info = spec.loader(root=root, split=0 if drawn else split, **options)
    if drawn:
        data.train_mask, data.val_mask, data.test_mask = per_class_split(data.y, split, per_class, num_val, num_test)
    check_data(data, info)
    if normalize:
        data.x = normalize_features(data.x)
    return data, info
