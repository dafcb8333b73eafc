"""``light_wave_joint``: this package's own variant of Light Wave, whose
displacement passes through the joint LayerNorm like a velocity, with its
step and norm fused in one autograd function. Not the paper's Light Wave
(that is ``light_wave``, :class:`~wavygraph.nn.steppers.LightWaveStepper`)."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from ..joint_norm import JointLayerNorm, _velocity_backward, needs_plain_ops
from . import compiled
from .base import LearnableLamStepper, Norm, StepState


class _LightWaveJointLayerNormFn(torch.autograd.Function):
    """The light-wave step ``d = tau F + lam D; s = x + d`` followed by the
    joint LayerNorm of ``(s, d)`` in one function with a written-out
    backward: the displacement's gradient is formed once, in a reused
    buffer, instead of by autograd through four separate ops."""

    @staticmethod
    def forward(ctx, x, d_prev, force, lam, weight, bias, tau: float, eps: float):
        c = x.shape[-1]
        d = torch.mul(force, tau).addcmul_(d_prev, lam)  # tau F + lam D
        s = x + d
        x_out, mean, rstd = torch.native_layer_norm(s, (c,), weight, bias, eps)  # rstd (N, 1)
        v_out = (d * rstd).mul_(weight)
        ctx.tau, ctx.eps = tau, eps
        ctx.save_for_backward(s, d, d_prev, mean, rstd, lam, weight, bias)
        return x_out, v_out

    @staticmethod
    def backward(ctx, gx, gv):
        s, d, d_prev, mean, rstd, lam, weight, bias = ctx.saved_tensors
        c = s.shape[-1]
        need = ctx.needs_input_grad
        if gx is None:
            gx = torch.zeros_like(s)
        ds, dw, db = torch.ops.aten.native_layer_norm_backward(
            gx, s, (c,), mean, rstd, weight, bias, [True, need[4], need[5]]
        )
        gd = ds
        if gv is not None:  # v_out = w d rstd(s); s = x + d, so d gets both gradients
            dv, ds, dw = _velocity_backward(gv, d, s, mean, rstd, weight, ds, dw, True, True, need[4])
            gd = dv.add_(ds)  # total gradient of d, in dv's buffer
        g_force = gd * ctx.tau if need[2] else None
        g_lam = g_dprev = None
        if need[3] or need[1]:
            prod = gd * d_prev
            g_lam = prod.sum(0) if need[3] else None
            g_dprev = torch.mul(gd, lam, out=prod) if need[1] else None
        return ds, g_dprev, g_force, g_lam, dw, db, None, None


class JointLightWaveStepper(LearnableLamStepper):
    r"""This package's own variant of Light Wave (not the paper's): the
    momentum is carried as the displacement :math:`D = X - X_{prev}`, and
    :math:`D` passes through the joint LayerNorm, FFN and dropout like a
    velocity,

    .. math::
        D' = \lambda D + \tau F, \quad X' = X + D', \quad
        (X', D') \leftarrow \mathrm{JointLN}(X', D').

    Without a norm it is the same map as the paper's
    :class:`~wavygraph.nn.steppers.LightWaveStepper`.
    ``lam0`` defaults to :math:`\sigma(2) \approx 0.88`.

    Shapes:
        - **input:** state ``x, v (N, C)`` (``v`` the displacement), force ``(N, C)``
        - **output:** state ``x, v (N, C)``
    """

    second_order = True
    default_tau = 0.5
    default_lam0 = 1.0 / (1.0 + math.exp(-2.0))

    @staticmethod
    def update(x, d, force, tau, lam):
        d = torch.mul(force, tau).addcmul_(lam, d)  # tau F + lam D, one buffer
        return x + d, d

    def step_and_norm(self, state: StepState, force: Tensor, norm: Norm, impl: str = "eager") -> StepState:
        if isinstance(norm, JointLayerNorm) and impl == "eager" and not compiled.is_compiling():
            return StepState(*self._fused(state, force, norm))
        return super().step_and_norm(state, force, norm, impl)

    def _fused(self, state: StepState, force: Tensor, norm: JointLayerNorm) -> tuple[Tensor, Tensor]:
        """The step and the joint LayerNorm in one autograd function (equal
        to the composition, tested); the composition under autocast or
        mixed dtypes."""
        x, d_prev = state
        if needs_plain_ops(x, d_prev, force, norm.weight):
            return norm(*self(state, force))
        return _LightWaveJointLayerNormFn.apply(x, d_prev, force, self.lam_or_none(force.dtype), norm.weight,
                                                norm.bias, self.tau, norm.eps)
