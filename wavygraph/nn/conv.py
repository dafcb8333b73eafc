"""DIFFormer's attention layer: all-pair attention plus a local GCN branch."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .functional import KERNELS, QK_NORMS, Buckets, all_pair_attention
from .graph import gcn_adjacency, propagate
from .validate import check_choice, check_inputs


class _GramSum(torch.autograd.Function):
    """``(X^T X, sum_n x_n)`` with the one-product backward
    ``dX = X (dG + dG^T) + ds`` (autograd would run two products and adds)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(x)
        return x.T @ x, x.sum(0)

    @staticmethod
    @once_differentiable
    def backward(ctx, dgram: Tensor, dsum: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return torch.addmm(dsum.expand_as(x), x, dgram + dgram.T)


class _RatioMean(torch.autograd.Function):
    """Head mean of ``numerator / max(denominator, floor)`` from the packed
    ``(N, H Dv + H)`` product; backward writes the packed gradient at once
    instead of zero-filled slices per head."""

    @staticmethod
    def forward(ctx, p: Tensor, floor: Tensor, heads: int) -> Tensor:
        n_out = p.shape[1] - heads
        num = p[:, :n_out].view(p.shape[0], heads, -1)  # (N, H, Dv)
        den_raw = p[:, n_out:]  # (N, H)
        active = den_raw > floor
        den = torch.maximum(den_raw, floor)
        ratio = num / den.unsqueeze(-1)  # (N, H, Dv)
        out = ratio.squeeze(1) if heads == 1 else ratio.mean(1)
        ctx.heads = heads
        ctx.save_for_backward(ratio, den, active)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        ratio, den, active = ctx.saved_tensors
        heads = ctx.heads
        scale = (1.0 / heads) / den  # (N, H)
        dnum = g.unsqueeze(1) * scale.unsqueeze(-1)  # (N, H, Dv)
        dden = -(g.unsqueeze(1) * ratio).sum(-1) * scale * active  # (N, H)
        return torch.cat([dnum.flatten(1), dden], dim=1), None, None


#: Rows per block of :class:`_BlockedRatioMean` on CPU; on accelerators the
#: whole graph is one block (blocks there only add kernel launches).
BLOCK_ROWS = 8192


def _block_rows(x: Tensor) -> int:
    return BLOCK_ROWS if x.device.type == "cpu" else max(x.shape[0], 1)


class _BlockedRatioMean(torch.autograd.Function):
    """``_RatioMean(x m + c)`` for one graph, computed in row blocks.

    Forward keeps only the ``(N, H)`` denominators; backward recomputes each
    block's ``x m + c`` (a small product that stays in cache) instead of
    saving the ``(N, H Dv + H)`` product, so the per-row passes run on
    cache-resident blocks and the time per node no longer grows once the
    graph outgrows the cache."""

    @staticmethod
    def forward(ctx, x: Tensor, m: Tensor, c: Tensor, floor: Tensor, heads: int) -> Tensor:
        n = x.shape[0]
        n_out = m.shape[1] - heads
        dv = n_out // heads
        out = x.new_empty((n, dv))
        den_all = x.new_empty((n, heads))
        active = torch.empty((n, heads), dtype=torch.bool, device=x.device)
        rows = _block_rows(x)
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            p = torch.addmm(c, x[r0:r1], m)  # (b, H Dv + H)
            den_raw = p[:, n_out:]
            torch.gt(den_raw, floor, out=active[r0:r1])
            den = torch.maximum(den_raw, floor, out=den_all[r0:r1])
            num = p[:, :n_out].view(r1 - r0, heads, dv)
            if heads == 1:
                torch.div(num.squeeze(1), den, out=out[r0:r1])
            else:
                torch.mean(num / den.unsqueeze(-1), 1, out=out[r0:r1])
        ctx.heads = heads
        ctx.save_for_backward(x, m, c, den_all, active)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        x, m, c, den_all, active = ctx.saved_tensors
        heads = ctx.heads
        n = x.shape[0]
        n_out = m.shape[1] - heads
        dv = n_out // heads
        dx = torch.empty_like(x) if ctx.needs_input_grad[0] else None
        dm = torch.zeros_like(m)
        dc = torch.zeros_like(c)
        rows = _block_rows(x)
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            b = r1 - r0
            xb = x[r0:r1]
            den = den_all[r0:r1]  # (b, H)
            ratio = torch.addmm(c, xb, m)[:, :n_out].view(b, heads, dv) / den.unsqueeze(-1)  # (b, H, Dv)
            scale = (1.0 / heads) / den  # (b, H)
            gb = g[r0:r1].unsqueeze(1)  # (b, 1, Dv)
            dp = torch.empty((b, n_out + heads), dtype=x.dtype, device=x.device)
            torch.mul(gb, scale.unsqueeze(-1), out=dp[:, :n_out].view(b, heads, dv))
            dp[:, n_out:] = -(gb * ratio).sum(-1) * scale * active[r0:r1]
            if dx is not None:
                torch.mm(dp, m.T, out=dx[r0:r1])
            dm.addmm_(xb.T, dp)
            dc += dp.sum(0)
        return dx, dm, dc, None, None


def _folded_simple_attention(
    x: Tensor, weight: Tensor, bias: Tensor | None, heads: int, batch: Tensor | None
) -> Tensor:
    r"""DIFFormer-s with global q/k norm and the q/k/v projection folded in.

    The simple kernel is bilinear in the projected features, so with
    ``q = X W_q^T + b_q`` (and k, v alike) everything it needs from the N
    nodes is the Gram matrix ``X^T X`` and the column sum of ``X``:
    ``||q||_F^2``, ``K~^T V``, ``sum k~`` and ``sum v`` are small matrix
    products of those with the weights. The output is then one
    ``(N, C) x (C, H Dv + H)`` product (numerators and denominators of all
    heads) followed by a division: q, k and v are never formed, the work on
    N rows drops from about ten ``(N, d)`` passes to three products, and
    autograd keeps only ``X`` and the ``(N, H Dv + H)`` product.

    Returns the head-averaged attention output ``(N, Dv)`` (computed in at
    least float32, also under autocast).
    """
    dtype = torch.promote_types(x.dtype, torch.float32)
    with torch.autocast(device_type=x.device.type, enabled=False):
        x = x.to(dtype)
        w = weight.to(dtype).view(3, -1, x.shape[1])  # (3, H D, C)
        b = bias.to(dtype).view(3, -1) if bias is not None else x.new_zeros(3, w.shape[1])
        wq, wk, wv = w.unbind(0)  # (H D, C)
        bq, bk, bv = b.unbind(0)  # (H D,)
        hd = wq.shape[0]
        d = hd // heads
        seg = None
        # Per-graph statistics; for one graph no leading dimension, so the
        # small algebra below is plain 2-D products (a batch-1 ``bmm`` can be
        # very slow on a busy CPU).
        if batch is None:
            gram, colsum = _GramSum.apply(x)  # (C, C), (C,)
            count = x.new_full((), float(x.shape[0]))  # ()
        else:
            # graphs padded to bucket sizes (at most 1/8 more rows), per-graph
            # statistics in slot order (graphs sorted by padded size)
            seg = Buckets(batch)
            xp = seg.pad(x)  # (rows, C)
            gram, colsum = seg.gram(xp)  # (B, C, C), (B, C)
            count = seg.counts.to(dtype)  # (B,)
        # The small algebra runs in float64: it is O(C^2 H D) work, and the
        # norms and K~^T V combine Gram entries that can cancel.
        small = torch.float64 if x.device.type == "cpu" else dtype
        gram, colsum, count = gram.to(small), colsum.to(small), count.to(small)
        c_in = x.shape[1]
        # Biases folded in by a constant input 1: x^ = [x, 1], W^ = [W, b],
        # G^ = sum_n x^_n x^_n^T = [[G, s], [s^T, N]]; then q = W^q x^ etc.
        s_hat = torch.cat([colsum, count.unsqueeze(-1)], dim=-1)  # (..., C+1)
        g_hat = torch.cat([torch.cat([gram, colsum.unsqueeze(-1)], dim=-1), s_hat.unsqueeze(-2)], dim=-2)
        wq, wk, wv = (torch.cat([w_.to(small), b_.to(small).unsqueeze(1)], dim=1) for w_, b_ in ((wq, bq), (wk, bk), (wv, bv)))  # (H D, C+1)
        tiny = torch.finfo(dtype).tiny
        # ||q||_F^2 = sum_n |W^q x^_n|^2 = <G^, W^q^T W^q>, over all heads
        qq = (g_hat * (wq.T @ wq)).sum((-2, -1))
        kk = (g_hat * (wk.T @ wk)).sum((-2, -1))
        nqk = (qq.clamp_min(0).sqrt().clamp_min(tiny) * kk.clamp_min(0).sqrt().clamp_min(tiny))  # (...)
        # Per head h, with A_h = W^q_h^T W^k_h (C+1, C+1):
        #   numerator   x^ -> q~ (K~^T V) + sum v = x^ A_h G^ W^v_h^T / nqk + [x^ = e_last] sum v
        #   denominator x^ -> q~ . sum k~ + N   = x^ A_h s^ / nqk          + [x^ = e_last] N
        # i.e. one (C+1, Dv+1) matrix A_h R_h / nqk per head, R_h = [G^ W^v_h^T, s^],
        # whose last row (x^'s constant 1) also gets R_h's last row [sum v, N].
        a = wq.view(heads, d, c_in + 1).transpose(1, 2) @ wk.view(heads, d, c_in + 1)  # (H, C+1, C+1)
        t = (g_hat @ wv.T).unflatten(-1, (heads, d))  # (..., C+1, H, Dv)
        r = torch.cat([t, s_hat.unsqueeze(-1).unsqueeze(-1).expand(t.shape[:-1] + (1,))], dim=-1)  # (..., C+1, H, Dv+1)
        r = r.movedim(-2, -3)  # (..., H, C+1, Dv+1)
        pm = (a @ r) / nqk.view(nqk.shape + (1, 1, 1))  # (..., H, C+1, Dv+1)
        pm = torch.cat([pm[..., :c_in, :], pm[..., c_in:, :] + r[..., c_in:, :]], dim=-2)
        # packed columns: [numerators of all heads (H Dv), denominators (H)]
        pm = torch.cat([pm[..., :d].movedim(-3, -2).flatten(-2), pm[..., d].transpose(-1, -2)], dim=-1)  # (..., C+1, H Dv + H)
        m, c = pm[..., :c_in, :], pm[..., c_in, :].to(dtype)  # (..., C, H Dv + H), (..., H Dv + H)
        m = m.to(dtype)
        count = count.to(dtype)
        eps = torch.finfo(dtype).eps
        if seg is None:
            # row blocks: every (rows, H Dv + H) product is divided while it
            # is still in cache, and nothing of size N x (H Dv + H) is stored
            return _BlockedRatioMean.apply(x, m, c, (count * eps).view(1, 1), heads)
        else:
            # one baddbmm per bucket; the ratio runs on the padded rows (the
            # padding rows' gradient is 0) and only the result is gathered
            p = seg.affine(xp, m, c)  # (rows, H Dv + H)
            floor = (count * eps).repeat_interleave(seg.rows_per_slot, output_size=seg.num_rows).view(-1, 1)
            return seg.unpad(_RatioMean.apply(p, floor, heads))
        # weights 1 + q~.k~ are >= 0 (|q~|, |k~| <= 1), so the denominator is
        # >= 0; the floor keeps the all-zero corner and rounding finite.
        return _RatioMean.apply(p, floor, heads)


class DIFFormerConv(nn.Module):
    r"""The all-pair attention layer of DIFFormer, `"DIFFormer: Scalable
    (Graph) Transformers Induced by Energy Constrained Diffusion"
    <https://arxiv.org/abs/2301.09474>`_ (ICLR 2023).

    Per head :math:`h`, with :math:`Q = XW_Q^h`, :math:`K = XW_K^h`,
    :math:`V = XW_V^h` (one fused projection for all three and all heads):

    .. math::
        \mathbf{o}^h = \mathrm{Attn}(Q, K, V) + \hat{A}_{\mathrm{GCN}} V,
        \qquad \mathbf{x}'_i = \frac{1}{H}\sum_h \mathbf{o}^h_i

    where :math:`\mathrm{Attn}` is :func:`~wavygraph.nn.functional.all_pair_attention`
    and :math:`\hat{A}_{\mathrm{GCN}}` the symmetric GCN normalisation with
    self-loops of the given edges. With ``graph_weight=w`` the two terms are
    blended, :math:`(1-w)\,\mathrm{Attn} + w\,\hat{A}V`. The output is a row
    of a (row-stochastic, for the global term) attention applied to the values;
    the force of a residual stepper is ``conv(x) - x``.

    Args:
        channels (int): input and output size of every node.
        heads (int, optional): number of attention heads, averaged at the
            end. (default: :obj:`1`)
        kernel (str, optional): ``"simple"`` (linear in N) or ``"sigmoid"``
            (quadratic, small graphs). (default: ``"simple"``)
        qk_norm (str, optional): ``"global"``, ``"row"`` or ``"none"``, see
            :func:`~wavygraph.nn.functional.all_pair_attention`.
            (default: ``"global"``)
        use_graph (bool, optional): add the local GCN branch on the values.
            (default: :obj:`True`)
        graph_weight (float, optional): blend weight ``w`` in ``[0, 1]`` of
            the local branch; :obj:`None` adds it. (default: :obj:`None`)
        head_channels (int, optional): size of each head's q, k, v;
            :obj:`None` uses ``channels`` as DIFFormer does.
            (default: :obj:`None`)
        bias (bool, optional): bias of the q/k/v projection.
            (default: :obj:`True`)

    Shapes:
        - **input:** node features ``(N, channels)``, edge indices ``(2, E)``
          or a sparse ``(N, N)`` matrix from
          :func:`~wavygraph.nn.graph.gcn_adjacency` (optional),
          batch vector ``(N,)`` (optional)
        - **output:** node features ``(N, channels)``
    """

    def __init__(
        self,
        channels: int,
        heads: int = 1,
        kernel: str = "simple",
        qk_norm: str = "global",
        use_graph: bool = True,
        graph_weight: float | None = None,
        head_channels: int | None = None,
        bias: bool = True,
    ):
        super().__init__()
        check_choice("kernel", kernel, KERNELS)
        check_choice("qk_norm", qk_norm, QK_NORMS)
        if kernel == "simple" and qk_norm == "none":
            raise ValueError("kernel='simple' needs qk_norm='global' or 'row'")
        for name, value in (("channels", channels), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if head_channels is not None and (isinstance(head_channels, bool) or not isinstance(head_channels, int) or head_channels < 1):
            raise ValueError(f"head_channels must be a positive integer, got {head_channels!r}")
        if graph_weight is not None and not 0.0 <= float(graph_weight) <= 1.0:
            raise ValueError(f"graph_weight must lie in [0, 1] or be None, got {graph_weight!r}")
        self.channels = channels
        self.heads = heads
        self.kernel = kernel
        self.qk_norm = qk_norm
        self.use_graph = use_graph
        self.graph_weight = graph_weight
        self.head_channels = channels if head_channels is None else head_channels
        self.qkv = nn.Linear(channels, 3 * heads * self.head_channels, bias=bias)
        # with head_channels != channels the averaged values are projected back
        self.out = (
            nn.Linear(self.head_channels, channels, bias=False)
            if self.head_channels != channels
            else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.qkv.reset_parameters()
        if self.out is not None:
            self.out.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor | None = None, batch: Tensor | None = None) -> Tensor:
        n = check_inputs(x, self.channels, edge_index, batch, self.use_graph, finite=False)  # x, edges (if needed), batch
        if self.kernel == "simple" and self.qk_norm == "global" and n > 0:
            # fast path: the projection folded into the kernel, q/k/v never formed
            out = _folded_simple_attention(x, self.qkv.weight, self.qkv.bias, self.heads, batch)  # (N, C)
            if self.use_graph:
                # head mean of A V_h = A (X mean_h W_v^h + mean_h b_v^h): one propagation
                hc = self.heads * self.head_channels
                wv = self.qkv.weight[2 * hc :].view(self.heads, self.head_channels, -1).mean(0)
                bv = None if self.qkv.bias is None else self.qkv.bias[2 * hc :].view(self.heads, -1).mean(0)
                local = propagate(self._adjacency(edge_index, n, x.dtype), F.linear(x, wv, bv))  # (N, C)
                w = self.graph_weight
                out = out.to(local.dtype) + local if w is None else (1.0 - w) * out.to(local.dtype) + w * local
            return out if self.out is None else self.out(out)
        q, k, v = self.qkv(x).view(n, 3, self.heads, self.head_channels).unbind(1)  # (N, H, C) each
        out = all_pair_attention(q, k, v, batch, self.kernel, self.qk_norm)  # (N, H, C)
        if self.use_graph:
            local = propagate(self._adjacency(edge_index, n, x.dtype), v)  # (N, H, C)
            w = self.graph_weight
            out = out + local if w is None else (1.0 - w) * out + w * local
        out = out.mean(dim=1)  # (N, C)
        return out if self.out is None else self.out(out)

    @staticmethod
    def _adjacency(edge_index: Tensor, n: int, dtype: torch.dtype) -> Tensor:
        if edge_index.is_sparse or edge_index.layout == torch.sparse_csr:
            return edge_index
        return gcn_adjacency(edge_index, n, dtype)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
            f"kernel={self.kernel!r}, qk_norm={self.qk_norm!r}, "
            f"use_graph={self.use_graph}, graph_weight={self.graph_weight})"
        )
