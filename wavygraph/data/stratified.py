"""Stratified random train / validation / test splits drawn from a seed.

The split of a graph read from a file (``data.name=file``) that brings no
masks: ``train_fraction`` of the nodes for training, ``val_fraction`` for
validation and the rest for testing, each class spread over the three parts
in proportion (scikit-learn's ``train_test_split(stratify=y)``, twice: train
against the rest, then the rest into validation and test).

    >>> train, val, test = stratified_split(y, seed=0)   # 60 / 20 / 20 %
    >>> [int(m.sum()) for m in (train, val, test)]       # 100 nodes
    [60, 20, 20]
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .errors import InvalidDataError, WavygraphDataError


def check_fractions(train_fraction: float, val_fraction: float) -> None:
    """Both fractions in ``(0, 1)`` with a sum below 1 (the test part is the
    rest); raises :class:`WavygraphDataError` otherwise."""
    for key, value in (("train_fraction", train_fraction), ("val_fraction", val_fraction)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
            raise WavygraphDataError(f"data.{key}={value!r} must lie in (0, 1)")
    if train_fraction + val_fraction >= 1.0:
        raise WavygraphDataError(f"data.train_fraction + data.val_fraction = {train_fraction + val_fraction:g} "
                                 "must be below 1 (the test nodes are the rest)")


def _too_few(y: np.ndarray, fractions: tuple[float, float, float]) -> str:
    counts = np.bincount(y)
    small = int(np.argmin(np.where(counts > 0, counts, counts.max() + 1)))
    percent = "/".join(f"{100 * f:.3g}" for f in fractions)
    return (f"class {small} has {int(counts[small])} node(s), too few to split stratified into train/val/test "
            f"({percent} %); give every class more nodes, give train_mask/val_mask/test_mask, "
            "or change data.train_fraction / data.val_fraction")


def stratified_split(
    y: Tensor, seed: int = 0, train_fraction: float = 0.6, val_fraction: float = 0.2, stratify: bool = True
) -> tuple[Tensor, Tensor, Tensor]:
    """Boolean ``(train, val, test)`` node masks, disjoint and covering every
    node.

    Args:
        y (Tensor): the labels, ``(N,)`` integers (or ``(N, T)`` for
            multi-label targets, which are split with ``stratify=False``).
        seed (int): the ``random_state`` of both draws; the same seed gives
            the same masks, and torch's random state is not touched.
        train_fraction (float): share of the nodes for training.
        val_fraction (float): share for validation; the test part is the rest.
        stratify (bool): keep the class proportions in every part.

    Raises :class:`InvalidDataError` when a class has too few nodes to appear
    in every part, and :class:`WavygraphDataError` for bad fractions.
    """
    from sklearn.model_selection import train_test_split

    check_fractions(train_fraction, val_fraction)
    n = y.shape[0]
    labels = y.view(n, -1)[:, 0].long().cpu().numpy() if y.dim() == 1 or y.shape[1] == 1 else None
    stratify = stratify and labels is not None
    if stratify and labels.size and labels.min() < 0:
        raise InvalidDataError(f"labels must be integers >= 0 to split stratified, got {int(labels.min())}")
    nodes = np.arange(n)
    fractions = (train_fraction, val_fraction, 1.0 - train_fraction - val_fraction)
    n_train, n_val = round(train_fraction * n), round(val_fraction * n)  # sizes as integers: no float rounding
    try:
        if min(n_train, n_val, n - n_train - n_val) < 1:
            raise ValueError("a part would be empty")
        train, rest = train_test_split(nodes, train_size=n_train, random_state=seed,
                                       stratify=labels if stratify else None)
        val, test = train_test_split(rest, train_size=n_val, random_state=seed,
                                     stratify=labels[rest] if stratify else None)
    except ValueError as exc:
        if stratify:
            raise InvalidDataError(_too_few(labels, fractions)) from None
        raise InvalidDataError(f"cannot split {n} nodes into train/val/test ({exc}); give more nodes or "
                               "change data.train_fraction / data.val_fraction") from None
    masks = []
    for part in (train, val, test):
        mask = torch.zeros(n, dtype=torch.bool)
        mask[torch.from_numpy(np.sort(part))] = True
        masks.append(mask)
    return masks[0], masks[1], masks[2]
