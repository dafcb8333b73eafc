"""``wave``: symplectic Euler for the wave equation (the paper's Full Wave)."""
from __future__ import annotations

import torch

from .base import Stepper


class WaveStepper(Stepper):
    r"""Symplectic Euler for the wave equation (the paper's Full Wave):
    :math:`Y' = Y + \tau F,\ X' = X + \tau Y'`, :math:`Y_0 = 0`. For a linear
    force :math:`F = -KX` the modified energy
    :math:`|Y|^2 + X^\top K X - \tau X^\top K Y` is conserved exactly.

    Shapes:
        - **input:** state ``x, v (N, C)``, force ``(N, C)``
        - **output:** state ``x, v (N, C)``
    """

    second_order = True
    default_tau = 0.5

    @staticmethod
    def update(x, v, force, tau, lam):
        v = torch.add(v, force, alpha=tau)
        return torch.add(x, v, alpha=tau), v
