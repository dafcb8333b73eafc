r"""``leapfrog``: the wave equation by leapfrog with the norm inside the
force (pre-norm), a step that can be undone exactly, so that
``WavyDIFFormer(..., reversible=True)`` trains it without storing any
layer's state (:mod:`wavygraph.nn.reversible`)."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor
from torch_geometric.utils import scatter

from .base import Norm, StepState
from .wave import WaveStepper


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
    :class:`LeapfrogStepper`); with :math:`\gamma = 1, \beta = 0` it is
    :class:`~wavygraph.nn.joint_norm.JointPairNorm`'s state map.

    Shapes:
        - **input:** x ``(N, C)``, weight and bias ``(C,)``, batch ``(N,)`` (optional)
        - **output:** ``(N, C)``
    """
    if batch is None:
        xc = x - x.mean(0, keepdim=True)
        ms = xc.pow(2).sum(-1).mean()
    else:
        xc = x - scatter(x, batch, dim=0, reduce="mean").index_select(0, batch)
        ms = scatter(xc.pow(2).sum(-1, keepdim=True), batch, dim=0, reduce="mean").index_select(0, batch)
    return torch.addcmul(bias, xc * torch.rsqrt(ms + eps), weight)


class LeapfrogStepper(WaveStepper):
    r"""The wave equation :math:`\ddot X = F(X)` by leapfrog (symplectic
    Euler in the velocity form) with the layer's norm :math:`N` inside the
    force (pre-norm, as RevGNN's blocks) and nothing after the step:

    .. math::
        Z &= N_\ell(X), \qquad
        F_\ell(X) = \alpha_\ell\,\big(A_\ell(Z)\,Z - Z\big)
            + w\,(X_0 - Z) + \mathrm{FFN}_\ell(N'_\ell(X)), \\
        Y' &= Y + \tau F_\ell(X), \qquad X' = X + \tau Y', \qquad Y_0 = 0,

    :math:`A_\ell(Z) Z` the layer's attention output (local branch, FeatScale
    and the force dropout included), :math:`\alpha_\ell` the force scale (1,
    or ReZero's), the source term only with ``source=True`` (:math:`w` the
    ``source_weight``) and the FFN term only with ``ffn=True``
    (:math:`N'_\ell` the FFN's own norm; GPT-J's parallel block). The
    source term is a spring toward the input embedding: with a fixed linear
    :math:`A` and no norm the layers oscillate around
    :math:`X^* = w\,((1 + w) I - A)^{-1} X_0`, APPNP's propagated features,
    the point that diffusion with the source term converges to.

    Every term of the force is a function of :math:`X` alone, so the step
    is an additive coupling of :math:`(X, Y)` and its inverse is exact up to
    float rounding, whatever :math:`F` is:

    .. math::
        X = X' - \tau Y', \qquad Y = Y' - \tau F_\ell(X).

    Class attributes the model reads:

    * ``pre_norm = True``: :class:`~wavygraph.nn.WavyDIFFormer` applies the
      layer's ``norms[l]`` (and ``ffn_norms[l]``) to :math:`X` inside the
      force and nothing after the step: no post-step norm, the FFN adds to
      the force, the per-layer dropout acts inside the force
      (``dropout_at="state"``: on :math:`Z` and the FFN's input, RevGNN's
      place; ``"force"``: on the attention output and the FFN's output), with
      masks drawn from a seed per forward pass so that a recomputation
      draws the same ones. A final norm precedes the output layer.
    * ``invertible = True``: :meth:`inverse` exists; the kinds with it are
      the ones ``reversible=True`` accepts.

    The update is :class:`~wavygraph.nn.steppers.WaveStepper`'s; only the
    force and the absent post-step norm differ from ``wave``.

    Shapes:
        - **input:** state ``x, v (N, C)``, force ``(N, C)``
        - **output:** state ``x, v (N, C)``
    """

    second_order = True
    pre_norm = True
    invertible = True

    @staticmethod
    def inverse(x: Tensor, v: Tensor, force_fn: Callable[[Tensor], Tensor], tau: float) -> tuple[Tensor, Tensor]:
        """The state before the step, ``(x, v)`` from ``(x', v')``:
        ``x = x' - tau v'``, ``v = v' - tau force_fn(x)``."""
        x_prev = torch.add(x, v, alpha=-tau)
        return x_prev, torch.add(v, force_fn(x_prev), alpha=-tau)

    def step_and_norm(self, state: StepState, force: Tensor, norm: Norm, impl: str = "eager") -> StepState:
        """The step alone: a pre-norm kind has no norm after the step (the
        model applies ``norm`` inside the force)."""
        return self(state, force)

