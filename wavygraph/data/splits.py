"""Node splits: every random train / validation / test split that wavygraph
draws, and the choice of one of a data set's own splits.

Each drawer returns boolean ``(train, val, test)`` node masks, as PyG's
:class:`~torch_geometric.transforms.RandomNodeSplit` sets them, and the same
seed gives the same masks. Each keeps its own source of randomness, so a
split drawn once is drawn again identically:

* :func:`random_split` (``csbm``, and PyG sets without masks: Amazon,
  Coauthor): a random permutation from a ``torch.Generator`` seeded by
  ``seed``, cut into ``train``, ``val`` and the rest.
* :func:`per_class_split` (``data.split_mode=per_class``): DIFFormer's (and
  GCN's) semi-supervised protocol for the Planetoid sets, ``per_class``
  labelled training nodes of every class, then ``num_val`` validation and
  ``num_test`` test nodes from the rest, drawn by ``RandomNodeSplit`` itself
  (``split="random"``) under torch's global generator seeded by ``seed``
  (and restored afterwards). DIFFormer's official ``main.py``
  (``--rand_split_class``) draws such splits but trains every run on the
  first of them; here each seed is its own split, so ``data.split=0..4`` are
  five different splits.
* :func:`stratified_split` (``data.name=file`` without masks): scikit-learn's
  ``train_test_split(stratify=y)`` twice with ``random_state=seed``, each
  class spread over the three parts in proportion.

:func:`select_split` takes column ``split`` of masks that hold several
splits (``(N, S)``: Actor, WebKB, WikiCS, a user's file).

    >>> masks = per_class_split(data.y, seed=0)        # 20 / class, 500, 1000
    >>> [int(m.sum()) for m in masks]                  # Cora: 7 classes
    [140, 500, 1000]
    >>> train, val, test = stratified_split(y, seed=0)   # 60 / 20 / 20 %
    >>> [int(m.sum()) for m in (train, val, test)]       # 100 nodes
    [60, 20, 20]
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import RandomNodeSplit

from wavygraph.checks import check_positive_int, out_of_range

from .errors import InvalidDataError, WavygraphDataError

#: ``data.split_mode``: the data set's own split(s), or drawn per class.
SPLIT_MODES = ("given", "per_class")


def select_split(masks: Sequence[Tensor], split: int, too_few: Callable[[int], Exception]) -> list[Tensor]:
    """Column ``split`` of every ``(N, S)`` mask (``S`` splits); an ``(N,)``
    mask is one split shared by all and is taken whole (WikiCS's test mask).
    Raises ``too_few(S)`` for the first mask without column ``split``."""
    for mask in masks:
        if mask.dim() == 2 and split >= mask.shape[1]:
            raise too_few(mask.shape[1])
    return [mask[:, split] if mask.dim() == 2 else mask for mask in masks]


def random_split(y: Tensor, seed: int, train: float = 0.6, val: float = 0.2) -> list[Tensor]:
    """Random ``train / val / rest`` node masks (shares of the ``N = y.shape[0]``
    nodes, rounded), from a ``torch.Generator`` seeded by ``seed``."""
    n = y.shape[0]
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_train, n_val = int(round(train * n)), int(round(val * n))
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    masks[0][perm[:n_train]] = True
    masks[1][perm[n_train : n_train + n_val]] = True
    masks[2][perm[n_train + n_val :]] = True
    return masks


def per_class_split(
    y: Tensor, seed: int, per_class: int = 20, num_val: int = 500, num_test: int = 1000
) -> tuple[Tensor, Tensor, Tensor]:
    """Boolean ``(train, val, test)`` masks: ``per_class`` nodes of each
    class for training, then ``num_val`` and ``num_test`` of the remaining
    nodes, drawn with PyG's :class:`~torch_geometric.transforms.RandomNodeSplit`
    (``split="random"``) from ``seed``; the global random state is left as
    it was. The same seed gives the same masks.

    Raises :class:`WavygraphDataError` for multi-label targets, a class with
    fewer than ``per_class + 1`` nodes, or fewer remaining nodes than
    ``num_val + num_test``.
    """
    if y.dim() != 1 and not (y.dim() == 2 and y.shape[1] == 1):
        raise WavygraphDataError("data.split_mode=per_class needs one class label per node (a multi-class "
                                 "data set); use data.split_mode=given")
    y = y.view(-1).long()
    for name, value in (("per_class", per_class), ("num_val", num_val), ("num_test", num_test)):
        check_positive_int(f"data.{name}", value, WavygraphDataError, allow_zero=name != "per_class")
    counts = torch.bincount(y)
    classes = counts.nonzero().view(-1)
    small = [int(c) for c in classes if counts[c] <= per_class]
    if small:
        raise WavygraphDataError(f"class {small[0]} has {int(counts[small[0]])} nodes, not more than "
                                 f"data.per_class={per_class}; lower data.per_class")
    rest = y.numel() - per_class * classes.numel()
    if rest < num_val + num_test:
        raise WavygraphDataError(f"{rest} nodes remain after {per_class} per class, fewer than data.num_val + "
                                 f"data.num_test = {num_val + num_test}; lower them")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        split = RandomNodeSplit("random", num_train_per_class=per_class, num_val=num_val, num_test=num_test)
        out = split(Data(y=y, num_nodes=y.numel()))
    return out.train_mask, out.val_mask, out.test_mask


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
    first = y.view(n, -1)[:, 0].long() if y.dim() == 1 or y.shape[1] == 1 else None
    stratify = stratify and first is not None
    negative = out_of_range(first) if stratify else None  # (min, max) when a label is < 0
    if negative is not None:
        raise InvalidDataError(f"labels must be integers >= 0 to split stratified, got {negative[0]}")
    labels = first.cpu().numpy() if first is not None else None
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
