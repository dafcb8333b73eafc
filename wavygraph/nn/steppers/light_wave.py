r"""``light_wave``: the paper's Light Wave (Mix + Light), and its step (+ the
LayerNorm after it) as autograd functions with written-out backwards.

:meth:`LightWaveStepper.update` is the plain reference; :class:`LightWaveStep`
and :class:`LightWaveLayerNorm` are the fast path that the module runs. At
arxiv size an epoch is bound by memory traffic and by fresh (N, C) buffers
(each a new mapping the kernel must fault in), so these functions count both:
the forward writes one buffer, as diffusion's step does, and the backward
forms the gradients of ``x``, ``X_prev``, ``F`` and ``lam`` in one pass over
blocks of rows, the gradient of ``x`` in the LayerNorm's gradient buffer.
``x + lam (x - X_prev)`` is one ``lerp``, so ``x == X_prev`` (the first
layer) adds exactly nothing; where ``X_prev`` *is* ``x`` (the same tensor, as
``LightWaveStepper.init`` gives the first layer) the functions compute
diffusion's ``x + tau F`` and its gradients alone (``lam``'s gradient is then
exactly zero, as the formula's)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..joint_norm import JointLayerNorm, needs_plain_ops
from . import compiled
from .base import LearnableLamStepper, Norm, StepState

#: elements per block of rows in the backward (1 MiB of float32): the
#: temporaries stay in cache and come from the heap, not from fresh mappings
BLOCK = 2**18


def _row_blocks(t: Tensor):
    """Slices of ``t``'s rows, :data:`BLOCK` elements (at least one row) each."""
    rows = max(1, BLOCK // max(1, t.shape[-1]))
    return (slice(start, start + rows) for start in range(0, t.shape[0], rows))


def light_wave_update(x: Tensor, v: Tensor, force: Tensor, tau: float, lam: Tensor) -> Tensor:
    """``x + tau F + lam (x - v)``: ``lerp`` towards ``v`` by ``-lam``, then the force."""
    return torch.lerp(x, v, -lam).add_(force, alpha=tau)


def _update_blocked(x: Tensor, v: Tensor, force: Tensor, tau: float, lam: Tensor) -> Tensor:
    """:func:`light_wave_update` (the same operations, so the same values)
    block by block of rows: the ``lerp``'s result is still in cache when
    the force is added. ``v is x``: ``x + tau F``."""
    if v is x:
        return torch.add(x, force, alpha=tau)
    if x.dim() != 2 or v.shape != x.shape or force.shape != x.shape:
        return light_wave_update(x, v, force, tau, lam)
    s, minus = torch.empty_like(x), -lam
    for block in _row_blocks(s):
        torch.lerp(x[block], v[block], minus, out=s[block]).add_(force[block], alpha=tau)
    return s


def _split_gradient(g: Tensor, x: Tensor, v: Tensor, lam: Tensor, tau: float, need) -> tuple:
    """Gradients of ``(x, v, F, lam)`` from the gradient ``g`` of
    ``x + tau F + lam (x - v)``, block by block; ``g`` itself becomes the
    gradient of ``x``, ``g (1 + lam)``. ``v is x``: diffusion's gradients
    (``g`` for ``x``, none for ``v``, zero for ``lam``)."""
    if v is x:
        gf = torch.mul(g, tau) if need[2] else None
        return (g if need[0] else None), None, gf, (torch.zeros_like(lam) if need[3] else None)
    gv = torch.empty_like(g) if need[1] else None
    gf = torch.empty_like(g) if need[2] else None
    glam = torch.zeros_like(lam) if need[3] else None
    one_plus, minus = 1.0 + lam, -lam
    for block in _row_blocks(g):
        gb = g[block]
        if glam is not None:
            glam += torch.sub(x[block], v[block]).mul_(gb).sum(0)
        if gf is not None:
            torch.mul(gb, tau, out=gf[block])
        if gv is not None:
            torch.mul(gb, minus, out=gv[block])
        gb.mul_(one_plus)
    return (g if need[0] else None), gv, gf, glam


class LightWaveStep(torch.autograd.Function):
    """``x + tau F + lam (x - v)`` (any norm follows separately)."""

    @staticmethod
    def forward(ctx, x: Tensor, v: Tensor, force: Tensor, lam: Tensor, tau: float) -> Tensor:
        ctx.tau, ctx.first = tau, v is x
        ctx.save_for_backward(x, v, lam)
        return _update_blocked(x, v, force, tau, lam)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        x, v, lam = ctx.saved_tensors
        if ctx.first:
            v = x
        return (*_split_gradient(g.clone(), x, v, lam, ctx.tau, ctx.needs_input_grad), None)


class LightWaveLayerNorm(torch.autograd.Function):
    """``LN(x + tau F + lam (x - v))`` in one function: the LayerNorm's
    gradient buffer is reused for the gradient of ``x``."""

    @staticmethod
    def forward(ctx, x, v, force, lam, weight, bias, tau: float, eps: float):
        s = _update_blocked(x, v, force, tau, lam)
        out, mean, rstd = torch.native_layer_norm(s, (s.shape[-1],), weight, bias, eps)
        ctx.tau, ctx.first = tau, v is x
        ctx.save_for_backward(s, x, v, lam, mean, rstd, weight, bias)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        s, x, v, lam, mean, rstd, weight, bias = ctx.saved_tensors
        if ctx.first:  # saved tensors come back as new objects: restore the identity
            v = x
        need = ctx.needs_input_grad
        gs, gw, gb = torch.ops.aten.native_layer_norm_backward(
            g, s, (s.shape[-1],), mean, rstd, weight, bias, [True, need[4], need[5]]
        )
        return (*_split_gradient(gs, x, v, lam, ctx.tau, need), gw, gb, None, None)


class LightWaveStepper(LearnableLamStepper):
    r"""Light Wave (Mix + Light) as the paper writes it: diffusion plus a
    momentum term,

    .. math::
        X^{\ell+1} = \mathrm{LN}\big(X^\ell + \tau F^\ell
            + \lambda (X^\ell - X^{\ell-1})\big), \qquad X^{-1} = X^0,

    and nothing else: the extra state ``v`` is the previous layer's output
    :math:`X^{\ell-1}` (``init`` sets it to :math:`X^0`), which no norm,
    FFN or dropout touches. :math:`\lambda \to 0` is ``diffusion``;
    :math:`\lambda = 1` is the leapfrog wave step
    :math:`X' = 2X - X_{prev} + \tau F` (before the norm). ``lam0``
    defaults to 0.5, the authors' initialisation of their mixing weight
    (:math:`\sigma(0)`, BERT code); the paper states none for Light Wave.
    Adds ``C`` parameters and a few element-wise ops per layer.

    Shapes:
        - **input:** state ``x, v (N, C)`` (``v`` the previous state), force ``(N, C)``
        - **output:** state ``x, v (N, C)`` (``v`` the input ``x``)
    """

    second_order = True
    default_tau = 1.0
    v_is_derivative = False

    def init(self, x: Tensor) -> StepState:
        return StepState(x, x)

    @staticmethod
    def update(x, v, force, tau, lam):
        return light_wave_update(x, v, force, tau, lam), x

    def forward(self, state: StepState, force: Tensor) -> StepState:
        x, v = state
        lam = self.lam_or_none(force.dtype)
        if needs_plain_ops(x, v, force, lam):
            return StepState(*self.update(x, v, force, self.tau, lam))
        return StepState(LightWaveStep.apply(x, v, force, lam, self.tau), x)

    def step_and_norm(self, state: StepState, force: Tensor, norm: Norm, impl: str = "eager") -> StepState:
        """Eager with a :class:`~wavygraph.nn.joint_norm.JointLayerNorm`: the
        step and the norm in one autograd function (:class:`LightWaveLayerNorm`,
        equal to the composition, tested); otherwise the step, then ``norm``."""
        x, v = state
        if (not isinstance(norm, JointLayerNorm) or impl != "eager" or compiled.is_compiling()
                or needs_plain_ops(x, v, force, norm.weight)):
            return super().step_and_norm(state, force, norm, impl)
        lam = self.lam_or_none(force.dtype)
        return StepState(LightWaveLayerNorm.apply(x, v, force, lam, norm.weight, norm.bias, self.tau, norm.eps), x)
