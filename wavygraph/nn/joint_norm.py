r"""Normalisations of a state and its velocity: LayerNorm, BatchNorm,
PairNorm, none.

`"Wavy Transformer" <https://arxiv.org/abs/2508.12787>`_: since the velocity
``Y`` is the time derivative of the state ``X``, a normalisation applied to
``X`` acts on ``Y`` as its derivative (chain rule), so the pair stays
physically consistent. :data:`NORMS` names them for
``WavyDIFFormer(norm=...)``.
"""
from __future__ import annotations

import contextlib
import threading

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .prenorm import graph_centre, graph_mean


class JointLayerNorm(nn.Module):
    r"""LayerNorm of the state and its velocity.

    .. math::
        X' = \gamma \frac{X - \mu(X)}{\sqrt{\sigma^2(X) + \epsilon}} + \beta,
        \qquad
        Y' = \gamma \frac{Y}{\sqrt{\sigma^2(X) + \epsilon}}

    The velocity is scaled with the state's statistics: no mean subtraction,
    no :math:`\beta` (as the official Wavy Transformer code does). With
    ``v=None`` this is an ordinary :class:`torch.nn.LayerNorm`.

    Args:
        channels (int): size ``C`` of the last dimension.
        eps (float, optional): added to the variance. (default: :obj:`1e-5`)

    Shapes:
        - **input:** x ``(N, C)``, v ``(N, C)`` or :obj:`None`
        - **output:** ``(x', v')`` of the same shapes
    """

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.channels = channels
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(channels))
        self.bias = nn.Parameter(torch.empty(channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, v: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        if v is None:
            return F.layer_norm(x, (self.channels,), self.weight, self.bias, self.eps), None
        if needs_plain_ops(x, v, self.weight):
            return joint_layer_norm(x, v, self.weight, self.bias, self.eps)
        return _JointLayerNormFn.apply(x, v, self.weight, self.bias, self.eps)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, eps={self.eps})"


def needs_plain_ops(*tensors: Tensor | None) -> bool:
    """Autocast is on, or the tensors (``None`` skipped) differ in dtype: the
    hand-written autograd functions here assume one dtype, so the plain ops
    (:func:`joint_layer_norm` and the stepper) run instead."""
    present = [t for t in tensors if t is not None]
    return torch.is_autocast_enabled(present[0].device.type) or len({t.dtype for t in present}) > 1


def _velocity_backward(gv: Tensor, v: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor,
                       dx: Tensor | None, dw: Tensor | None, need_v: bool, need_x: bool, need_w: bool):
    """Gradients through the joint LayerNorm's velocity ``v' = w v rstd(x)``:
    ``dv = gv w rstd`` (:obj:`None` unless ``need_v``), ``dx`` with the term
    through ``rstd`` added (in place when given) and ``dw`` with
    ``sum_n gv v rstd`` added."""
    gvr = gv * rstd  # (N, C)
    prod = gvr * v  # (N, C)
    dv = gvr.mul_(weight) if need_v else None  # reuses gvr's buffer
    if need_w:
        dw = prod.sum(0) if dw is None else dw + prod.sum(0)
    if need_x:
        # rstd = (var + eps)^(-1/2): d rstd / dx = -rstd^3 (x - mean) / C
        coef = (prod @ weight).unsqueeze(-1) * rstd.square() * (-1.0 / x.shape[-1])  # (N, 1)
        xm = torch.sub(x, mean, out=prod)  # x - mean in prod's buffer
        dx = dx.addcmul_(xm, coef) if dx is not None else xm.mul_(coef)
    return dv, dx, dw


def joint_layer_norm(x: Tensor, v: Tensor | None, weight: Tensor, bias: Tensor, eps: float):
    """:class:`JointLayerNorm` as plain tensor ops (autograd differentiates
    them, ``torch.compile`` traces them); used under autocast, for mixed
    dtypes and inside :mod:`wavygraph.nn.steppers.compiled`."""
    x_out = F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    if v is None:
        return x_out, None
    var = x.var(dim=-1, unbiased=False, keepdim=True)  # (N, 1)
    return x_out, weight * v * torch.rsqrt(var + eps)


class _JointLayerNormFn(torch.autograd.Function):
    """Fused :class:`JointLayerNorm`: the velocity reuses the ``1/sigma``
    that the state's LayerNorm computes (a separate ``var`` of ``X`` is a slow
    extra pass on CPU), and the backward is written out."""

    @staticmethod
    def forward(ctx, x: Tensor, v: Tensor, weight: Tensor, bias: Tensor, eps: float):
        c = x.shape[-1]
        x_out, mean, rstd = torch.native_layer_norm(x, (c,), weight, bias, eps)  # rstd (N, 1)
        v_out = (v * rstd).mul_(weight)
        ctx.save_for_backward(x, v, mean, rstd, weight, bias)
        return x_out, v_out

    @staticmethod
    def backward(ctx, gx: Tensor, gv: Tensor):
        x, v, mean, rstd, weight, bias = ctx.saved_tensors
        c = x.shape[-1]
        need = ctx.needs_input_grad
        dx, dw, db = torch.ops.aten.native_layer_norm_backward(
            gx, x, (c,), mean, rstd, weight, bias, [need[0], need[2], need[3]]
        )
        dv, dx, dw = _velocity_backward(gv, v, x, mean, rstd, weight, dx, dw, need[1], need[0], need[2])
        return dx, dv, dw, db, None


class JointPairNorm(nn.Module):
    r"""PairNorm (`Zhao and Akoglu, ICLR 2020 <https://arxiv.org/abs/1909.12223>`_)
    of the state, PyG's :class:`~torch_geometric.nn.norm.PairNorm` used as
    it is, with its velocity counterpart derived like
    :class:`JointLayerNorm`'s: the velocity is multiplied by the state's
    scale factor only.

    .. math::
        X' = s\,\frac{X - \bar{X}}{\sqrt{\epsilon + \frac{1}{N}\sum_i
        \|\mathbf{x}_i - \bar{\mathbf{x}}\|^2}}, \qquad
        Y' = s\,\frac{Y}{\sqrt{\epsilon + \frac{1}{N}\sum_i
        \|\mathbf{x}_i - \bar{\mathbf{x}}\|^2}}

    (the mean over each graph's nodes with ``batch``).

    Args:
        channels (int): size ``C`` of the last dimension (for the repr).
        scale (float, optional): :math:`s`. (default: :obj:`1.0`)
        eps (float, optional): as in PyG. (default: :obj:`1e-5`)

    Shapes:
        - **input:** x ``(N, C)``, v ``(N, C)`` or :obj:`None`, batch ``(N,)`` (optional)
        - **output:** ``(x', v')`` of the same shapes
    """

    def __init__(self, channels: int, scale: float = 1.0, eps: float = 1e-5):
        super().__init__()
        from torch_geometric.nn import PairNorm

        self.channels = channels
        self.norm = PairNorm(scale=scale, eps=eps)

    def reset_parameters(self) -> None:
        pass

    def forward(self, x: Tensor, v: Tensor | None = None, batch: Tensor | None = None):
        x_out = self.norm(x, batch)
        if v is None:
            return x_out, None
        ms = graph_mean(graph_centre(x, batch).pow(2).sum(-1, keepdim=True), batch)  # PairNorm's mean square
        return x_out, self.norm.scale * v / torch.sqrt(self.norm.eps + ms)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels}, scale={self.norm.scale})"


