r"""``leapfrog``: the wave equation by leapfrog with the norm inside the
force (pre-norm), a step that can be undone exactly, so that
``WavyDIFFormer(..., reversible=True)`` trains it without storing any
layer's state (:mod:`wavygraph.nn.reversible`)."""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .base import Norm, StepState
from .wave import WaveStepper


class LeapfrogStepper(WaveStepper):
    r"""The wave equation :math:`\ddot X = F(X)` by leapfrog (symplectic
    Euler in the velocity form) with the layer's norm :math:`N` inside the
    force (pre-norm, as RevGNN's blocks) and nothing after the step:

    .. math::
        Z &= N_\ell(X), \qquad
        G_\ell(X) = \alpha_\ell\,\big(A_\ell(Z)\,Z - Z\big)
            + w\,(X_0 - Z) + \mathrm{FFN}_\ell(N'_\ell(X)), \\
        F_\ell(X) &= G_\ell(X) - \overline{G_\ell(X)}, \qquad
        Y' = Y + \tau F_\ell(X), \qquad X' = X + \tau Y', \qquad Y_0 = 0,

    :math:`N_\ell` the layer's norm taken with the statistics of the graph,
    not of each node (``norm="layer"``: PairNorm's centring and scale with
    the LayerNorm's :math:`\gamma, \beta`,
    :func:`~wavygraph.nn.prenorm.graph_layer_norm`; ``"pair"``: PairNorm;
    ``"none"``: none), :math:`A_\ell(Z) Z` the layer's attention output (local
    branch, FeatScale and the force dropout included), :math:`\alpha_\ell` the force scale (1,
    or ReZero's), the source term only with ``source=True`` (:math:`w` the
    ``source_weight``) and the FFN term only with ``ffn=True``
    (:math:`N'_\ell` the FFN's own norm; GPT-J's parallel block). The
    source term is a spring toward the input embedding: with a fixed linear
    :math:`A` and no norm the layers oscillate around
    :math:`X^* = w\,((1 + w) I - A)^{-1} X_0`, APPNP's propagated features
    with teleport probability :math:`w / (1 + w)`. :math:`\overline{G}`
    is the force's mean over each graph's nodes
    (:func:`~wavygraph.nn.prenorm.graph_centre`).

    Why the force is centred: :math:`Z` does not see the graph's mean of
    :math:`X`, so nothing restores that mean, and any mean the force has
    (the shift :math:`\beta` against :math:`X_0`'s mean, the GCN branch's
    degree weights) would push the whole graph uniformly, its mean growing
    as :math:`L^2`, until the final per-node norm sees one common vector
    and every node the same output (64 layers on Cora at initialisation:
    the centred part 0.4 % of the state's norm, the model stuck at one
    class in two of three seeds). Centred, the graph's mean of :math:`Y`
    stays 0 and that of :math:`X` stays :math:`X_0`'s.

    Why the graph's statistics: a per-node LayerNorm gives node :math:`i`
    the stiffness :math:`\gamma / \sigma_i`, so where a node's spread
    :math:`\sigma_i` is small :math:`\tau^2 \gamma / \sigma_i` exceeds
    leapfrog's stability bound 4 and the node oscillates with growing
    amplitude; one scale per graph gives every node the same stiffness.

    Every term of the force is a function of :math:`X` alone, so the step
    is an additive coupling of :math:`(X, Y)` and its inverse is exact up to
    float rounding, whatever :math:`F` is:

    .. math::
        X = X' - \tau Y', \qquad Y = Y' - \tau F_\ell(X).

    Class attributes the model reads:

    * ``pre_norm = True``: the model builds its layers as
      :class:`~wavygraph.nn.layer.PreNormLayer`, which applies the layer's
      norm (and the FFN's) to :math:`X` inside the force and nothing after
      the step: no post-step norm, the FFN adds to the force, the per-layer
      dropout acts inside the force (``dropout_at="state"``: on :math:`Z`
      and the FFN's input, RevGNN's place; ``"force"``: on the attention
      output and the FFN's output), with masks drawn from a seed per
      forward pass so that a recomputation draws the same ones. A final
      norm precedes the output layer.
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
    default_tau = 0.5
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

