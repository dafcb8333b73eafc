"""Checks of a node-prediction data set before training sees it.

:func:`check_data` raises :class:`~wavygraph.data.errors.InvalidDataError`
with a one-line message naming the field, so that a malformed graph fails at
load time instead of as an ``IndexError`` inside torch or NaN losses later.
Besides shapes and ranges it refuses splits that cannot give a meaningful
score (an empty train, validation or test part; a node in two parts) and
class labels that leave most classes empty (:data:`MAX_SPARSE_CLASSES`).
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from wavygraph.checks import is_int, out_of_range

from .errors import InvalidDataError
from .info import DatasetInfo

#: Multi-class labels ``0..C-1`` may leave classes without a node while
#: ``C <= max(2 * distinct labels, MAX_SPARSE_CLASSES)``; beyond that the
#: labels are ids rather than classes (one label 10**6 would build a
#: 1,000,001-way output layer) and :func:`check_data` refuses them.
MAX_SPARSE_CLASSES = 1000
_PARTS = ("train_mask", "val_mask", "test_mask")
_EMPTY = ("nothing to train on", "no validation score to select the model by", "no test score")


def check_node_range(edge_index: Tensor, n: int, field: str) -> None:
    """Every entry of the integer ``edge_index`` must be a node of ``[0, n)``;
    ``field`` (``"<name>: data.edge_index"``) starts the message."""
    outside = out_of_range(edge_index, n)
    if outside is not None:
        bad = outside[0] if outside[0] < 0 else outside[1]
        raise InvalidDataError(f"{field} holds node {bad}, outside [0, {n}) for {n} nodes")


def _checked_masks(data: Data, name: str, n: int) -> list[Tensor]:
    """``data``'s train, validation and test masks, each a boolean ``(n,)`` tensor."""
    masks = []
    for key in ("train_mask", "val_mask", "test_mask"):
        m = getattr(data, key, None)
        if not isinstance(m, Tensor) or m.dtype != torch.bool or tuple(m.shape) != (n,):
            shape = tuple(m.shape) if isinstance(m, Tensor) else type(m).__name__
            raise InvalidDataError(f"{name}: data.{key} must be a boolean ({n},) tensor, got {shape}")
        masks.append(m)
    for key, m, why in zip(_PARTS, masks, _EMPTY):
        if not bool(m.any()):
            raise InvalidDataError(f"{name}: data.{key} selects no node ({why}); every part of the split needs "
                                   "nodes (with data.split_mode=per_class: data.num_val and data.num_test > 0)")
    for i, j in ((0, 1), (0, 2), (1, 2)):
        both = int((masks[i] & masks[j]).sum())
        if both:
            raise InvalidDataError(f"{name}: {both} node(s) are in both data.{_PARTS[i]} and data.{_PARTS[j]}; "
                                   "the parts of a split must be disjoint, or the scores measure training nodes")
    return masks


def _check_class_count(y: Tensor, num_classes: int, name: str) -> None:
    """The labels ``y`` must use enough of the ``num_classes`` classes (see :data:`MAX_SPARSE_CLASSES`)."""
    distinct = int(torch.unique(y).numel())
    if num_classes > max(2 * distinct, MAX_SPARSE_CLASSES):
        raise InvalidDataError(
            f"{name}: {distinct} distinct labels but {num_classes} classes (labels must be 0..C-1; more than "
            f"{MAX_SPARSE_CLASSES} classes need at least half of them used); renumber the labels to "
            "0..K-1, e.g. numpy.unique(y, return_inverse=True)[1]")


def check_data(data: Data, info: DatasetInfo) -> None:
    """``data`` must match ``info``: ``x`` dense, finite ``(N, num_features)``
    with ``N >= 1``; ``edge_index`` integer ``(2, E)`` in ``[0, N)``; boolean
    masks ``(N,)``, none empty, no two sharing a node; multi-class ``y``
    integer ``(N,)`` in ``[0, num_outputs)`` on the nodes of the masks, with
    ``num_outputs <= max(2 * distinct labels, MAX_SPARSE_CLASSES)``;
    multi-label ``y`` ``(N, num_outputs)`` of 0/1 (NaN: unknown)."""
    name = info.name
    x = getattr(data, "x", None)
    if isinstance(x, Tensor) and x.layout != torch.strided:
        raise InvalidDataError(f"{name}: data.x is a sparse tensor ({x.layout}); give dense features "
                               "(x.to_dense()) or reduce them first (e.g. a truncated SVD)")
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != info.num_features:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise InvalidDataError(f"{name}: data.x must have shape (N, {info.num_features}), got {shape}")
    n = x.shape[0]
    if n == 0:
        raise InvalidDataError(f"{name}: the graph has no nodes; give a graph with labelled nodes")
    if data.num_nodes is not None and data.num_nodes != n:
        raise InvalidDataError(f"{name}: data.num_nodes={data.num_nodes} but data.x has {n} rows")
    if not x.dtype.is_floating_point:
        raise InvalidDataError(f"{name}: data.x must be floating, got dtype {x.dtype}")
    if x.numel() and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise InvalidDataError(f"{name}: data.x holds {bad} NaN/Inf entries; clean or impute the features first")
    ei = getattr(data, "edge_index", None)
    if not isinstance(ei, Tensor) or ei.dim() != 2 or ei.shape[0] != 2:
        shape = tuple(ei.shape) if isinstance(ei, Tensor) else type(ei).__name__
        raise InvalidDataError(f"{name}: data.edge_index must have shape (2, E), got {shape}")
    if not is_int(ei):
        raise InvalidDataError(f"{name}: data.edge_index must hold integer node indices, got dtype {ei.dtype}")
    check_node_range(ei, n, f"{name}: data.edge_index")
    masks = _checked_masks(data, name, n)
    y = getattr(data, "y", None)
    if not isinstance(y, Tensor) or y.shape[:1] != (n,):
        shape = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
        raise InvalidDataError(f"{name}: data.y must have one row per node ({n}), got {shape}")
    used = masks[0] | masks[1] | masks[2]
    if info.task == "multiclass":
        if y.dim() != 1 and not (y.dim() == 2 and y.shape[1] == 1):
            raise InvalidDataError(
                f"{name}: multi-class labels must have shape ({n},), got {tuple(y.shape)}; "
                "multi-label targets need task='multilabel' (BCE loss)"
            )
        if not is_int(y):
            raise InvalidDataError(f"{name}: multi-class labels must be integers, got dtype {y.dtype}")
        outside = out_of_range(y.view(-1)[used], info.num_outputs)
        if outside is not None:
            raise InvalidDataError(
                f"{name}: labels must lie in [0, {info.num_outputs}) on the split's nodes, "
                f"got {outside[0]}..{outside[1]}"
            )
        _check_class_count(y.view(-1)[used], info.num_outputs, name)
    else:
        if y.dim() != 2 or y.shape[1] != info.num_outputs:
            raise InvalidDataError(f"{name}: multi-label targets must have shape ({n}, {info.num_outputs}), got {tuple(y.shape)}")
        yf = y[used].float()
        known = yf[~torch.isnan(yf)]
        if known.numel() and not bool(((known == 0) | (known == 1)).all()):
            raise InvalidDataError(f"{name}: multi-label targets must be 0 or 1 (NaN: unknown)")
