"""Statistics over each graph's nodes (:func:`graph_mean`,
:func:`graph_centre`) and the pre-norm of the ``leapfrog`` kind built on
them: a LayerNorm's learnable scale and shift on PairNorm's statistics
(one scale per graph)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import scatter


def graph_layer_norm(x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5,
                     batch: Tensor | None = None) -> Tensor:
    r"""The pre-norm of ``leapfrog`` under ``norm="layer"``: PairNorm's
    statistics (`Zhao and Akoglu, ICLR 2020 <https://arxiv.org/abs/1909.12223>`_),
    taken over each graph's nodes, with the LayerNorm's learnable scale and
    shift,

    .. math::
        N(X)_i = \gamma \odot \frac{x_i - \bar{x}}{\sqrt{\epsilon
            + \frac{1}{|G|}\sum_{j \in G} \|x_j - \bar{x}\|^2}} + \beta,
        \qquad \bar{x} = \frac{1}{|G|}\sum_{j \in G} x_j,

    :math:`G` node :math:`i`'s graph (``batch``). One scale per graph, so
    the force's stiffness is the same for every node (see
    :class:`~wavygraph.nn.steppers.leapfrog.LeapfrogStepper`); with :math:`\gamma = 1, \beta = 0` it is
    :class:`~wavygraph.nn.joint_norm.JointPairNorm`'s state map.

    Shapes:
        - **input:** x ``(N, C)``, weight and bias ``(C,)``, batch ``(N,)`` (optional)
        - **output:** ``(N, C)``
    """
    xc = graph_centre(x, batch)
    ms = graph_mean(xc.pow(2).sum(-1, keepdim=True), batch)
    return torch.addcmul(bias, xc * torch.rsqrt(ms + eps), weight)


def graph_mean(x: Tensor, batch: Tensor | None = None) -> Tensor:
    """The mean of ``x`` over the nodes of each graph (``batch``), one row
    per node ``(N, C)``, or ``(1, C)`` for one graph (``batch=None``): the
    per-graph statistic of the pre-norm, :class:`~wavygraph.nn.joint_norm.JointPairNorm`
    and :class:`~wavygraph.nn.featscale.FeatScale`."""
    if batch is None:
        return x.mean(0, keepdim=True)
    return scatter(x, batch, dim=0, reduce="mean").index_select(0, batch)


def graph_centre(x: Tensor, batch: Tensor | None = None) -> Tensor:
    """``x`` less the mean over the nodes of each graph (``batch``)."""
    return x - graph_mean(x, batch)