_FROZEN = threading.local()


@contextlib.contextmanager
def frozen_stats():
    """Inside it, :class:`JointBatchNorm` in training normalises with the
    batch's statistics but leaves its running statistics alone: the memory
    modes wrap their recomputation of a layer in it, so that a training step
    updates the running statistics once, as in the plain mode."""
    previous = getattr(_FROZEN, "on", False)
    _FROZEN.on = True
    try:
        yield
    finally:
        _FROZEN.on = previous


class JointBatchNorm(nn.Module):
    r"""BatchNorm over the nodes of the state (:class:`torch.nn.BatchNorm1d`,
    as PyG's :class:`~torch_geometric.nn.norm.BatchNorm`), with its velocity
    counterpart derived like :class:`JointLayerNorm`'s.

    .. math::
        X' = \gamma \frac{X - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta,
        \qquad
        Y' = \gamma \frac{Y}{\sqrt{\sigma^2 + \epsilon}}

    with :math:`\mu, \sigma^2` the per-channel mean and variance over the
    nodes in training (all graphs of a batch together) and the running ones
    in evaluation. Unlike a per-node LayerNorm it keeps the differences of
    scale between nodes (a count of neighbours carried in a feature's size),
    which the tuned classic GNNs of heterophilous benchmarks rely on.

    Args:
        channels (int): size ``C`` of the last dimension.
        eps (float, optional): added to the variance. (default: :obj:`1e-5`)
        momentum (float, optional): of the running statistics. (default: :obj:`0.1`)

    Shapes:
        - **input:** x ``(N, C)``, v ``(N, C)`` or :obj:`None`
        - **output:** ``(x', v')`` of the same shapes
    """

    def __init__(self, channels: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.channels = channels
        self.norm = nn.BatchNorm1d(channels, eps=eps, momentum=momentum)

    def reset_parameters(self) -> None:
        self.norm.reset_parameters()

    def forward(self, x: Tensor, v: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        bn = self.norm
        mean, var = bn.running_mean, bn.running_var
        if self.training and getattr(_FROZEN, "on", False):
            mean, var = mean.clone(), var.clone()  # the same ops (a recomputation saves what the forward did)
        elif self.training:
            bn.num_batches_tracked.add_(1)
        x_out = F.batch_norm(x, mean, var, bn.weight, bn.bias, self.training, bn.momentum, bn.eps)
        if v is None:
            return x_out, None
        if self.training:
            var = x.var(dim=0, unbiased=False)
        return x_out, v * bn.weight * torch.rsqrt(var + bn.eps)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels})"


class JointIdentity(nn.Module):
    """No normalisation (``norm="none"``): returns ``(x, v)`` unchanged."""

    def __init__(self, channels: int):
        super().__init__()
        self.channels = channels

    def forward(self, x: Tensor, v: Tensor | None = None, batch: Tensor | None = None):
        return x, v

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.channels})"


#: ``WavyDIFFormer(norm=...)``: name -> the joint normalisation after each step
NORMS = {"layer": JointLayerNorm, "batch": JointBatchNorm, "pair": JointPairNorm, "none": JointIdentity}
