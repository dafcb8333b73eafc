"""``diffusion``: explicit Euler for graph diffusion (DIFFormer's residual update)."""
from __future__ import annotations

import torch

from .base import Stepper


class DiffusionStepper(Stepper):
    r"""Explicit Euler for graph diffusion, :math:`X' = X + \tau F`: with
    ``tau = 0.5`` DIFFormer's ``0.5 conv(x) + 0.5 x``.

    Shapes:
        - **input:** state ``x (N, C)``, force ``(N, C)``
        - **output:** state ``x (N, C)``
    """

    default_tau = 1.0

    @staticmethod
    def update(x, v, force, tau, lam):
        return torch.add(x, force, alpha=tau), None
