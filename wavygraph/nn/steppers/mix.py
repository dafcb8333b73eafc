"""``mix``: the mix of wave and diffusion (Mix + Full) as the Wavy Transformer
authors' BERT code computes it."""
from __future__ import annotations

import torch

from .base import LearnableLamStepper


class MixStepper(LearnableLamStepper):
    r"""Mix of wave and diffusion (Mix + Full), as the Wavy Transformer
    authors' BERT code computes it: the velocities are mixed, then the state
    steps with the mixed velocity,

    .. math::
        Y' = \lambda (Y + \tau F) + (1 - \lambda) F, \qquad X' = X + \tau Y',

    so :math:`X' - X = \tau Y'` at every layer. :math:`\lambda = \sigma(\theta)`
    per channel; ``lam0`` sets its initial value (default 0.5, the authors'
    :math:`\sigma(0)`). :math:`\lambda = 1` is ``wave``; :math:`\lambda = 0`
    is ``diffusion`` (:math:`X' = X + \tau F`).

    Shapes:
        - **input:** state ``x, v (N, C)``, force ``(N, C)``
        - **output:** state ``x, v (N, C)``
    """

    second_order = True
    default_tau = 1.0
    #: lam0 0.1 kept ``mix`` at GCN level at 4 layers where its own 0.5 did not (docs/benchmarks.md)
    default_options = {"lam0": 0.1}

    @staticmethod
    def update(x, v, force, tau, lam):
        dtype = torch.promote_types(v.dtype, force.dtype)  # mixed under autocast
        force = force.to(dtype)
        v = torch.lerp(force, torch.add(v.to(dtype), force, alpha=tau), lam.to(dtype))  # lam (v + tau F) + (1 - lam) F
        return torch.add(x, v, alpha=tau), v
