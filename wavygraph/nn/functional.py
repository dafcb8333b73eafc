"""Functional all-pair attention of DIFFormer (Wu et al., ICLR 2023).

Paper: https://arxiv.org/abs/2301.09474

Two kernels, both row-stochastic attention over the nodes of one graph:

* ``simple`` (DIFFormer-s): weights ``1 + q~_i . k~_j``, computed in
  ``O(N d^2)`` time and ``O(N d)`` memory through the identity

  .. math::
      \\mathbf{o}_i = \\frac{\\sum_j \\mathbf{v}_j + \\tilde{\\mathbf{q}}_i
      (\\tilde{K}^\\top V)}{N + \\tilde{\\mathbf{q}}_i \\cdot \\sum_j
      \\tilde{\\mathbf{k}}_j}

  The ``N x N`` matrix is never formed.
* ``sigmoid`` (DIFFormer-a): weights ``sigmoid(q_i . k_j)`` normalised per
  row, ``O(N^2)`` time, computed in row blocks whose size keeps the working
  memory under ``max_block_bytes`` (and recomputed in backward, so the
  autograd graph does not store the blocks either).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from .validate import check_batch, check_choice

KERNELS = ("simple", "sigmoid")
QK_NORMS = ("global", "row", "none")

#: Working-memory budget of one row block of the ``sigmoid`` kernel.
DEFAULT_BLOCK_BYTES = 256 * 2**20


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, batch: Tensor | None) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 3:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(
                f"{name} must be a tensor of shape (N, heads, channels), got {shape}"
            )
    if q.shape != k.shape:
        raise ValueError(
            f"q and k must have the same shape (N, H, D), got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if v.shape[:2] != q.shape[:2]:
        raise ValueError(
            f"v must have shape (N, H, Dv) with the N and H of q {tuple(q.shape[:2])}, "
            f"got {tuple(v.shape)}"
        )
    check_batch(batch, q.shape[0])


def _vector_norm(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """``||x||`` floored at the dtype's smallest normal number, exact also
    where the squares of the entries under- or overflow (float32 entries
    below ~1e-19 or above ~1e19): then it is accumulated in float64. On CPU
    the fast float32 norm is checked and redone only when out of range; on
    accelerators the float64 accumulation always runs (no host sync)."""
    finfo = torch.finfo(x.dtype)
    if x.device.type == "cpu":
        norm = torch.linalg.vector_norm(x, dim=dim, keepdim=keepdim)
        # Below lo, entries under sqrt(tiny) may carry a relevant share of the
        # norm; an infinite norm is an overflowed sum of finite squares.
        lo = math.sqrt(finfo.tiny / finfo.eps)
        if x.dtype != torch.float64 and bool(((norm < lo) | torch.isinf(norm)).any()):
            norm = torch.linalg.vector_norm(x, dim=dim, keepdim=keepdim, dtype=torch.float64).to(x.dtype)
    else:
        wide = torch.float32 if x.device.type == "mps" else torch.float64
        norm = torch.linalg.vector_norm(x, dim=dim, keepdim=keepdim, dtype=wide).to(x.dtype)
    return norm.clamp_min(finfo.tiny)


def _normalize(q: Tensor, k: Tensor, qk_norm: str) -> tuple[Tensor, Tensor]:
    """Scale q and k of one graph: ``global`` by the Frobenius norm over all
    nodes and heads, ``row`` per node and head, ``none`` untouched."""
    if qk_norm in ("global", "row"):
        q, _ = _unit(q, qk_norm)
        k, _ = _unit(k, qk_norm)
    return q, k


def _unit(x: Tensor, qk_norm: str) -> tuple[Tensor, Tensor]:
    """``x`` scaled to unit norm and the norm it was divided by (broadcastable)."""
    norm = _vector_norm(x) if qk_norm == "global" else _vector_norm(x, dim=-1, keepdim=True)
    return x / norm, norm


def _unit_backward(gy: Tensor, y: Tensor, norm: Tensor, qk_norm: str) -> Tensor:
    """Gradient through ``y = x / ||x||`` given ``y`` and ``||x||``."""
    if qk_norm == "global":
        return (gy - y * (gy * y).sum()) / norm
    return (gy - y * (gy * y).sum(-1, keepdim=True)) / norm


class _SimpleKernel(torch.autograd.Function):
    """DIFFormer-s on one graph with a hand-written backward.

    Saves only q, k, v (the caller's tensors), the output, the ``(N, H)``
    denominator, the two norms and the small ``(H, D, Dv)`` / ``(H, D)``
    summaries; the normalised q~, k~ are recomputed in backward. Autograd
    through the plain formula would keep about ten ``(N, H, D)`` buffers.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, qk_norm: str) -> Tensor:
        n = q.shape[0]
        qn, nq = _unit(q, qk_norm)  # (N, H, D)
        kn, nk = _unit(k, qk_norm)
        kv = torch.einsum("nhd,nhe->hde", kn, v)  # (H, D, Dv)
        ks = kn.sum(0)  # (H, D)
        num = torch.einsum("nhd,hde->nhe", qn, kv).add_(v.sum(0))  # (N, H, Dv)
        den = torch.einsum("nhd,hd->nh", qn, ks).add_(n)  # (N, H)
        # Every weight 1 + q~.k~ lies in [0, 2] (|q~|, |k~| <= 1), so the true
        # denominator is >= 0 and is 0 only if every weight of the row is 0,
        # in which case the numerator is 0 as well. The floor keeps that
        # corner (and rounding just below 0) finite without touching ordinary
        # rows, whose denominator is close to N.
        floor = n * torch.finfo(den.dtype).eps
        active = den > floor  # (N, H) small; gradient of the clamp
        den = den.clamp_min(floor)
        out = num.div_(den.unsqueeze(-1))
        ctx.qk_norm = qk_norm
        ctx.save_for_backward(q, k, v, out, den, active, nq, nk, kv, ks)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        q, k, v, out, den, active, nq, nk, kv, ks = ctx.saved_tensors
        qk_norm = ctx.qk_norm
        qn = q / nq
        kn = k / nk
        dnum = g / den.unsqueeze(-1)  # (N, H, Dv)
        dden = -(dnum * out).sum(-1) * active  # (N, H)
        # num = sum v + q~ kv ;  den = N + q~ . ks
        dqn = torch.einsum("nhe,hde->nhd", dnum, kv).addcmul_(dden.unsqueeze(-1), ks)
        dkv = torch.einsum("nhd,nhe->hde", qn, dnum)  # (H, D, Dv)
        dks = torch.einsum("nh,nhd->hd", dden, qn)  # (H, D)
        dv = torch.einsum("nhd,hde->nhe", kn, dkv).add_(dnum.sum(0))
        dkn = torch.einsum("nhe,hde->nhd", v, dkv).add_(dks)
        dq = _unit_backward(dqn, qn, nq, qk_norm)
        dk = _unit_backward(dkn, kn, nk, qk_norm)
        return dq, dk, dv, None


