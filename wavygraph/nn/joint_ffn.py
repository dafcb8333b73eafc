r"""The position-wise FFN of a state and its velocity.

`"Wavy Transformer" <https://arxiv.org/abs/2508.12787>`_: since the velocity
``Y`` is the time derivative of the state ``X``, the FFN applied to ``X``
acts on ``Y`` as its derivative along ``Y`` (chain rule), so the pair stays
physically consistent.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ACTIVATIONS = ("gelu", "relu")


def _activation_and_derivative(name: str, h: Tensor) -> tuple[Tensor, Tensor]:
    if name == "gelu":
        cdf = 0.5 * (1.0 + torch.erf(h * (1.0 / math.sqrt(2.0))))
        pdf = torch.exp(-0.5 * h * h) * (1.0 / math.sqrt(2.0 * math.pi))
        return h * cdf, cdf + h * pdf  # exact GELU and its derivative
    return torch.relu(h), (h > 0).to(h.dtype)  # ReLU and its step


class JointFFN(nn.Module):
    r"""Position-wise FFN of the state and its derivative along the velocity.

    .. math::
        X' = \phi(X W_1 + b_1) W_2 + b_2, \qquad
        Y' = \big(\phi'(X W_1 + b_1) \odot (Y W_1)\big) W_2

    :math:`Y'` is the Jacobian-vector product of the FFN at :math:`X` along
    :math:`Y` (no biases), with the exact GELU derivative
    :math:`\Phi(h) + h\varphi(h)` or ReLU's step.

    Args:
        channels (int): input and output size ``C``.
        hidden_channels (int, optional): inner size; :obj:`None` is
            ``2 * channels``. (default: :obj:`None`)
        activation (str, optional): ``"gelu"`` or ``"relu"``.
            (default: ``"gelu"``)

    Shapes:
        - **input:** x ``(N, C)``, v ``(N, C)`` or :obj:`None`
        - **output:** ``(x', v')`` of the same shapes (the FFN output, not
          the residual sum)
    """

    def __init__(self, channels: int, hidden_channels: int | None = None, activation: str = "gelu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; choose one of {', '.join(map(repr, ACTIVATIONS))}")
        self.channels = channels
        self.hidden_channels = 2 * channels if hidden_channels is None else hidden_channels
        self.activation = activation
        self.lin1 = nn.Linear(channels, self.hidden_channels)
        self.lin2 = nn.Linear(self.hidden_channels, channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin1.reset_parameters()
        self.lin2.reset_parameters()

    def forward(self, x: Tensor, v: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        h = self.lin1(x)  # (N, hidden)
        if v is None:  # no derivative to carry: torch's fused activation, which keeps only h for backward
            act = F.gelu(h) if self.activation == "gelu" else torch.relu(h)
            return self.lin2(act), None
        act, dact = _activation_and_derivative(self.activation, h)
        x_out = self.lin2(act)
        v_out = F.linear(dact * F.linear(v, self.lin1.weight), self.lin2.weight)
        return x_out, v_out

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, hidden_channels={self.hidden_channels}, activation={self.activation!r})"
