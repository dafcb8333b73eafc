r"""One layer of :class:`~wavygraph.nn.WavyDIFFormer`: a :class:`Force`
module and a stepper.

The force module holds what computes the force from a state: the attention
layer with its local branch, FeatScale, the force dropout, the force scale
:math:`\alpha_\ell`, the source term and the FFN. The stepper integrates
the force (:mod:`wavygraph.nn.steppers`). Two layer classes put them
together, chosen from the stepper's ``pre_norm`` class attribute
(:func:`layer_class`):

* :class:`PostNormLayer` (every kind but ``leapfrog``): the force of the
  state, the step, then the norm (the source :math:`w X_0` added before
  it), the FFN sub-layer with its own norm, and the state's dropout;
* :class:`PreNormLayer` (``leapfrog``): the norms inside the force, which
  is then a function :meth:`PreNormLayer.field` of :math:`X` alone, the
  step after it and nothing else, so that :meth:`PreNormLayer.inverse`
  undoes the step.

A layer is called as ``layer(state, ctx)`` with a
:class:`~wavygraph.nn.steppers.StepState` and the :class:`LayerContext`
that every layer of a forward pass reads; the memory modes
(:mod:`~wavygraph.nn.sequential`, :mod:`~wavygraph.nn.checkpointing`,
:mod:`~wavygraph.nn.reversible`) use that call, ``layer.parameters()`` and,
for the reversible one, :meth:`PreNormLayer.inverse`.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Callable, NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .joint_norm import NORMS
from .prenorm import graph_centre, graph_layer_norm
from .steppers import Stepper, StepState

#: ``drop(t, site) -> t'``: a layer's dropout at one of its sites (0: the
#: force's input, 1: the attention output, 2: the FFN); ``t=None`` gives None.
Drop = Callable[[Optional[Tensor], int], Optional[Tensor]]


class LayerContext(NamedTuple):
    """What every layer of a forward pass reads besides the state: the
    propagation matrix, the batch vector, the source ``x0`` (or None) and
    the dropout seed of a :class:`PreNormLayer` (None: no dropout)."""

    adj: Optional[Tensor]
    batch: Optional[Tensor]
    x0: Optional[Tensor]
    seed: Optional[int] = None


def seeded_dropout(t: Tensor | None, p: float, seed: int | None, site: int) -> Tensor | None:
    """Dropout with rate ``p`` whose mask is drawn from a generator seeded
    with ``seed`` and ``site`` (one site per place a layer drops): the same
    ``(seed, site)`` gives the same mask, so a recomputation repeats it.
    ``seed=None`` (evaluation), ``p=0`` or ``t=None`` returns ``t``."""
    if t is None or seed is None or p == 0.0:
        return t
    gen = torch.Generator(device=t.device)
    gen.manual_seed((seed + 1_000_003 * site) % (2**63 - 1))
    keep = 1.0 - p
    mask = torch.empty_like(t).bernoulli_(keep, generator=gen)
    return t * mask.div_(keep)


def draw_seed() -> int:
    """A seed for :func:`seeded_dropout`, from torch's global generator (so
    that ``torch.manual_seed`` fixes a run's masks)."""
    return int(torch.randint(0, 2**62, (1,)).item())


def norm_fn(norm: nn.Module, batch: Tensor | None, x0: Tensor | None = None):
    """``norm`` as the ``(x, v) -> (x', v')`` callable a stepper takes
    (PairNorm gets the batch; a source ``x0`` is added to ``x`` before it)."""
    fn = partial(norm, batch=batch) if isinstance(norm, NORMS["pair"]) else norm
    if x0 is None:
        return fn
    return lambda x, v: fn(x + x0, v)


def pre_norm(norm: nn.Module, x: Tensor, batch: Tensor | None) -> Tensor:
    """A norm inside the force: ``norm="layer"`` pools the variance over each
    graph (:func:`~wavygraph.nn.prenorm.graph_layer_norm`), the others as after a step."""
    if isinstance(norm, NORMS["layer"]):
        return graph_layer_norm(x, norm.weight, norm.bias, norm.eps, batch)
    return norm_fn(norm, batch)(x, None)[0]


