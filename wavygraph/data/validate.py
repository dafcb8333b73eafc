"""Checks of a node-prediction data set before training sees it.

:func:`check_data` raises :class:`~wavygraph.data.errors.InvalidDataError`
with a one-line message naming the field, so that a malformed graph fails at
load time instead of as an ``IndexError`` inside torch or NaN losses later.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data

from wavygraph.checks import is_int, out_of_range

from .errors import InvalidDataError
from .info import DatasetInfo


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
    return masks


def check_data(data: Data, info: DatasetInfo) -> None:
    """``data`` must match ``info``: ``x`` finite ``(N, num_features)``;
    ``edge_index`` integer ``(2, E)`` in ``[0, N)``; boolean masks ``(N,)``;
    multi-class ``y`` integer ``(N,)`` in ``[0, num_outputs)`` on the nodes of
    the masks; multi-label ``y`` ``(N, num_outputs)`` of 0/1 (NaN: unknown)."""
    name = info.name
    x = getattr(data, "x", None)
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != info.num_features:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise InvalidDataError(f"{name}: data.x must have shape (N, {info.num_features}), got {shape}")
    n = x.shape[0]
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
    else:
        if y.dim() != 2 or y.shape[1] != info.num_outputs:
            raise InvalidDataError(f"{name}: multi-label targets must have shape ({n}, {info.num_outputs}), got {tuple(y.shape)}")
        yf = y[used].float()
        known = yf[~torch.isnan(yf)]
        if known.numel() and not bool(((known == 0) | (known == 1)).all()):
            raise InvalidDataError(f"{name}: multi-label targets must be 0 or 1 (NaN: unknown)")
