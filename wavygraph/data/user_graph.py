"""A user's graph (from a file or from networkx) made ready for training.

:func:`graph_data` takes the raw pieces (features, edges, labels, optional
masks) and returns the :class:`~torch_geometric.data.Data` that the training
loop expects, the way PyG's Planetoid loader prepares its graphs: the edges
made symmetric (every graph is undirected), self loops dropped (the model's
GCN branch adds its own) and duplicates merged, sorted by source then target.
Masks given are taken as they are (a ``(N, S)`` mask holds ``S`` splits,
column ``split`` is chosen); without masks a stratified split is drawn from
the seed ``split`` (:func:`~wavygraph.data.splits.stratified_split`).
Every problem raises :class:`~wavygraph.data.errors.InvalidDataError` with a
one-line message that starts with the graph's name.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from wavygraph.checks import is_int, out_of_range

from .errors import InvalidDataError
from .info import DatasetInfo
from .splits import select_split, stratified_split
from .validate import check_data, check_node_range

MASKS = ("train_mask", "val_mask", "test_mask")


def _tensor(value, what: str, name: str) -> Tensor:
    try:
        t = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise InvalidDataError(f"{name}: the node {what} must be numbers") from None
    if t.is_complex():
        raise InvalidDataError(f"{name}: the node {what} must be real numbers, got dtype {t.dtype}")
    if t.layout != torch.strided:
        raise InvalidDataError(f"{name}: the node {what} are a sparse tensor ({t.layout}); "
                               f"save them dense ({'x' if what == 'features' else 'y'}.to_dense())")
    return t


def _features(x, n: int, name: str) -> Tensor:
    if x is None:
        raise InvalidDataError(f"{name}: no node features; give every node an attribute x "
                               "or a features file (data.features=FILE: .npy, .csv or .pt)")
    x = _tensor(x, "features", name)
    x = x.view(-1, 1) if x.dim() == 1 else x
    if x.dim() != 2 or x.shape[0] != n:
        raise InvalidDataError(f"{name}: the features have shape {tuple(x.shape)} but the graph has {n} nodes; "
                               "give one row per node, in the node order (docs/own_graphs.md)")
    return x.float()


def _labels(y, n: int, name: str) -> Tensor:
    if y is None:
        raise InvalidDataError(f"{name}: no node labels; give every node an integer attribute y "
                               "or a labels file (data.labels=FILE: .npy, .csv or .pt)")
    y = _tensor(y, "labels", name)
    if y.dim() == 2 and y.shape[1] == 1:
        y = y.view(-1)
    if y.dim() not in (1, 2) or y.shape[0] != n:
        raise InvalidDataError(f"{name}: the labels have shape {tuple(y.shape)} but the graph has {n} nodes; "
                               "give one label per node, in the node order (docs/own_graphs.md)")
    if y.dim() == 2:  # multi-label targets: 0/1 (NaN: unknown), checked by check_data
        return y.float()
    if y.dtype.is_floating_point:
        if not bool(torch.isfinite(y).all()) or not bool((y == y.round()).all()):
            raise InvalidDataError(f"{name}: class labels must be integers 0..C-1, got non-integer values")
    negative = out_of_range(y)
    if negative is not None:
        raise InvalidDataError(f"{name}: class labels must be integers 0..C-1, got {negative[0]}")
    return y.long()


def _edges(edge_index, n: int, name: str) -> Tensor:
    """Node indices as given: floats, even whole ones, are refused rather than truncated."""
    try:
        ei = torch.as_tensor(edge_index if edge_index is not None else torch.empty(2, 0, dtype=torch.long))
    except (TypeError, ValueError, RuntimeError):
        raise InvalidDataError(f"{name}: edge_index must be a (2, E) tensor of node indices") from None
    if ei.dim() != 2 or ei.shape[0] != 2:
        raise InvalidDataError(f"{name}: edge_index must have shape (2, E), got {tuple(ei.shape)}")
    if ei.layout != torch.strided or not is_int(ei):
        what = f"dtype {ei.dtype}" if ei.layout == torch.strided else f"a sparse tensor ({ei.layout})"
        raise InvalidDataError(f"{name}: edge_index must hold integer node indices, got {what}; "
                               "save edge_index.long() (dense)")
    ei = ei.long()
    check_node_range(ei, n, f"{name}: edge_index")
    ei, _ = remove_self_loops(ei)
    return to_undirected(ei, num_nodes=n)


def _given_masks(masks: Sequence[Optional[Tensor]], n: int, split: int, name: str) -> tuple[list[Tensor], int]:
    """The chosen column of the given masks and how many splits they hold."""
    if any(m is None for m in masks):
        missing = [key for key, m in zip(MASKS, masks) if m is None]
        raise InvalidDataError(f"{name}: {', '.join(missing)} missing; give train_mask, val_mask and test_mask "
                               "together, or none of them for a stratified split")
    masks = [torch.as_tensor(m) for m in masks]
    if any(m.shape[0] != n or m.dim() not in (1, 2) for m in masks):
        shapes = ", ".join(str(tuple(m.shape)) for m in masks)
        raise InvalidDataError(f"{name}: the masks must have one entry per node ({n}), got {shapes}")
    for key, m in zip(MASKS, masks):  # m.bool() would make any nonzero value (0.5, 2, NaN) a member
        if m.dtype != torch.bool and not bool(((m == 0) | (m == 1)).all()):
            odd = m[(m != 0) & (m != 1)].flatten()[0].item()
            raise InvalidDataError(f"{name}: {key} holds {odd}; a mask holds True/False (or 1/0) per node: save "
                                   "a boolean tensor")
    count = masks[0].shape[1] if masks[0].dim() == 2 else 1

    def too_few(count: int) -> InvalidDataError:
        return InvalidDataError(f"{name}: the masks hold {count} split(s) (0..{count - 1}); got data.split={split}")

    if split >= count or any((m.shape[1] if m.dim() == 2 else 1) != count for m in masks):
        raise too_few(count)  # every mask holds the same splits, an (N,) mask one
    return [m.bool() for m in select_split(masks, split, too_few)], count


def graph_data(
    x, edge_index, y, masks: Optional[Sequence[Optional[Tensor]]] = None, *, num_nodes: int, name: str = "graph",
    split: int = 0, train_fraction: float = 0.6, val_fraction: float = 0.2,
) -> tuple[Data, DatasetInfo]:
    r"""The :class:`Data` and :class:`DatasetInfo` of a user's graph.

    Args:
        x: node features, ``(N, F)`` (or ``(N,)``: one feature).
        edge_index: ``(2, E)`` node indices in ``[0, N)``; made undirected,
            without self loops or duplicates.
        y: ``(N,)`` integer class labels ``0..C-1`` (or ``(N, T)`` 0/1
            multi-label targets, scored by ROC-AUC).
        masks: ``(train_mask, val_mask, test_mask)``, each ``(N,)`` or
            ``(N, S)``; ``None``: a split drawn from the seed ``split``.
        num_nodes (int): ``N``.
        name (str): the name in messages and in :attr:`DatasetInfo.name`.
        split (int): the column of ``(N, S)`` masks, else the seed of the split.
        train_fraction (float), val_fraction (float): the drawn split's shares.
    """
    x, y = _features(x, num_nodes, name), _labels(y, num_nodes, name)
    data = Data(x=x, edge_index=_edges(edge_index, num_nodes, name), y=y, num_nodes=num_nodes)
    if masks is not None and any(m is not None for m in masks):
        chosen, num_splits = _given_masks(masks, num_nodes, split, name)
    else:
        chosen, num_splits = stratified_split(y, split, train_fraction, val_fraction, stratify=y.dim() == 1), 0
    data.train_mask, data.val_mask, data.test_mask = chosen
    if y.dim() == 2:
        info = DatasetInfo(name, "multilabel", "rocauc", x.shape[1], y.shape[1], num_splits=num_splits)
    else:
        info = DatasetInfo(name, "multiclass", "acc", x.shape[1], int(y.max()) + 1 if y.numel() else 0,
                           num_splits=num_splits)
    check_data(data, info)
    return data, info