class Force(nn.Module):
    r"""The parts of layer ``index`` that make its force from a state: the
    attention layer ``conv`` (shared between layers with
    ``shared_attention=True``) and, where given, ``featscale``, the force
    scale ``alpha[index]`` (ReZero; one ``(L,)`` parameter shared by the
    layers), the FFN ``ffn`` with its norm ``ffn_norm``, GCNII's identity
    map ``identity`` (a weight of the layer's own on the attention output),
    and the rate and place of the layer's dropout.

    Args:
        conv (DIFFormerConv): the attention layer.
        index (int): the layer's depth ``0 .. L-1`` (its entry of ``alpha``
            and its seeded dropout sites ``3 * index + site``).
        featscale (nn.Module, optional): FeatScale of the attention output.
        alpha (nn.Parameter, optional): the ``(L,)`` force scales.
        ffn (JointFFN, optional): the FFN sub-layer.
        ffn_norm (nn.Module, optional): the FFN's norm.
        dropout (float): the layer's dropout rate.
        dropout_at (str): ``"state"`` or ``"force"``.
        source_weight (float): :math:`w`, the weight of the source term.
        identity_map (float, optional): GCNII's :math:`\lambda`: the
            attention output :math:`h` becomes
            :math:`(1 - \beta_\ell) h + \beta_\ell h W_\ell` with a weight
            :math:`W_\ell` of this layer's own and
            :math:`\beta_\ell = \ln(\lambda / (\ell + 1) + 1)`, which shrinks
            with depth (an identity map, `Chen et al., ICML 2020
            <https://arxiv.org/abs/2007.02133>`_); None: no weight.
        channels (int, optional): the hidden size, the weight's (with ``identity_map``).
    """

    def __init__(self, conv: nn.Module, index: int, featscale: nn.Module | None = None,
                 alpha: nn.Parameter | None = None, ffn: nn.Module | None = None, ffn_norm: nn.Module | None = None,
                 dropout: float = 0.0, dropout_at: str = "state", source_weight: float = 1.0,
                 identity_map: float | None = None, channels: int | None = None):
        super().__init__()
        self.conv, self.featscale, self.ffn, self.ffn_norm = conv, featscale, ffn, ffn_norm
        self.alpha = alpha
        self.index, self.dropout, self.dropout_at, self.source_weight = index, dropout, dropout_at, source_weight
        self.identity = None if identity_map is None else nn.Linear(channels, channels, bias=False)
        self.beta = None if identity_map is None else math.log(identity_map / (index + 1) + 1.0)

    def site(self, site: int) -> int:
        """The seeded dropout site of this layer's ``site`` (0, 1 or 2)."""
        return 3 * self.index + site

    def attention(self, z: Tensor, ctx: LayerContext, drop: Drop) -> Tensor:
        r""":math:`\alpha_\ell\,(\mathrm{drop}(\mathrm{FeatScale}(M_\ell(A(z)\,z))) - z)`,
        the dropout only with ``dropout_at="force"``; :math:`M_\ell` is the
        identity map where there is one, else the identity."""
        out = self.conv(z, ctx.adj, ctx.batch)  # A z, (N, C)
        if self.identity is not None:  # (1 - beta) h + beta h W
            out = torch.lerp(out, self.identity(out), self.beta)
        if self.featscale is not None:
            out = self.featscale(out, ctx.batch)
        if self.dropout_at == "force":
            out = drop(out, 1)
        force = out - z
        return force if self.alpha is None else self.alpha[self.index] * force

    def source(self, z: Tensor, x0: Tensor) -> Tensor:
        """The spring toward the input embedding, ``x0 - w z`` (``x0`` is ``w X_0``)."""
        return x0 - self.source_weight * z

    def ffn_branch(self, z: Tensor, v: Tensor | None, drop: Drop) -> tuple[Tensor, Tensor | None]:
        """The FFN of ``z`` (and its derivative along ``v``), each output with
        its own dropout mask under ``dropout_at="force"`` (the authors')."""
        fx, fv = self.ffn(z, v)
        if self.dropout_at == "force":
            fx, fv = drop(fx, 2), drop(fv, 2)
        return fx, fv


