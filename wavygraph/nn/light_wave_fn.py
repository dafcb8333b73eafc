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

import weakref

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

#: elements per block of rows in the backward (1 MiB of float32): the
#: temporaries stay in cache and come from the heap, not from fresh mappings
BLOCK = 2**18


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
    rows = max(1, BLOCK // max(1, s.shape[-1]))
    for start in range(0, s.shape[0], rows):
        block = slice(start, start + rows)
        torch.lerp(x[block], v[block], minus, out=s[block]).add_(force[block], alpha=tau)
    return s


class Receiver:
    """Where the next layer parks its ``X_prev`` gradient for this layer.

    Layer ``l``'s ``X_prev`` is layer ``l - 1``'s input ``x``, and layer
    ``l``'s backward always runs before layer ``l - 1``'s (its ``x`` depends
    on layer ``l - 1``'s output). So instead of returning the gradient of
    ``X_prev``, ``-lam_l g_l``, which autograd would add into that input's
    gradient in one more full pass, layer ``l`` parks ``(g_l, lam_l)`` here,
    and layer ``l - 1``'s backward adds ``-lam_l g_l`` block by block while it
    forms the gradient of its own ``x``. :func:`link` decides, at forward
    time, whether that ordering is guaranteed; where it is not, the gradient
    is returned as usual."""

    __slots__ = ("parked", "node", "__weakref__")

    def __init__(self):
        self.parked: list[tuple[Tensor, Tensor]] = []
        self.node = None  # weak reference to the owning function's autograd node

    def take(self) -> list[tuple[Tensor, Tensor]]:
        parked, self.parked = self.parked, []
        return parked


#: autograd nodes searched from a layer's ``x`` for the previous layer's node
SEARCH = 256
_ATTR = "_wavygraph_light_wave_receiver"


def link(x: Tensor, v: Tensor) -> Receiver | None:
    """The :class:`Receiver` of the function whose input ``x`` was ``v``,
    if that function's node is an ancestor of ``x`` in the live graph
    (searched over at most :data:`SEARCH` nodes), else :obj:`None`."""
    receiver = getattr(v, _ATTR, None)
    node = None if receiver is None or receiver.node is None else receiver.node()
    if node is None or x.grad_fn is None or not torch.is_grad_enabled():
        return None
    seen, todo = set(), [x.grad_fn]
    while todo and len(seen) < SEARCH:
        fn = todo.pop()
        if fn is node:
            return receiver
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        todo.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)
    return None


def register(x: Tensor, out: Tensor, receiver: Receiver) -> None:
    """Make ``receiver`` (the function's that returned ``out`` from input
    ``x``) findable by :func:`link` from ``x``."""
    if out.grad_fn is not None and x.requires_grad:
        receiver.node = weakref.ref(out.grad_fn)
        setattr(x, _ATTR, receiver)


def _split_gradient(g: Tensor, x: Tensor, v: Tensor, lam: Tensor, tau: float, need,
                    parked=(), keep_g: bool = False) -> tuple:
    """Gradients of ``(x, v, F, lam)`` from the gradient ``g`` of
    ``x + tau F + lam (x - v)``, block by block; the gradient of ``x``,
    ``g (1 + lam)`` plus ``-lam_k g_k`` of every parked ``(g_k, lam_k)``, is
    written into ``g`` itself, or into a new buffer with ``keep_g``. ``v is x``:
    diffusion's gradients (``g`` for ``x``, none for ``v``, zero for ``lam``)."""
    if v is x:
        gf = torch.mul(g, tau) if need[2] else None
        gx = g.clone() if keep_g and (need[0] or parked) else g
        for gk, lamk in parked:
            gx.addcmul_(gk, -lamk)
        return (gx if need[0] else None), None, gf, (torch.zeros_like(lam) if need[3] else None)
    gv = torch.empty_like(g) if need[1] else None
    gf = torch.empty_like(g) if need[2] else None
    gx = torch.empty_like(g) if keep_g and need[0] else g
    glam = torch.zeros_like(lam) if need[3] else None
    one_plus, minus = 1.0 + lam, -lam
    parked = [(gk, -lamk) for gk, lamk in parked]
    rows = max(1, BLOCK // max(1, g.shape[-1]))
    for start in range(0, g.shape[0], rows):
        block = slice(start, start + rows)
        gb = g[block]
        if glam is not None:
            glam += torch.sub(x[block], v[block]).mul_(gb).sum(0)
        if gf is not None:
            torch.mul(gb, tau, out=gf[block])
        if gv is not None:
            torch.mul(gb, minus, out=gv[block])
        if need[0]:
            out = torch.mul(gb, one_plus, out=gx[block])
            for gk, mk in parked:
                out.addcmul_(gk[block], mk)
    return (gx if need[0] else None), gv, gf, glam


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
    gradient buffer is reused for the gradient of ``x``. ``receiver``: this
    call's :class:`Receiver` (the next layer may park its ``X_prev`` gradient
    there); ``link``: the previous layer's, given by :func:`link`, where this
    call parks the gradient of ``v`` instead of returning it."""

    @staticmethod
    def forward(ctx, x, v, force, lam, weight, bias, tau: float, eps: float,
                receiver: Receiver | None = None, link: Receiver | None = None):
        s = _update_blocked(x, v, force, tau, lam)
        out, mean, rstd = torch.native_layer_norm(s, (s.shape[-1],), weight, bias, eps)
        ctx.tau, ctx.first = tau, v is x
        ctx.receiver, ctx.link = receiver, (None if v is x else link)
        ctx.save_for_backward(s, x, v, lam, mean, rstd, weight, bias)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        s, x, v, lam, mean, rstd, weight, bias = ctx.saved_tensors
        if ctx.first:  # saved tensors come back as new objects: restore the identity
            v = x
        need = list(ctx.needs_input_grad)
        gs, gw, gb = torch.ops.aten.native_layer_norm_backward(
            g, s, (s.shape[-1],), mean, rstd, weight, bias, [True, need[4], need[5]]
        )
        parked = ctx.receiver.take() if ctx.receiver is not None else []
        park = ctx.link is not None and need[1]
        if park:
            need[1] = False
        grads = _split_gradient(gs, x, v, lam, ctx.tau, need, parked, keep_g=park)
        if park:  # gs itself: the previous layer reads it in place of our v-gradient
            ctx.link.parked.append((gs, lam))
        grads = (*grads, gw, gb, None, None, None, None)
        return grads[:len(ctx.needs_input_grad)]
