"""Graphs read from a file: ``data.name=file data.path=PATH``.

The format is the file's extension (:data:`GRAPH_FORMATS`):

* ``.pt``: a :class:`~torch_geometric.data.Data` saved with ``torch.save``
  (``x``, ``edge_index``, ``y``, optional masks), read with
  ``torch.load(weights_only=True)`` and PyG's ``Data`` classes allowed, so
  the file cannot run code;
* ``.graphml``, ``.gml``: read with networkx, node attributes ``x``, ``y``
  and the masks as in :mod:`wavygraph.data.from_nx` (GML nodes are named by
  their ``label``, or by their ``id`` when they have none);
* ``.edgelist``, ``.edges``, ``.txt``: one edge ``u v`` per line (more
  columns are ignored, ``#`` starts a comment); ids are text, nodes without
  edges cannot appear. Features and labels come from files.

``data.features`` / ``data.labels`` name ``.npy``, ``.csv`` or ``.pt``
files (:data:`ARRAY_FORMATS`) with one row per node in the node order
(:func:`~wavygraph.data.from_nx.node_order`; for ``.pt`` graphs, the node
index); they replace the graph's own ``x`` / ``y``. Paths are relative to
the working directory (``data.root`` is not used).
"""
from __future__ import annotations

import os
import warnings
from typing import Optional

import numpy as np
import torch
from torch_geometric.data import Data

from wavygraph.utils import one_line

from .errors import DatasetNotFoundError, InvalidDataError, WavygraphDataError
from .from_nx import networkx_graph_data
from .info import DatasetInfo
from .ogbn import ogb_safe_load
from .user_graph import MASKS, graph_data

#: extension -> format of ``data.path``
GRAPH_FORMATS = {".pt": "PyG Data", ".graphml": "GraphML", ".gml": "GML", ".edgelist": "edge list",
                 ".edges": "edge list", ".txt": "edge list"}
#: extensions of ``data.features`` and ``data.labels``
ARRAY_FORMATS = (".npy", ".csv", ".pt")


def check_file(path: Optional[str], key: str = "data.path", formats=tuple(GRAPH_FORMATS)) -> str:
    """The extension of ``path``, after checking that the file exists and its
    extension is one of ``formats``; raises :class:`DatasetNotFoundError` or
    :class:`WavygraphDataError` with a one-line message."""
    if not path:
        raise WavygraphDataError(f"data.name=file needs {key}=FILE ({', '.join(formats)})")
    path = str(path)
    if not os.path.isfile(path):
        where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()})"
        raise DatasetNotFoundError(f"{key}={path}: no such file{where}")
    ext = os.path.splitext(path)[1].lower()
    if ext not in formats:
        raise WavygraphDataError(f"{key}={path}: unknown extension {ext or '(none)'!r}; use one of {', '.join(formats)}")
    return ext


def _torch_load(path: str, what: str):
    try:
        with ogb_safe_load(), warnings.catch_warnings():
            # torch >= 2.14 warns while it checks a sparse tensor; a sparse x is refused in one line later
            warnings.filterwarnings("ignore", message="Validating sparse tensor invariants")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        why = one_line(exc, with_type=True)
        raise InvalidDataError(f"{path}: torch.load(weights_only=True) cannot read it ({why}); "
                               f"save {what} of plain tensors with torch.save") from None


def read_array(path: str, key: str) -> torch.Tensor:
    """The numbers in a ``.npy``, ``.csv`` (comma-separated, no header) or
    ``.pt`` file; ``key`` (``data.features``) names it in messages."""
    ext = check_file(path, key, ARRAY_FORMATS)
    if ext == ".pt":
        value = _torch_load(path, "a tensor")
    else:
        try:
            value = np.load(path, allow_pickle=False) if ext == ".npy" else np.loadtxt(path, delimiter=",", ndmin=1)
        except ValueError as exc:
            why = one_line(exc, with_type=True)
            raise InvalidDataError(f"{key}={path}: not a file of numbers ({why}); write numbers only, "
                                   "comma-separated, without a header") from None
    try:
        t = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
    except (TypeError, ValueError, RuntimeError):
        raise InvalidDataError(f"{key}={path}: holds a {type(value).__name__}, not numbers") from None
    if t.dtype == torch.bool or t.is_complex() or t.dim() == 0:
        raise InvalidDataError(f"{key}={path}: must hold a real-valued array with one row per node, got "
                               f"dtype {t.dtype}, shape {tuple(t.shape)}")
    return t


def _read_pt(path: str) -> tuple[Data, int]:
    obj = _torch_load(path, "a torch_geometric.data.Data")
    if not isinstance(obj, Data):
        raise InvalidDataError(f"{path}: holds a {type(obj).__name__}, not a torch_geometric.data.Data; "
                               "save the graph with torch.save(Data(x=..., edge_index=..., y=...), path)")
    if obj.x is None and "num_nodes" not in obj and isinstance(obj.y, torch.Tensor):
        n = obj.y.shape[0]
    else:
        with warnings.catch_warnings():  # PyG warns when it counts the nodes from edge_index
            warnings.simplefilter("ignore")
            n = obj.num_nodes
    if not n:
        raise InvalidDataError(f"{path}: the saved Data has no nodes (x, y and num_nodes give none); "
                               "a graph needs labelled nodes")
    return obj, int(n)


def _read_networkx(path: str, ext: str):
    import networkx as nx

    try:
        if ext == ".graphml":
            return nx.read_graphml(path)
        if ext == ".gml":
            try:
                return nx.read_gml(path)
            except nx.NetworkXError:  # nodes without (unique) labels: name them by id
                return nx.read_gml(path, label="id")
        return nx.read_edgelist(path, comments="#", nodetype=str, data=False)
    except Exception as exc:
        why = one_line(exc, with_type=True)
        raise InvalidDataError(f"{path}: cannot read it as {GRAPH_FORMATS[ext]} ({why})") from None


def load_file_graph(
    root: Optional[str] = None, split: int = 0, path: Optional[str] = None, features: Optional[str] = None,
    labels: Optional[str] = None, train_fraction: float = 0.6, val_fraction: float = 0.2,
) -> tuple[Data, DatasetInfo]:
    """The graph in ``path`` (see the module's docstring) with features and
    labels from ``features`` / ``labels`` files when given, and the masks it
    brings or a stratified split drawn from the seed ``split`` with the
    shares ``train_fraction`` / ``val_fraction``. ``root`` is not used.

    Returns ``(data, info)`` as :func:`~wavygraph.data.load_dataset`;
    ``info.name`` is the file's name. Raises :class:`DatasetNotFoundError`
    for a missing file and :class:`InvalidDataError` (or
    :class:`WavygraphDataError`) for an unreadable or malformed one.
    """
    ext = check_file(path)
    name = os.path.basename(str(path))
    x = read_array(features, "data.features") if features else None
    y = read_array(labels, "data.labels") if labels else None
    common = dict(split=split, train_fraction=train_fraction, val_fraction=val_fraction)
    if ext != ".pt":
        return networkx_graph_data(_read_networkx(str(path), ext), x, y, name=name, **common)
    obj, n = _read_pt(str(path))
    masks = [getattr(obj, key, None) for key in MASKS]
    return graph_data(obj.x if x is None else x, obj.edge_index, obj.y if y is None else y, masks,
                      num_nodes=n, name=name, **common)