def _simple_single(q: Tensor, k: Tensor, v: Tensor, qk_norm: str) -> Tensor:
    return _SimpleKernel.apply(q, k, v, qk_norm)


#: Rows per chunk of the batched (segment) products, see :class:`Segments`.
CHUNK_ROWS = 32


def _graph_counts(batch: Tensor, num_graphs: int | None) -> tuple[Tensor, int, Tensor]:
    """``batch`` as int64, the number of graphs (``batch.max() + 1`` when
    :obj:`None`, 0 for no nodes) and the node count of every graph ``(B,)``."""
    batch = batch.long()
    if num_graphs is None:
        num_graphs = int(batch.max()) + 1 if batch.numel() > 0 else 0
    return batch, num_graphs, torch.bincount(batch, minlength=num_graphs)


def _rank_in_graph(batch: Tensor, counts: Tensor) -> Tensor:
    """The rank (N,) of every node inside its graph (stable: keeps the given
    order). Skips the sort when ``batch`` is already sorted, as PyG's are."""
    n = batch.numel()
    ptr = torch.zeros(counts.numel() + 1, dtype=torch.long, device=batch.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    arange = torch.arange(n, device=batch.device)
    if n < 2 or bool((batch[1:] >= batch[:-1]).all()):
        return arange - ptr[batch]
    perm = torch.argsort(batch, stable=True)
    rank = torch.empty_like(batch)
    rank[perm] = arange - ptr[batch[perm]]
    return rank


class Segments:
    """Nodes grouped by graph, laid out for loop-free per-graph products.

    Every graph's nodes are copied into whole chunks of ``rows`` rows (the
    last chunk of a graph zero-filled), so a chunk belongs to exactly one
    graph. Per-graph sums of outer products ``X_b^T Y_b`` are then one
    batched matmul over chunks plus an ``index_add`` of the ``(C, E)``
    partial sums into their graph, and per-node products ``x_n M_{b(n)}`` one
    batched matmul with each chunk's graph matrix. The zero fill costs at most
    ``rows - 1`` rows per graph (no padding to the largest graph), everything
    is differentiable with plain autograd, and memory stays ``O(N d + B d^2)``
    (no per-node outer products). Building it reads the graph sizes once
    (one host sync).

    Args:
        batch (torch.Tensor): graph index of every node ``(N,)``, any order.
        num_graphs (int, optional): number of graphs ``B``; :obj:`None` takes
            ``batch.max() + 1``.
        rows (int, optional): rows per chunk. (default: :obj:`CHUNK_ROWS`)
    """

    def __init__(self, batch: Tensor, num_graphs: int | None = None, rows: int = CHUNK_ROWS):
        batch, num_graphs, counts = _graph_counts(batch, num_graphs)
        device = batch.device
        chunks = (counts + rows - 1) // rows  # (B,)
        cptr = torch.zeros(num_graphs + 1, dtype=torch.long, device=device)
        torch.cumsum(chunks * rows, 0, out=cptr[1:])
        rank = _rank_in_graph(batch, counts)
        self.batch = batch
        self.num_graphs = num_graphs
        self.rows = rows
        self.counts = counts
        self.dest = cptr[batch] + rank  # (N,) row of every node in the chunk layout
        self.num_rows = int(cptr[-1])  # the one host sync
        self.chunk_graph = torch.repeat_interleave(
            torch.arange(num_graphs, device=device), chunks, output_size=self.num_rows // rows
        )  # (num_chunks,)

    def pad(self, x: Tensor) -> Tensor:
        """``(N, *F)`` -> ``(num_chunks, rows, *F)``, zero-filled."""
        out = x.new_zeros((self.num_rows,) + tuple(x.shape[1:]))
        out = out.index_copy(0, self.dest, x)
        return out.view((-1, self.rows) + tuple(x.shape[1:]))

    def unpad(self, xp: Tensor) -> Tensor:
        """Inverse of :meth:`pad`: ``(num_chunks, rows, *F)`` -> ``(N, *F)``."""
        return xp.reshape((self.num_rows,) + tuple(xp.shape[2:])).index_select(0, self.dest)

    def outer(self, xp: Tensor, yp: Tensor, eq: str = "crd,cre->cde") -> Tensor:
        """Per-graph ``sum_n x_n^T y_n`` of padded ``xp``, ``yp``: ``(B, ...)``."""
        part = torch.einsum(eq, xp, yp)  # (num_chunks, ...)
        out = part.new_zeros((self.num_graphs,) + tuple(part.shape[1:]))
        return out.index_add(0, self.chunk_graph, part)

    def matmul(self, xp: Tensor, m: Tensor, eq: str = "crd,cde->cre") -> Tensor:
        """Per-node ``x_n M_{b(n)}`` of padded ``xp`` and per-graph ``m``."""
        return torch.einsum(eq, xp, m.index_select(0, self.chunk_graph))

    def sum(self, x: Tensor) -> Tensor:
        """Per-graph sum of ``(N, *F)``: ``(B, *F)``."""
        out = x.new_zeros((self.num_graphs,) + tuple(x.shape[1:]))
        return out.index_add(0, self.batch, x)


#: Bucket sizes per doubling of the graph size in :class:`Buckets`, by device
#: type; other devices take :data:`DEFAULT_BUCKETS_PER_OCTAVE`. On CPU fine
#: buckets (little padding: the work is the rows); on accelerators coarse ones
#: (powers of two): each bucket costs several kernel launches, and padded
#: rows are nearly free there.
BUCKETS_PER_OCTAVE = {"cpu": 8}
DEFAULT_BUCKETS_PER_OCTAVE = 1


def _bucket_rows(counts: Tensor, per_octave: int = 8) -> Tensor:
    """Rows each graph gets in :class:`Buckets`: its node count rounded up to
    a multiple of ``max(8, 2^(floor(log2 n) - log2(per_octave)))``, so at
    most ``1/per_octave`` (and fewer than 8 rows) of padding per graph and
    about ``per_octave`` sizes per octave. ``per_octave`` is a power of two."""
    shift = int(per_octave).bit_length() - 1
    if per_octave < 1 or 1 << shift != per_octave:
        raise ValueError(f"per_octave must be a power of two, got {per_octave!r}")
    c = counts.clamp_min(1)
    gran = torch.exp2((torch.log2(c.double()).floor() - shift).clamp_min(3)).long()  # (B,)
    return torch.where(counts > 0, (counts + gran - 1) // gran * gran, torch.zeros_like(counts))


class Buckets:
    """Graphs of a batch grouped into buckets of equal padded size.

    Every graph is padded to :func:`_bucket_rows` of its size (on CPU at
    most 1/8 more rows, on accelerators the next power of two; never to the
    largest graph) and graphs with the same padded
    size ``s`` form one bucket, a contiguous ``(graphs, s, C)`` block of the
    padded buffer. Per-graph products are then one batched matmul per bucket
    (a few dozen buckets for sizes spanning two orders of magnitude), with
    no per-node or per-chunk copies of per-graph matrices. Per-graph results
    come in *slot* order (graphs sorted by padded size); ``slot_graph`` maps
    slots back to graph indices. Building it reads the bucket sizes once
    (one host sync).

    Args:
        batch (torch.Tensor): graph index of every node ``(N,)``, any order.
        num_graphs (int, optional): number of graphs ``B``; :obj:`None` takes
            ``batch.max() + 1``.
        per_octave (int, optional): bucket sizes per doubling of the graph
            size; :obj:`None` takes :data:`BUCKETS_PER_OCTAVE` of the device.
    """

    def __init__(self, batch: Tensor, num_graphs: int | None = None, per_octave: int | None = None):
        batch, num_graphs, counts = _graph_counts(batch, num_graphs)
        device = batch.device
        if per_octave is None:
            per_octave = BUCKETS_PER_OCTAVE.get(device.type, DEFAULT_BUCKETS_PER_OCTAVE)
        rows = _bucket_rows(counts, per_octave)  # (B,)
        slot_graph = torch.argsort(rows, stable=True)  # (B,) graph of every slot
        slot = torch.empty_like(slot_graph)
        slot[slot_graph] = torch.arange(num_graphs, device=device)  # slot of every graph
        rows_s = rows[slot_graph]  # (B,) padded rows per slot, ascending
        start_s = torch.cumsum(rows_s, 0) - rows_s  # (B,) first padded row of every slot
        rank = _rank_in_graph(batch, counts)
        self.dest = start_s[slot[batch]] + rank  # (N,) padded row of every node
        sizes, per = torch.unique_consecutive(rows_s, return_counts=True)
        self.buckets = []  # (first slot, last slot, first row, last row, rows per graph)
        g0 = r0 = 0
        for size, num in zip(sizes.tolist(), per.tolist()):  # the one host sync
            self.buckets.append((g0, g0 + num, r0, r0 + num * size, size))
            g0, r0 = g0 + num, r0 + num * size
        self.num_rows = r0
        self.num_graphs = num_graphs
        self.slot_graph = slot_graph
        self.counts = counts[slot_graph]  # (B,) node count per slot
        self.rows_per_slot = rows_s

    def pad(self, x: Tensor) -> Tensor:
        """``(N, F)`` -> padded ``(num_rows, F)`` (zero rows), differentiable."""
        return _Pad.apply(x, self.dest, self.num_rows)

    def unpad(self, xp: Tensor) -> Tensor:
        """Padded ``(num_rows, F)`` -> ``(N, F)``, differentiable."""
        return _Pad.apply(xp, self.dest, None)

    def gram(self, xp: Tensor) -> tuple[Tensor, Tensor]:
        """Per-slot ``X_b^T X_b`` ``(B, F, F)`` and column sums ``(B, F)``."""
        return _BucketGram.apply(xp, self)

    def affine(self, xp: Tensor, m: Tensor, c: Tensor) -> Tensor:
        """Per-row ``x_n M_b + c_b`` of padded ``xp``, per-slot ``m`` ``(B, F, P)``
        and ``c`` ``(B, P)``: ``(num_rows, P)``."""
        return _BucketAffine.apply(xp, m, c, self)

    def views(self, t: Tensor):
        """``(first slot, last slot, (graphs, rows, F) view of t)`` per bucket."""
        for g0, g1, r0, r1, size in self.buckets:
            yield g0, g1, t[r0:r1].view(g1 - g0, size, t.shape[-1])


class _Pad(torch.autograd.Function):
    """Row scatter into a zero buffer (``num_rows`` given) or row gather
    (``num_rows`` None); each one's backward is the other."""

    @staticmethod
    def forward(ctx, x: Tensor, dest: Tensor, num_rows: int | None) -> Tensor:
        ctx.save_for_backward(dest)
        ctx.num_rows = x.shape[0]
        if num_rows is None:
            return x.index_select(0, dest)
        return x.new_zeros((num_rows, x.shape[1])).index_copy_(0, dest, x)

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        (dest,) = ctx.saved_tensors
        if g.shape[0] == dest.shape[0]:  # backward of the gather: scatter
            return g.new_zeros((ctx.num_rows, g.shape[1])).index_copy_(0, dest, g), None, None
        return g.index_select(0, dest), None, None


class _BucketGram(torch.autograd.Function):
    """Per-slot Gram matrices and column sums of the padded rows, one
    ``bmm`` per bucket; backward ``dX_b = X_b (dG_b + dG_b^T) + ds_b``."""
    @staticmethod
    def forward(ctx, xp: Tensor, lay: Buckets) -> tuple[Tensor, Tensor]:
        b, f = lay.num_graphs, xp.shape[1]
        gram = xp.new_empty((b, f, f))
        colsum = xp.new_empty((b, f))
        for g0, g1, xk in lay.views(xp):
            if xk.shape[1] > 0:
                torch.bmm(xk.transpose(1, 2), xk, out=gram[g0:g1])
                torch.sum(xk, 1, out=colsum[g0:g1])
            else:  # graphs without nodes
                gram[g0:g1] = 0
                colsum[g0:g1] = 0
        ctx.lay = lay
        ctx.save_for_backward(xp)
        return gram, colsum

    @staticmethod
    @once_differentiable
    def backward(ctx, dgram: Tensor, dsum: Tensor):
        (xp,) = ctx.saved_tensors
        sym = dgram + dgram.transpose(1, 2)  # (B, F, F)
        dxp = torch.empty_like(xp)
        for g0, g1, r0, r1, size in ctx.lay.buckets:
            if size > 0:  # dX_b = X_b (dG_b + dG_b^T) + ds_b
                xk = xp[r0:r1].view(g1 - g0, size, -1)
                torch.baddbmm(dsum[g0:g1].unsqueeze(1), xk, sym[g0:g1], out=dxp[r0:r1].view(g1 - g0, size, -1))
        return dxp, None


class _BucketAffine(torch.autograd.Function):
    """``x_n M_b + c_b`` on the padded rows, one ``baddbmm`` per bucket;
    backward by hand (no autograd scatters of per-graph matrices)."""
    @staticmethod
    def forward(ctx, xp: Tensor, m: Tensor, c: Tensor, lay: Buckets) -> Tensor:
        out = xp.new_empty((xp.shape[0], m.shape[-1]))
        for g0, g1, r0, r1, size in lay.buckets:
            if size > 0:
                torch.baddbmm(c[g0:g1].unsqueeze(1), xp[r0:r1].view(g1 - g0, size, -1), m[g0:g1],
                              out=out[r0:r1].view(g1 - g0, size, -1))
        ctx.lay = lay
        ctx.save_for_backward(xp, m)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, g: Tensor):
        xp, m = ctx.saved_tensors
        dxp = torch.empty_like(xp)
        dm = torch.empty_like(m)
        dc = m.new_empty(m.shape[0], m.shape[-1])
        for g0, g1, r0, r1, size in ctx.lay.buckets:
            if size == 0:  # graphs without nodes
                dm[g0:g1] = 0
                dc[g0:g1] = 0
            else:
                gk = g[r0:r1].view(g1 - g0, size, -1)
                xk = xp[r0:r1].view(g1 - g0, size, -1)
                torch.bmm(gk, m[g0:g1].transpose(1, 2), out=dxp[r0:r1].view(g1 - g0, size, -1))
                torch.bmm(xk.transpose(1, 2), gk, out=dm[g0:g1])
                torch.sum(gk, 1, out=dc[g0:g1])
        return dxp, dm, dc, None


def _simple_batched(q: Tensor, k: Tensor, v: Tensor, batch: Tensor, qk_norm: str) -> Tensor:
    """DIFFormer-s on every graph of a batch at once, no Python loop over graphs."""
    seg = Segments(batch)
    b = seg.batch
    tiny = torch.finfo(q.dtype).tiny
    if qk_norm == "global":  # one Frobenius norm per graph (nodes and heads)
        # per-node norms (floored: no infinite sqrt'(0) for all-zero q or k)
        # combined in float64, where their squares neither under- nor overflow
        nq, nk = (
            seg.sum(_vector_norm(t, dim=(1, 2)).double().square()).sqrt().to(t.dtype).clamp_min(tiny)
            for t in (q, k)
        )  # (B,)
        qn = q / nq.index_select(0, b).view(-1, 1, 1)
        kn = k / nk.index_select(0, b).view(-1, 1, 1)
    else:
        qn, _ = _unit(q, qk_norm)
        kn, _ = _unit(k, qk_norm)
    kv = seg.outer(seg.pad(kn), seg.pad(v), "crhd,crhe->chde")  # (B, H, D, Dv)
    ks = seg.sum(kn)  # (B, H, D)
    vs = seg.sum(v)  # (B, H, Dv)
    num = seg.unpad(seg.matmul(seg.pad(qn), kv, "crhd,chde->crhe")) + vs.index_select(0, b)  # (N, H, Dv)
    n = seg.counts.to(q.dtype).index_select(0, b).unsqueeze(-1)  # (N, 1)
    den = (qn * ks.index_select(0, b)).sum(-1) + n  # (N, H)
    den = torch.maximum(den, n * torch.finfo(den.dtype).eps)  # see _SimpleKernel
    return num / den.unsqueeze(-1)


def _sigmoid_block(qb: Tensor, k: Tensor, v: Tensor) -> Tensor:
    scores = torch.einsum("bhd,nhd->hbn", qb, k)  # (H, B, N)
    # sigmoid(s) / sum sigmoid(s) == softmax(logsigmoid(s)): same weights,
    # but no 0/0 when every sigmoid underflows.
    weights = torch.softmax(F.logsigmoid(scores), dim=-1)
    return torch.einsum("hbn,nhe->bhe", weights, v)  # (B, H, Dv)


def _sigmoid_single(q: Tensor, k: Tensor, v: Tensor, qk_norm: str, max_block_bytes: int) -> Tensor:
    n, h, _ = q.shape
    q, k = _normalize(q, k, qk_norm)
    # scores, log-sigmoid and softmax of one block live at the same time
    per_row = 3 * h * max(n, 1) * q.element_size()
    rows = max(1, min(n, max_block_bytes // per_row))
    if rows >= n:
        return _sigmoid_block(q, k, v)
    use_ckpt = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    outs = []
    for start in range(0, n, rows):
        qb = q[start : start + rows]
        if use_ckpt:
            outs.append(checkpoint(_sigmoid_block, qb, k, v, use_reentrant=False))
        else:
            outs.append(_sigmoid_block(qb, k, v))
    return torch.cat(outs, dim=0)


def all_pair_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    batch: Tensor | None = None,
    kernel: str = "simple",
    qk_norm: str = "global",
    max_block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> Tensor:
    r"""All-pair (global) attention of DIFFormer over the nodes of each graph.

    Args:
        q (torch.Tensor): queries of shape ``(N, H, D)``.
        k (torch.Tensor): keys of shape ``(N, H, D)``.
        v (torch.Tensor): values of shape ``(N, H, Dv)``.
        batch (torch.Tensor, optional): graph index of every node, shape
            ``(N,)``, any order. Attention never crosses graphs and no graph
            is padded. (default: :obj:`None`, one graph)
        kernel (str, optional): ``"simple"`` (DIFFormer-s, linear in N) or
            ``"sigmoid"`` (DIFFormer-a, quadratic in N). (default: ``"simple"``)
        qk_norm (str, optional): ``"global"`` divides q and k by their
            Frobenius norm over the graph's nodes and all heads (DIFFormer's
            official choice), ``"row"`` normalises each node's vector per
            head, ``"none"`` leaves them (``sigmoid`` kernel only: the simple
            kernel needs ``|q~.k~| <= 1`` for non-negative weights).
            (default: ``"global"``)
        max_block_bytes (int, optional): working-memory budget of one row
            block of the ``sigmoid`` kernel. (default: 256 MiB)

    Shapes:
        - **input:** q, k ``(N, H, D)``, v ``(N, H, Dv)``, batch ``(N,)``
        - **output:** ``(N, H, Dv)``
    """
    check_choice("kernel", kernel, KERNELS)
    check_choice("qk_norm", qk_norm, QK_NORMS)
    if kernel == "simple" and qk_norm == "none":
        raise ValueError(
            "kernel='simple' needs normalised q and k (weights 1 + q.k must be >= 0); "
            "use qk_norm='global' or 'row', or kernel='sigmoid'"
        )
    _check_inputs(q, k, v, batch)
    if q.shape[0] == 0:
        return v.new_zeros(v.shape)

    def single(qs: Tensor, ks: Tensor, vs: Tensor) -> Tensor:
        if kernel == "simple":
            return _simple_single(qs, ks, vs, qk_norm)
        return _sigmoid_single(qs, ks, vs, qk_norm, max_block_bytes)

    if batch is None:
        return single(q, k, v)
    if kernel == "simple":
        return _simple_batched(q, k, v, batch, qk_norm)

    batch = batch.long()
    perm = torch.argsort(batch, stable=True)
    counts = torch.bincount(batch).tolist()
    segments = zip(
        q[perm].split(counts), k[perm].split(counts), v[perm].split(counts)
    )
    out_sorted = torch.cat([single(qs, ks, vs) for qs, ks, vs in segments if qs.shape[0] > 0])
    out = torch.empty_like(out_sorted)
    out[perm] = out_sorted
    return out
