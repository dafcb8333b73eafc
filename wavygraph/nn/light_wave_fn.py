"""The paper's Light Wave step as autograd functions with written-out
backwards (used by :class:`~wavygraph.nn.steppers.LightWaveStepper`).

At arxiv size an epoch is bound by memory traffic and by fresh (N, C)
buffers (each a new mapping the kernel must fault in), so these functions
count both: the forward writes one buffer, as diffusion's step does, and
the backward forms the gradients of ``x``, ``X_prev``, ``F`` and ``lam`` in
one pass over blocks of rows, the gradient of ``x`` in the LayerNorm's
gradient buffer. ``x + lam (x - X_prev)`` is one ``lerp``, so ``x == X_prev``
(the first layer) adds exactly nothing; where ``X_prev`` *is* ``x`` (the
same tensor, as ``LightWaveStepper.init`` gives the first layer) the
functions compute diffusion's ``x + tau F`` and its gradients alone
(``lam``'s gradient is then exactly zero, as the formula's)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

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
