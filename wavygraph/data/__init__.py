"""Data sets by name for node prediction, read from ``data.root``.

    >>> from wavygraph.data import load_dataset
    >>> data, info = load_dataset("cora", root="data")
    >>> info.task, info.metric, info.num_outputs
    ('multiclass', 'acc', 7)

:func:`load_dataset` returns ``(data, info)``: a PyG ``Data`` with ``x``,
``edge_index``, ``y`` and boolean ``train_mask`` / ``val_mask`` /
``test_mask`` of the chosen split, and a :class:`DatasetInfo` with the task
type (``"multiclass"`` or ``"multilabel"``), the metric (``"acc"`` or
``"rocauc"``) and ``info.score(y_true, logits)`` (OGB's own ``Evaluator`` for
``ogbn-*``).

Registered (:data:`DATASETS`): ``ogbn-arxiv``, ``ogbn-proteins``,
``ogbn-products`` (OGB's loader, official split); PyG's offline-capable sets
``cora``, ``citeseer``, ``pubmed`` (public split), ``actor`` (10 splits),
``cornell``, ``texas``, ``wisconsin``, ``chameleon``, ``squirrel``,
``roman-empire``, ``amazon-ratings``, ``minesweeper``, ``tolokers``,
``questions``, ``amazon-computers``, ``amazon-photo``, ``coauthor-cs``,
``coauthor-physics``, ``wikics``; Platonov et al.'s ``chameleon-filtered``
and ``squirrel-filtered`` (the authors' ``.npz``, 10 splits,
:mod:`wavygraph.data.platonov`); the synthetic ``csbm``; and ``file``, a
graph of your own (``.pt``, GraphML, GML or an edge list; ``load_dataset(
"file", path=...)``, :mod:`wavygraph.data.files`). :func:`from_networkx`
turns a networkx graph into a training-ready ``Data`` (``docs/own_graphs.md``).

Missing OGB / PyG files are fetched by OGB's / PyG's own download code
(``download=True``, the default; see :mod:`wavygraph.data.download`); with
``download=False`` or without a network they raise
:class:`DatasetNotFoundError`, whose one-line message names the URL and says
what to put where. The ``csbm`` presets ``arxiv`` and ``proteins`` are
generated stand-ins with the OGB sets' shapes (``docs/ogb.md``). Any number of
processes may load from one ``root`` at once: each data set is prepared and read
under one file lock per data set folder (:mod:`wavygraph.data.lock`).
"""
from .batching import induced_subgraph, node_chunks, random_partition
from .csbm import CSBM_PRESETS, load_csbm, make_csbm, make_multilabel_csbm
from .errors import DatasetNotFoundError, InvalidDataError, UnknownDatasetError, WavygraphDataError
from .files import load_file_graph
from .from_nx import from_networkx, node_order
from .info import DatasetInfo
from .ogb_format import write_ogb_node_dataset
from .ogbn import load_ogbn, ogb_safe_load
from .pyg import PYG_SOURCES, load_pyg
from .registry import DATASETS, DatasetSpec, load_dataset
from .splits import per_class_split, random_split, stratified_split
from .validate import check_data

__all__ = [
    "DATASETS",
    "DatasetSpec",
    "DatasetInfo",
    "load_dataset",
    "load_ogbn",
    "load_pyg",
    "load_csbm",
    "load_file_graph",
    "from_networkx",
    "node_order",
    "stratified_split",
    "per_class_split",
    "random_split",
    "make_csbm",
    "make_multilabel_csbm",
    "CSBM_PRESETS",
    "PYG_SOURCES",
    "ogb_safe_load",
    "write_ogb_node_dataset",
    "random_partition",
    "node_chunks",
    "induced_subgraph",
    "WavygraphDataError",
    "UnknownDatasetError",
    "DatasetNotFoundError",
    "InvalidDataError",
    "check_data",
]
