"""networkx graphs as training-ready PyG ``Data``.

    >>> import networkx as nx
    >>> from wavygraph.data import from_networkx
    >>> G = nx.karate_club_graph()
    >>> for v in G:
    ...     G.nodes[v]["x"] = [G.degree(v), 1.0]
    ...     G.nodes[v]["y"] = int(G.nodes[v]["club"] == "Officer")
    >>> data = from_networkx(G, split=0)   # x, edge_index, y, train/val/test masks

Nodes are numbered ``0..N-1`` in :func:`node_order`: by value when every
node id is an integer or the text of one (edge lists and GraphML give ids as
text: ``"2"`` comes before ``"10"``), else sorted as text. Isolated nodes
are kept. The node attributes read:

* ``x``: a number, a list / array / tensor of numbers, or a text of numbers
  separated by spaces or commas (GraphML stores no lists: ``"0.5 1 0"``);
* ``y``: an integer class ``0..C-1`` (or a number text such as ``"3"``);
* ``train_mask``, ``val_mask``, ``test_mask``: booleans (also ``0`` / ``1``,
  ``"true"`` / ``"false"``); a node without one is outside that part.

Edges and splits then follow :func:`~wavygraph.data.user_graph.graph_data`.
"""
from __future__ import annotations

import re
from typing import Any, Optional

import numpy as np
import torch
from torch_geometric.data import Data

from .errors import InvalidDataError
from .info import DatasetInfo
from .user_graph import MASKS, graph_data

_INT = re.compile(r"[+-]?\d+")


def _as_int(node: Any) -> Optional[int]:
    if isinstance(node, (int, np.integer)) and not isinstance(node, bool):
        return int(node)
    if isinstance(node, str) and _INT.fullmatch(node.strip()):
        return int(node)
    return None


def node_order(nodes) -> list:
    """``nodes`` in the order that numbers them ``0..N-1``: by integer value
    when every id is an integer or an integer's text, else by ``str(id)``
    (ties keep the given order)."""
    nodes = list(nodes)
    ints = [_as_int(v) for v in nodes]
    if all(i is not None for i in ints):
        keys = [(i, str(v)) for i, v in zip(ints, nodes)]
    else:
        keys = [(0, str(v)) for v in nodes]
    return [nodes[k] for k in sorted(range(len(nodes)), key=keys.__getitem__)]


def _numbers(value: Any, node: Any, key: str, name: str) -> list[float]:
    if isinstance(value, str):
        parts = value.replace(",", " ").split()
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    elif hasattr(value, "tolist"):  # NumPy arrays and scalars, tensors
        parts = np.asarray(value.tolist() if isinstance(value, torch.Tensor) else value).reshape(-1).tolist()
    else:
        parts = [value]
    try:
        return [float(p) for p in parts]
    except (TypeError, ValueError):
        raise InvalidDataError(f"{name}: node {node!r} has the non-numeric attribute {key}={value!r}; "
                               f"{key} must be numbers (a text of numbers separated by spaces in GraphML)") from None


def _column(graph, nodes: list, key: str, name: str) -> Optional[list]:
    """The attribute ``key`` of every node, or ``None`` when no node has it."""
    values = [graph.nodes[v].get(key) for v in nodes]
    missing = [v for v, value in zip(nodes, values) if value is None]
    if len(missing) == len(nodes):
        return None
    if missing and key not in MASKS:
        raise InvalidDataError(f"{name}: node {missing[0]!r} has no attribute {key} ({len(missing)} of {len(nodes)} "
                               f"nodes lack it); give it to every node")
    return values


def _matrix(graph, nodes: list, key: str, name: str) -> Optional[torch.Tensor]:
    values = _column(graph, nodes, key, name)
    if values is None:
        return None
    rows = [_numbers(value, v, key, name) for v, value in zip(nodes, values)]
    width = len(rows[0])
    for v, row in zip(nodes, rows):
        if len(row) != width:
            raise InvalidDataError(f"{name}: node {nodes[0]!r} has {width} numbers in {key}, node {v!r} {len(row)}; "
                                   f"give every node the same number")
    t = torch.tensor(rows, dtype=torch.float64)
    return t.view(-1) if key == "y" and width == 1 else t


def _flag(value: Any, node: Any, key: str, name: str) -> bool:
    if value is None:
        return False
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)) and value in (0, 1):
        return bool(value)
    raise InvalidDataError(f"{name}: node {node!r} has {key}={value!r}; a mask must be true/false (or 1/0)")


def _masks_from_attributes(graph, nodes: list, name: str) -> Optional[list]:
    """The nodes' ``train_mask`` / ``val_mask`` / ``test_mask`` attributes as
    boolean tensors (``None`` for one no node has), or ``None`` for none."""
    columns = [_column(graph, nodes, key, name) for key in MASKS]
    if all(c is None for c in columns):
        return None
    return [None if c is None else torch.tensor([_flag(value, v, key, name) for v, value in zip(nodes, c)])
            for key, c in zip(MASKS, columns)]


def networkx_graph_data(
    G, features=None, labels=None, split: int = 0, train_fraction: float = 0.6, val_fraction: float = 0.2,
    name: str = "graph",
) -> tuple[Data, DatasetInfo]:
    """:func:`from_networkx` with the :class:`DatasetInfo` as well: ``(data, info)``."""
    import networkx as nx
    from torch_geometric.utils import from_networkx as pyg_from_networkx

    nodes = node_order(G.nodes)
    if not nodes:
        raise InvalidDataError(f"{name}: the graph has no nodes")
    index = {v: i for i, v in enumerate(nodes)}
    plain = nx.Graph()  # nodes 0..N-1 in our order, no attributes: PyG builds both directions of each edge
    plain.add_nodes_from(range(len(nodes)))
    plain.add_edges_from((index[u], index[v]) for u, v in G.edges())
    edge_index = pyg_from_networkx(plain).edge_index
    x = features if features is not None else _matrix(G, nodes, "x", name)
    y = labels if labels is not None else _matrix(G, nodes, "y", name)
    return graph_data(x, edge_index, y, _masks_from_attributes(G, nodes, name), num_nodes=len(nodes), name=name, split=split,
                      train_fraction=train_fraction, val_fraction=val_fraction)


def from_networkx(
    G, features=None, labels=None, split: int = 0, train_fraction: float = 0.6, val_fraction: float = 0.2,
) -> Data:
    r"""A networkx graph as a :class:`~torch_geometric.data.Data` ready for
    training: ``x`` (float), ``edge_index`` (undirected, no self loops),
    ``y`` and boolean ``train_mask`` / ``val_mask`` / ``test_mask``.

    Args:
        G (networkx.Graph): any networkx graph (directed and multi-graphs
            are read as undirected simple graphs). Nodes are numbered in
            :func:`node_order`.
        features (array-like, optional): ``(N, F)`` features in the node
            order; replaces the node attribute ``x``.
        labels (array-like, optional): ``(N,)`` classes in the node order;
            replaces the node attribute ``y``.
        split (int): the seed of the split drawn when no node has a mask
            attribute (the column of ``(N, S)`` masks otherwise).
        train_fraction (float): share of the nodes drawn for training.
        val_fraction (float): share for validation; the test part is the rest.

    Raises :class:`~wavygraph.data.errors.InvalidDataError` (one line) for
    missing or non-numeric attributes, wrong shapes and classes too small
    for a stratified split.
    """
    return networkx_graph_data(G, features, labels, split, train_fraction, val_fraction)[0]