class PostNormLayer(nn.Module):
    """A layer whose norm follows the step: the attention force of the
    state, the step and the norm (:meth:`Stepper.step_and_norm`, the source
    added before the norm), the FFN sub-layer and the state's dropout.

    Args:
        force (Force): the force module.
        stepper (Stepper): the layer's stepper.
        norm (nn.Module): the norm after the step.
        step_impl (str): ``"eager"`` or ``"compile"``.
    """

    #: the layers' output needs no norm before the output layer
    final_norm = False

    def __init__(self, force: Force, stepper: Stepper, norm: nn.Module, step_impl: str = "eager"):
        super().__init__()
        self.force, self.stepper, self.norm, self.step_impl = force, stepper, norm, step_impl

    def wants_seed(self) -> bool:
        """Whether a forward pass needs a dropout seed (its dropout draws from torch's generator)."""
        return False

    def _drop(self, t: Tensor | None, site: int = 0) -> Tensor | None:
        return None if t is None else F.dropout(t, self.force.dropout, self.training)

    def forward(self, state: StepState, ctx: LayerContext) -> StepState:
        force = self.force.attention(state.x, ctx, self._drop)  # F = alpha (A x - x)
        state = self.stepper.step_and_norm(state, force, norm_fn(self.norm, ctx.batch, ctx.x0), self.step_impl)
        if self.force.ffn is not None:
            state = self._ffn(state, ctx)
        return self._state_dropout(state)

    def _ffn(self, state: StepState, ctx: LayerContext) -> StepState:
        """The FFN sub-layer: residual, then its norm; a velocity takes the
        FFN's derivative, any other extra state passes through."""
        derivative = self.stepper.v_is_derivative
        v = state.v if derivative else None
        fx, fv = self.force.ffn_branch(state.x, v, self._drop)
        x, v = norm_fn(self.force.ffn_norm, ctx.batch)(state.x + fx, None if v is None else v + fv)
        return StepState(x, v if derivative else state.v)

    def _state_dropout(self, state: StepState) -> StepState:
        p = self.force.dropout
        if not self.training or p == 0.0 or self.force.dropout_at != "state":
            return state
        if state.v is None or not self.stepper.v_is_derivative:
            return StepState(F.dropout(state.x, p, True), state.v)
        keep = 1.0 - p
        # the mask F.dropout draws (same random numbers), shared by x and its velocity
        mask = torch.empty_like(state.x).bernoulli_(keep).div_(keep)
        return StepState(state.x * mask, state.v * mask)


class PreNormLayer(nn.Module):
    r"""A layer whose norms act inside the force (a stepper with
    ``pre_norm = True``, :class:`~wavygraph.nn.steppers.leapfrog.LeapfrogStepper`):
    the force :meth:`field` is a function of :math:`X` alone and the layer
    is the step alone, which :meth:`inverse` undoes for an invertible
    stepper. The dropout inside the force uses masks seeded from
    ``ctx.seed`` (:func:`seeded_dropout`), so that a recomputation repeats them.

    Args:
        force (Force): the force module.
        stepper (Stepper): the layer's stepper.
        norm (nn.Module): the norm of the state inside the force.
        step_impl (str): unused (the step has no norm to fuse).
    """

    #: the layers' output is not normalised: the model puts a norm before its output layer
    final_norm = True

    def __init__(self, force: Force, stepper: Stepper, norm: nn.Module, step_impl: str = "eager"):
        super().__init__()
        self.force, self.stepper, self.norm = force, stepper, norm

    def wants_seed(self) -> bool:
        """Whether a forward pass needs a dropout seed (training with dropout)."""
        return self.training and self.force.dropout > 0.0

    def field(self, x: Tensor, ctx: LayerContext) -> Tensor:
        r"""The force :math:`F(X)`, centred over each graph's nodes (see
        :class:`~wavygraph.nn.steppers.leapfrog.LeapfrogStepper`)."""
        force = self.force
        drop = lambda t, site: seeded_dropout(t, force.dropout, ctx.seed, force.site(site))  # noqa: E731
        state_drop = force.dropout_at == "state"
        z = pre_norm(self.norm, x, ctx.batch)  # Z = N(X)
        zin = drop(z, 0) if state_drop else z
        f = force.attention(zin, ctx, drop)  # alpha (A(Z) Z - Z)
        if ctx.x0 is not None:  # a spring toward the input embedding: w (X_0 - Z)
            f = f + force.source(z, ctx.x0)
        if force.ffn is not None:
            zf = pre_norm(force.ffn_norm, x, ctx.batch)
            f = f + force.ffn_branch(drop(zf, 2) if state_drop else zf, None, drop)[0]
        return graph_centre(f, ctx.batch)  # no force on the graph's mean (nothing restores it)

    def step(self, state: StepState, force: Tensor) -> StepState:
        """The step ``(x', v')`` from ``(x, v)`` and a given force."""
        return self.stepper(state, force)

    def forward(self, state: StepState, ctx: LayerContext) -> StepState:
        return self.step(state, self.field(state.x, ctx))

    def inverse(self, state: StepState, ctx: LayerContext,
                field: Callable[[Tensor], Tensor] | None = None) -> StepState:
        """The input state rebuilt from the output ``state`` (an invertible
        stepper only); ``field(x)`` replaces :meth:`field` (the reversible
        pass records the force it evaluates)."""
        field = field if field is not None else partial(self.field, ctx=ctx)
        return StepState(*self.stepper.inverse(state.x, state.v, field, self.stepper.tau))


def layer_class(stepper_cls: type[Stepper]) -> type[nn.Module]:
    """The layer class of a kind: :class:`PreNormLayer` for a stepper with
    ``pre_norm = True``, else :class:`PostNormLayer`."""
    return PreNormLayer if stepper_cls.pre_norm else PostNormLayer
