r"""The fast path of DIFFormer-s: the q/k/v projection folded into the kernel.

The ``simple`` kernel with the global q/k norm is bilinear in the projected
features. With :math:`\hat{x} = [x, 1]` and :math:`q = \hat{x} \hat{W}_q^\top`
(k, v alike, biases in the last column of :math:`\hat{W}`), everything the
kernel needs from the N nodes of a graph is the augmented Gram matrix
:math:`\hat{G} = \sum_n \hat{x}_n \hat{x}_n^\top`:

.. math::
    \|Q\|_F^2 = \langle \hat{G}, \hat{W}_q^\top \hat{W}_q \rangle, \qquad
    \tilde{K}^\top V = \hat{W}_k \hat{G} \hat{W}_v^\top / \|K\|_F, \qquad
    \textstyle\sum_n \tilde{k}_n = \hat{W}_k \hat{s} / \|K\|_F

(:math:`\hat{s}` the last column of :math:`\hat{G}`). The numerators and
denominators of every head are then one ``(N, C) x (C, H Dv + H)`` product,
followed by the division and the head mean. q, k and v are never formed; the
work on N rows is the Gram matrix and that product. It equals
:func:`~wavygraph.nn.functional.all_pair_attention` on the projected q, k, v,
head-averaged (tested in float64).
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .buckets import Buckets

#: Rows per block of the output product on CPU, so each block is divided
#: while it is in cache; on accelerators a whole bucket is one block.
BLOCK_ROWS = 8192


#: Largest moduli of a graph's rows between ``1 / SAFE_RANGE`` and
#: ``SAFE_RANGE`` form its Gram matrix in float32 without rescaling (on CPU).
SAFE_RANGE = 2.0**40


def _block_rows(x: Tensor) -> int:
    return BLOCK_ROWS if x.device.type == "cpu" else max(x.shape[0], 1)


class _Gram(torch.autograd.Function):
    """Per-graph ``X_b^T X_b`` ``(B, C, C)`` and column sums ``(B, C)`` of the
    padded rows, one product per bucket; backward ``dX_b = X_b (dG_b + dG_b^T) + ds_b``."""

    @staticmethod
    def forward(ctx, xp: Tensor, lay: Buckets) -> tuple[Tensor, Tensor]:
        c = xp.shape[1]
        gram = xp.new_zeros((lay.num_graphs, c, c))
        colsum = xp.new_zeros((lay.num_graphs, c))
        for g0, g1, xk in lay.views(xp):
            if xk.shape[1] == 0:  # graph indices without nodes
                continue
            if g1 - g0 == 1:  # plain 2-D products: a batch-1 bmm can be slow on CPU
                torch.mm(xk[0].T, xk[0], out=gram[g0])
                torch.sum(xk[0], 0, out=colsum[g0])
            else:
                torch.bmm(xk.transpose(1, 2), xk, out=gram[g0:g1])
                torch.sum(xk, 1, out=colsum[g0:g1])
        ctx.lay = lay
        ctx.save_for_backward(xp)
        return gram, colsum

    @staticmethod
    @once_differentiable
    def backward(ctx, dgram: Tensor, dsum: Tensor):
        (xp,) = ctx.saved_tensors
        sym = dgram + dgram.transpose(1, 2)
        dxp = torch.empty_like(xp)
        for g0, g1, xk, dk in ctx.lay.views(xp, dxp):
            if xk.shape[1] == 0:
                continue
            if g1 - g0 == 1:
                torch.addmm(dsum[g0], xk[0], sym[g0], out=dk[0])
            else:
                torch.baddbmm(dsum[g0:g1].unsqueeze(1), xk, sym[g0:g1], out=dk)
        return dxp, None


def _affine(xb: Tensor, m: Tensor, c: Tensor, g0: int, g1: int, rows: int) -> Tensor:
    """``x_n M_b + c_b`` for the rows ``xb`` of slots ``g0..g1`` (``rows`` each)."""
    if g1 - g0 == 1:
        return torch.addmm(c[g0], xb, m[g0])
    out = torch.baddbmm(c[g0:g1].unsqueeze(1), xb.view(g1 - g0, rows, -1), m[g0:g1])
    return out.view(xb.shape[0], -1)


class _AffineRatioMean(torch.autograd.Function):
    """Head mean of ``num / max(den, floor)`` with ``[num, den] = x M_b + c_b``
    (columns: the ``H Dv`` numerators, then the ``H`` denominators), in row
    blocks (:meth:`Buckets.tiles`).

    Forward keeps only the ``(rows, H)`` denominators; backward recomputes
    each block's product (small, cache-resident) instead of saving the
    ``(rows, H Dv + H)`` one."""

    @staticmethod
    def forward(ctx, xp: Tensor, m: Tensor, c: Tensor, floor: Tensor, heads: int, lay: Buckets) -> Tensor:
        n_out = m.shape[-1] - heads
        dv = n_out // heads
        out = xp.new_empty((xp.shape[0], dv))
        den_all = xp.new_empty((xp.shape[0], heads))
        active = torch.empty((xp.shape[0], heads), dtype=torch.bool, device=xp.device)
        for g0, g1, r0, rows in lay.tiles(_block_rows(xp)):
            r = slice(r0, r0 + (g1 - g0) * rows)
            p = _affine(xp[r], m, c, g0, g1, rows)  # (b, H Dv + H)
            fl = floor[g0:g1].repeat_interleave(rows).unsqueeze(1) if g1 - g0 > 1 else floor[g0:g1].view(1, 1)
            den_raw = p[:, n_out:]
            torch.gt(den_raw, fl, out=active[r])
            den = torch.maximum(den_raw, fl, out=den_all[r])
            num = p[:, :n_out].view(-1, heads, dv)
            if heads == 1:
                torch.div(num.squeeze(1), den, out=out[r])
            else:
                torch.mean(num / den.unsqueeze(-1), 1, out=out[r])
        ctx.heads, ctx.lay = heads, lay
        ctx.save_for_backward(xp, m, c, den_all, active)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        x, m, c, den_all, active = ctx.saved_tensors
        heads = ctx.heads
        n_out = m.shape[-1] - heads
        dv = n_out // heads
        dx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        dm, dc = torch.zeros_like(m), torch.zeros_like(c)
        for g0, g1, r0, rows in ctx.lay.tiles(_block_rows(x)):
            r = slice(r0, r0 + (g1 - g0) * rows)
            xb, den = x[r], den_all[r]  # (b, C), (b, H)
            b = xb.shape[0]
            ratio = _affine(xb, m, c, g0, g1, rows)[:, :n_out].view(b, heads, dv) / den.unsqueeze(-1)
            scale = (1.0 / heads) / den  # (b, H)
            gb = g[r].unsqueeze(1)  # (b, 1, Dv)
            dp = xb.new_empty((b, n_out + heads))  # packed [dnum, dden]
            torch.mul(gb, scale.unsqueeze(-1), out=dp[:, :n_out].view(b, heads, dv))
            torch.mul(-(gb * ratio).sum(-1) * scale, active[r], out=dp[:, n_out:])
            if g1 - g0 == 1:
                if dx is not None:
                    torch.mm(dp, m[g0].T, out=dx[r])
                dm[g0].addmm_(xb.T, dp)
                dc[g0] += dp.sum(0)
            else:
                dpk, xk = dp.view(g1 - g0, rows, -1), xb.view(g1 - g0, rows, -1)
                if dx is not None:
                    torch.bmm(dpk, m[g0:g1].transpose(1, 2), out=dx[r].view(g1 - g0, rows, -1))
                dm[g0:g1].baddbmm_(xk.transpose(1, 2), dpk)
                dc[g0:g1] += dpk.sum(1)
        return dx, dm, dc, None, None, None


def _fold(
    gram: Tensor, colsum: Tensor, count: Tensor, w: Tensor, heads: int, dv: int, tiny: float
) -> tuple[Tensor, Tensor]:
    """The per-graph output matrix ``(B, C, H Dv + H)`` and offset ``(B, H Dv + H)``
    from the statistics ``G (B, C, C)``, ``s (B, C)``, ``N (B,)`` and the
    augmented weights ``w = [W, b]`` of q, k and v stacked ``(2 H D + H Dv, C + 1)``;
    ``tiny`` floors the q and k norms."""
    c_in = gram.shape[-1]
    hd = (w.shape[0] - heads * dv) // 2
    d = hd // heads
    wq, wk, wv = w[:hd], w[hd : 2 * hd], w[2 * hd :]
    s_hat = torch.cat([colsum, count.unsqueeze(-1)], dim=-1)  # (B, C+1)
    g_hat = torch.cat([torch.cat([gram, colsum.unsqueeze(-1)], dim=-1), s_hat.unsqueeze(-2)], dim=-2)  # (B, C+1, C+1)
    # ||Q||_F^2 = <G^, W^q^T W^q> over all heads, ||K||_F^2 alike
    qq = (g_hat * (wq.T @ wq)).sum((-2, -1))
    kk = (g_hat * (wk.T @ wk)).sum((-2, -1))
    # floored before the square root too: the root's gradient at 0 (an empty
    # graph, an all-zero q) is infinite, and times the clamp's 0 it is NaN
    low = max(tiny * tiny, torch.finfo(qq.dtype).tiny)
    nqk = qq.clamp_min(low).sqrt().clamp_min(tiny) * kk.clamp_min(low).sqrt().clamp_min(tiny)  # (B,)
    # Per head h, with A_h = W^q_h^T W^k_h and R_h = [G^ W^v_h^T, s^] (C+1, Dv+1):
    # [numerator, denominator] of x^ = x^ A_h R_h / nqk, plus R_h's last row
    # [sum v, N] on x^'s constant 1.
    a = wq.view(heads, d, c_in + 1).transpose(1, 2) @ wk.view(heads, d, c_in + 1)  # (H, C+1, C+1)
    t = (g_hat @ wv.T).unflatten(-1, (heads, dv))  # (B, C+1, H, Dv)
    r = torch.cat([t, s_hat[:, :, None, None].expand(t.shape[:-1] + (1,))], dim=-1).movedim(-2, -3)  # (B, H, C+1, Dv+1)
    pm = (a @ r) / nqk.view(-1, 1, 1, 1)
    pm = torch.cat([pm[..., :c_in, :], pm[..., c_in:, :] + r[..., c_in:, :]], dim=-2)
    # packed columns: [numerators of all heads (H Dv), denominators (H)]
    pm = torch.cat([pm[..., :dv].movedim(-3, -2).flatten(-2), pm[..., dv].transpose(-1, -2)], dim=-1)
    return pm[:, :c_in], pm[:, c_in]


def folded_simple_attention(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    heads: int = 1,
    batch: Tensor | None = None,
    value_proj: bool = True,
) -> Tensor:
    r"""Head-averaged DIFFormer-s attention (global q/k norm) of the
    projections of ``x``, with the projection folded into the kernel.

    Equals ``all_pair_attention(q, k, v, batch).mean(1)`` with
    ``[q, k, v] = x W^T + b`` split into heads (``v = x`` for every head when
    ``value_proj`` is :obj:`False`).

    Args:
        x (torch.Tensor): node features ``(N, C)``, ``N >= 1``.
        weight (torch.Tensor): stacked q, k (and v) projection
            ``(2 H D + H Dv, C)``, ``Dv = D`` (``(2 H D, C)`` without value
            projection).
        bias (torch.Tensor, optional): its bias. (default: :obj:`None`)
        heads (int, optional): number of heads ``H``. (default: :obj:`1`)
        batch (torch.Tensor, optional): graph index of every node ``(N,)``.
            (default: :obj:`None`, one graph)
        value_proj (bool, optional): whether ``weight`` holds a value
            projection. (default: :obj:`True`)

    Shapes:
        - **input:** x ``(N, C)``, batch ``(N,)``
        - **output:** ``(N, Dv)``, in at least float32 (also under autocast)
    """
    dtype = torch.promote_types(x.dtype, torch.float32)
    c_in = x.shape[1]
    with torch.autocast(device_type=x.device.type, enabled=False):
        x = x.to(dtype)
        lay = Buckets.whole(x.shape[0], x.device) if batch is None else Buckets(batch)
        up, exp = _rescaled(lay.pad(x), lay)  # x / s per graph, s = 2^exp (B,)
        gram, colsum = _Gram.apply(up, lay)  # (B, C, C), (B, C) of x / s
        # The small algebra runs in float64 (float32 on MPS, which has no
        # float64): it is O(C^2 H D) work, the norms and K~^T V combine Gram
        # entries that can cancel, and the Gram matrix of x itself (s^2 times
        # that of x / s) over- or underflows float32 where x's entries pass
        # ~1e19 or fall under ~1e-19.
        small = torch.float32 if x.device.type == "mps" else torch.float64
        s = torch.exp2(exp.to(small))  # (B,)
        b = weight.new_zeros(weight.shape[0]) if bias is None else bias
        w = torch.cat([weight, b.unsqueeze(1)], dim=1).to(small)  # (rows, C+1)
        if not value_proj:  # v = x: the identity on x^ = [x, 1] for every head
            w = torch.cat([w, torch.eye(c_in, c_in + 1, dtype=small, device=x.device).repeat(heads, 1)])
        dv = weight.shape[0] // (3 * heads) if value_proj else c_in
        counts = lay.counts.to(small)
        g_x = gram.to(small) * s.square().view(-1, 1, 1)  # the statistics of x itself
        m, c = _fold(g_x, colsum.to(small) * s.unsqueeze(-1), counts, w, heads, dv, torch.finfo(dtype).tiny)
        m = m * s.view(-1, 1, 1)  # x M == (x / s) (s M): the product runs on x / s
        floor = counts.to(dtype) * torch.finfo(dtype).eps  # weights 1 + q~.k~ >= 0: see all_pair_attention
        return lay.unpad(_AffineRatioMean.apply(up, m.to(dtype), c.to(dtype), floor, heads, lay))


def _rescaled(xp: Tensor, lay: Buckets) -> tuple[Tensor, Tensor]:
    """The padded rows divided by a power of two ``s = 2^exp`` per graph
    (slot order), about their largest modulus, so the Gram matrix of the
    quotient neither over- nor underflows; the exponents ``(B,)`` (integers)
    are constant for autograd (the result is exact for any ``s``). Division by a power of two
    is exact: results for inputs of ordinary size are unchanged. On CPU,
    where the check costs no device sync, rows whose moduli lie within
    :data:`SAFE_RANGE` are returned as they are (``s = 1``)."""
    bound = int(math.log2(torch.finfo(xp.dtype).max)) - 1  # 2^-bound .. 2^bound are normal numbers
    with torch.no_grad():
        if lay.dest is None:
            amax = xp.abs().amax().view(1)
        else:
            amax = torch.cat([xk.abs().amax((1, 2)) if xk.shape[1] else xk.new_ones(g1 - g0)
                              for g0, g1, xk in lay.views(xp)])  # (B,) slot order; empty graphs: 1
        if xp.device.type == "cpu" and bool(((amax >= 1 / SAFE_RANGE) & (amax <= SAFE_RANGE)).all()):
            return xp, torch.zeros_like(amax, dtype=torch.int32)  # the Gram matrix is safe: no copy
        amax = torch.where(torch.isfinite(amax) & (amax > 0), amax, torch.ones_like(amax))
        exp = torch.frexp(amax).exponent.clamp(-bound, bound)  # |x| / 2^exp < 1
        inv = torch.exp2(-exp.to(xp.dtype))  # (B,) exact powers of two
        if lay.dest is not None:
            inv = inv.repeat_interleave(lay.rows_per_slot, output_size=lay.num_rows)
    return xp * inv.unsqueeze(-1), exp

