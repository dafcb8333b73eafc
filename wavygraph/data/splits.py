"""Random node splits drawn from a seed.

``data.split_mode=per_class`` is DIFFormer's (and GCN's) semi-supervised
protocol for the Planetoid sets: ``per_class`` labelled training nodes of
every class, then ``num_val`` validation and ``num_test`` test nodes drawn
from the rest, all at random from the seed ``data.split``. DIFFormer's
official ``main.py`` (``--rand_split_class``) draws such splits but trains
every run on the first of them; here each seed is its own split, so
``data.split=0..4`` are five different splits.

    >>> masks = per_class_split(data.y, seed=0)        # 20 / class, 500, 1000
    >>> [int(m.sum()) for m in masks]                  # Cora: 7 classes
    [140, 500, 1000]
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import RandomNodeSplit

from .errors import WavygraphDataError

#: ``data.split_mode``: the data set's own split(s), or drawn per class.
SPLIT_MODES = ("given", "per_class")


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
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "per_class" else 0):
            raise WavygraphDataError(f"data.{name} must be a {'positive' if name == 'per_class' else 'non-negative'} "
                                     f"integer, got {value!r}")
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
