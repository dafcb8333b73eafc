"""What a trainer needs to know about a loaded data set, and how to score it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from torch import Tensor

from .errors import WavygraphDataError

TASKS = ("multiclass", "multilabel")
METRICS = ("acc", "rocauc")


def accuracy(y_true: Tensor, logits: Tensor) -> float:
    """Fraction of nodes whose arg-max class equals the label (OGB's ``acc``)."""
    if y_true.numel() == 0:
        return float("nan")
    return (logits.argmax(-1) == y_true.view(-1)).float().mean().item()


def rocauc(y_true: Tensor, scores: Tensor) -> float:
    """OGB's ``rocauc``: ROC-AUC per task, averaged over the tasks that have
    both a positive and a negative label (labels may be ``nan``: ignored)."""
    from sklearn.metrics import roc_auc_score

    y = y_true.detach().cpu().double().numpy()
    s = scores.detach().cpu().double().numpy()
    if y.ndim == 1:
        y, s = y[:, None], s[:, None]
    values = []
    for t in range(y.shape[1]):
        keep = ~np.isnan(y[:, t])
        yt = y[keep, t]
        if (yt == 1).any() and (yt == 0).any():
            values.append(roc_auc_score(yt, s[keep, t]))
    if not values:
        return float("nan")
    return float(np.mean(values))


@dataclass
class DatasetInfo:
    """Description of a loaded node-prediction data set.

    Attributes:
        name: registry name.
        task: ``"multiclass"`` (``data.y`` is a ``(N,)`` long vector, loss:
            cross-entropy) or ``"multilabel"`` (``data.y`` is ``(N, T)`` with
            0/1 entries, loss: BCE with logits).
        metric: ``"acc"`` or ``"rocauc"``.
        num_features: input size.
        num_outputs: number of classes (multiclass) or tasks (multilabel).
        num_splits: how many splits ``data.split`` may choose from.
        ogb_name: the OGB name when the data set is scored with OGB's own
            :class:`ogb.nodeproppred.Evaluator`.
    """

    name: str
    task: str
    metric: str
    num_features: int
    num_outputs: int
    num_splits: int = 1
    ogb_name: Optional[str] = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.task not in TASKS:
            raise WavygraphDataError(f"unknown task {self.task!r}; choose one of {TASKS}")
        if self.metric not in METRICS:
            raise WavygraphDataError(f"unknown metric {self.metric!r}; choose one of {METRICS}")

    def score(self, y_true: Tensor, logits: Tensor) -> float:
        """The data set's metric of the model outputs ``logits`` (raw scores).

        OGB data sets use OGB's :class:`~ogb.nodeproppred.Evaluator`; the
        others the same definitions (accuracy of the arg-max; ROC-AUC
        averaged over tasks, of the positive class's score for two classes).
        """
        y_true, logits = y_true.detach().cpu(), logits.detach().cpu().float()
        if self.ogb_name is not None:
            from ogb.nodeproppred import Evaluator

            if self.metric == "acc":
                y_pred = logits.argmax(-1, keepdim=True)
                result = Evaluator(self.ogb_name).eval({"y_true": y_true.view(-1, 1), "y_pred": y_pred})
            else:
                result = Evaluator(self.ogb_name).eval({"y_true": y_true, "y_pred": logits})
            return float(result[self.metric])
        if self.metric == "acc":
            return accuracy(y_true, logits)
        if self.task == "multiclass":  # binary classes scored by ROC-AUC
            return rocauc(y_true.view(-1).float(), logits.softmax(-1)[:, -1])
        return rocauc(y_true.float(), logits)
