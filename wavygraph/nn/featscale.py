"""FeatScale: learnable re-weighting of the direct and high-frequency parts."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .prenorm import graph_mean


class FeatScale(nn.Module):
    r"""FeatScale of `"Anti-Oversmoothing in Deep Vision Transformers via
    the Fourier Domain Analysis" <https://arxiv.org/abs/2203.05962>`_
    (Wang et al., ICLR 2022), over the nodes of each graph.

    The signal is split into its direct (DC) part, the mean over the graph's
    nodes, and the high-frequency remainder, each re-weighted per channel:

    .. math::
        \bar{\mathbf{x}} = \frac{1}{N}\sum_i \mathbf{x}_i, \qquad
        \mathbf{x}'_i = \mathbf{w}_{dc} \odot \bar{\mathbf{x}}
        + \mathbf{w}_{hc} \odot (\mathbf{x}_i - \bar{\mathbf{x}})

    with :math:`\mathbf{w}_{dc}, \mathbf{w}_{hc}` starting at 1 (identity).
    Attention is a low-pass filter; a learnt :math:`\mathbf{w}_{hc} > 1`
    restores the high frequencies it removes.

    Args:
        channels (int): number of channels ``C``.

    Shapes:
        - **input:** x ``(N, C)``, batch ``(N,)`` (optional)
        - **output:** ``(N, C)``
    """

    def __init__(self, channels: int):
        super().__init__()
        self.channels = channels
        self.weight_dc = nn.Parameter(torch.empty(channels))
        self.weight_hc = nn.Parameter(torch.empty(channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight_dc)
        nn.init.ones_(self.weight_hc)

    def forward(self, x: Tensor, batch: Tensor | None = None) -> Tensor:
        dc = graph_mean(x, batch)  # (N, C), or (1, C) for one graph
        return self.weight_dc * dc + self.weight_hc * (x - dc)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels})"
