r"""Functional all-pair attention of DIFFormer, `"DIFFormer: Scalable (Graph)
Transformers Induced by Energy Constrained Diffusion"
<https://arxiv.org/abs/2301.09474>`_ (Wu et al., ICLR 2023).

Two kernels, both row-stochastic attention over the nodes of one graph, one
implementation each (:func:`all_pair_attention`):

* ``simple`` (DIFFormer-s): weights :math:`1 + \tilde{q}_i \cdot \tilde{k}_j`
  of normalised q, k, computed in :math:`O(N d^2)` time and :math:`O(N d)`
  memory through

  .. math::
      \mathbf{o}_i = \frac{\sum_j \mathbf{v}_j + \tilde{\mathbf{q}}_i
      (\tilde{K}^\top V)}{N + \tilde{\mathbf{q}}_i \cdot \sum_j
      \tilde{\mathbf{k}}_j}

  The ``N x N`` matrix is never formed.
* ``sigmoid`` (DIFFormer-a): weights :math:`\sigma(q_i \cdot k_j)` normalised
  per row, :math:`O(N^2)` time, in row blocks whose working memory stays
  under ``max_block_bytes`` (recomputed in backward).

Batches of graphs run on the bucket layout of :mod:`wavygraph.nn.buckets`.
:class:`~wavygraph.nn.DIFFormerConv` computes the ``simple`` kernel with the
global q/k norm through the folded fast path
:func:`~wavygraph.nn.folded.folded_simple_attention` (the q/k/v projection
folded into the kernel), which equals :func:`all_pair_attention` on the
projected q, k, v; this module is the plain reference and the functional API.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .buckets import Buckets
from .validate import check_batch, check_choice

KERNELS = ("simple", "sigmoid")
QK_NORMS = ("global", "row", "none")

#: Each kernel's own q/k normalisation, taken when ``qk_norm`` is :obj:`None`:
#: DIFFormer-s divides q and k by their Frobenius norms, DIFFormer-a applies
#: the sigmoid to the raw projections.
DEFAULT_QK_NORM = {"simple": "global", "sigmoid": "none"}

#: Bucket sizes per doubling of the graph size for the ``sigmoid`` kernel
#: (at most 1/32 padding rows, about 6 % more work; see :mod:`~wavygraph.nn.buckets`).
SIGMOID_BUCKETS_PER_OCTAVE = 32

#: Working-memory budget of one row block of the ``sigmoid`` kernel.
DEFAULT_BLOCK_BYTES = 256 * 2**20


def resolve_qk_norm(kernel: str, qk_norm: str | None) -> str:
    """The q/k normalisation ``kernel`` runs with: ``qk_norm``, or the
    kernel's own default (:data:`DEFAULT_QK_NORM`) for :obj:`None`. Raises a
    :class:`ValueError` for unknown names and for ``simple`` with ``none``."""
    check_choice("kernel", kernel, KERNELS)
    if qk_norm is None:
        return DEFAULT_QK_NORM[kernel]
    check_choice("qk_norm", qk_norm, QK_NORMS)
    if kernel == "simple" and qk_norm == "none":
        raise ValueError(
            "kernel='simple' needs normalised q and k (weights 1 + q.k must be >= 0); "
            "use qk_norm='global' or 'row' (or None, the kernel's default), or kernel='sigmoid'"
        )
    return qk_norm


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, batch: Tensor | None) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 3:
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor of shape (N, heads, channels), got {shape}")
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape (N, H, D), got {tuple(q.shape)} and {tuple(k.shape)}")
    if v.shape[0] != q.shape[0] or v.shape[1] not in (1, q.shape[1]):
        raise ValueError(
            f"v must have shape (N, H, Dv) or (N, 1, Dv) (one value shared by all heads) with the N and H "
            f"of q {tuple(q.shape[:2])}, got {tuple(v.shape)}"
        )
    check_batch(batch, q.shape[0])


def vector_norm(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """``||x||`` floored at the dtype's smallest normal number, exact also
    where the squares of the entries under- or overflow (float32 entries
    below ~1e-19 or above ~1e19): then it is accumulated in float64. On CPU
    the fast norm is checked and redone only when out of range; on
    accelerators the wide accumulation always runs (no host sync)."""
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


def normalize_qk(q: Tensor, k: Tensor, qk_norm: str) -> tuple[Tensor, Tensor]:
    """q and k of one graph (``(..., N, H, D)``, leading dimensions are
    separate graphs) scaled: ``global`` by the Frobenius norm over the graph's
    nodes and all heads, ``row`` per node and head, ``none`` untouched."""
    if qk_norm == "none":
        return q, k
    dims = (-3, -2, -1) if qk_norm == "global" else -1
    return q / vector_norm(q, dim=dims, keepdim=True), k / vector_norm(k, dim=dims, keepdim=True)


def _simple_block(q: Tensor, k: Tensor, v: Tensor, counts: Tensor, qk_norm: str) -> Tensor:
    r"""DIFFormer-s on ``G`` graphs of ``S`` (zero-padded) rows each: q, k
    ``(G, S, H, D)`` (row-normalised already for ``row``), v ``(G, S, H, Dv)``,
    node counts ``(G,)``. The global norm's gradient flows through the small
    per-graph sums: :math:`\tilde{q}_i \cdot \tilde{k}_j = q_i \cdot k_j / (\|Q\|_F \|K\|_F)`."""
    if qk_norm == "global":
        # Divided by their detached norms first, q and k have norm 1 (or are
        # 0), so the per-graph divisions below and their gradients (which
        # divide by the norms twice) neither over- nor underflow; the floor
        # 1/2 only acts on an all-zero q or k.
        q = q / vector_norm(q, dim=(1, 2, 3), keepdim=True).detach()
        k = k / vector_norm(k, dim=(1, 2, 3), keepdim=True).detach()
    kv = torch.einsum("gshd,gshe->ghde", k, v)  # (G, H, D, Dv)
    ks = k.sum(1)  # (G, H, D)
    if qk_norm == "global":
        nq, nk = (torch.linalg.vector_norm(t, dim=(1, 2, 3)).clamp_min(0.5) for t in (q, k))  # (G,), ~1
        kv = kv / nk.view(-1, 1, 1, 1) / nq.view(-1, 1, 1, 1)
        ks = ks / nk.view(-1, 1, 1) / nq.view(-1, 1, 1)
    num = torch.einsum("gshd,ghde->gshe", q, kv) + v.sum(1, keepdim=True)  # (G, S, H, Dv)
    n = counts.to(q.dtype).view(-1, 1, 1)
    den = torch.einsum("gshd,ghd->gsh", q, ks) + n  # (G, S, H)
    # Every weight 1 + q~.k~ lies in [0, 2] (|q~|, |k~| <= 1), so the true
    # denominator is >= 0, and 0 only if every weight of the row is 0 (then
    # the numerator is 0 too). The floor keeps that corner and rounding just
    # below 0 finite; ordinary denominators are close to N.
    den = torch.maximum(den, n * torch.finfo(den.dtype).eps)
    return num / den.unsqueeze(-1)


def _sigmoid_rows(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """DIFFormer-a for query rows q ``(G, R, H, D)`` against keys k ``(G, S, H, D)``
    and values v ``(G, S, H, Dv)``; ``mask`` ``(G, S)`` marks real keys."""
    scores = torch.einsum("grhd,gshd->ghrs", q, k)  # (G, H, R, S)
    # sigmoid(s) / sum sigmoid(s) == softmax(logsigmoid(s)): the same
    # weights, but no 0/0 when every sigmoid underflows.
    logw = F.logsigmoid(scores)
    if mask is not None:  # -inf on padding keys (an add: its backward is free)
        logw = logw + torch.zeros_like(mask, dtype=logw.dtype).masked_fill(~mask, float("-inf"))[:, None, None, :]
    return torch.einsum("ghrs,gshe->grhe", torch.softmax(logw, dim=-1), v)  # (G, R, H, Dv)


def _sigmoid_block(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, max_block_bytes: int) -> Tensor:
    """:func:`_sigmoid_rows` in row blocks of bounded working memory,
    recomputed in backward (checkpointed) when gradients are needed."""
    g, s, h, _ = q.shape
    per_row = 3 * g * h * max(s, 1) * q.element_size()  # scores, log-weights, weights
    rows = max(1, min(s, max_block_bytes // per_row))
    if rows >= s:
        return _sigmoid_rows(q, k, v, mask)
    use_ckpt = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    outs = []
    for start in range(0, s, rows):
        qb = q[:, start : start + rows]
        if use_ckpt:
            outs.append(checkpoint(_sigmoid_rows, qb, k, v, mask, use_reentrant=False))
        else:
            outs.append(_sigmoid_rows(qb, k, v, mask))
    return torch.cat(outs, dim=1)


def all_pair_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    batch: Tensor | None = None,
    kernel: str = "simple",
    qk_norm: str | None = None,
    max_block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> Tensor:
    r"""All-pair (global) attention of DIFFormer over the nodes of each graph.

    Per head, with :math:`w_{ij}` the kernel's weight of node :math:`j` for
    node :math:`i` of the same graph,

    .. math::
        \mathbf{o}_i = \frac{\sum_j w_{ij}\,\mathbf{v}_j}{\sum_j w_{ij}},
        \qquad w_{ij} = 1 + \tilde{\mathbf{q}}_i \cdot \tilde{\mathbf{k}}_j
        \ (\texttt{simple}), \qquad w_{ij} = \sigma(\mathbf{q}_i \cdot
        \mathbf{k}_j)\ (\texttt{sigmoid})

    where :math:`\tilde{\cdot}` is the ``qk_norm`` scaling (the ``sigmoid``
    kernel sees q and k after it as well).

    Args:
        q (torch.Tensor): queries ``(N, H, D)``.
        k (torch.Tensor): keys ``(N, H, D)``.
        v (torch.Tensor): values ``(N, H, Dv)``, or ``(N, 1, Dv)`` for one
            value shared by every head (DIFFormer without value projection).
        batch (torch.Tensor, optional): graph index of every node ``(N,)``,
            any order. Attention never crosses graphs and no graph is padded
            to the largest one. (default: :obj:`None`, one graph)
        kernel (str, optional): ``"simple"`` (DIFFormer-s, linear in N) or
            ``"sigmoid"`` (DIFFormer-a, quadratic in N). (default: ``"simple"``)
        qk_norm (str, optional): ``"global"`` divides q and k by their
            Frobenius norm over the graph's nodes and all heads (DIFFormer-s),
            ``"row"`` normalises each node's vector per head, ``"none"`` leaves
            them (``sigmoid`` only: the simple kernel needs
            :math:`|\tilde{q} \cdot \tilde{k}| \le 1`); :obj:`None` takes the
            kernel's own, ``"global"`` for ``simple`` and ``"none"`` for
            ``sigmoid`` (:data:`DEFAULT_QK_NORM`). (default: :obj:`None`)
        max_block_bytes (int, optional): working-memory budget of one row
            block of the ``sigmoid`` kernel. (default: 256 MiB)

    Shapes:
        - **input:** q, k ``(N, H, D)``, v ``(N, H, Dv)`` or ``(N, 1, Dv)``,
          batch ``(N,)``
        - **output:** ``(N, H, Dv)``
    """
    qk_norm = resolve_qk_norm(kernel, qk_norm)
    _check_inputs(q, k, v, batch)
    n, h, dv = q.shape[0], q.shape[1], v.shape[-1]
    if n == 0:
        return v.new_zeros((0, h, dv))
    v = v.expand(n, h, dv)
    if qk_norm == "row":  # per node: before the padding rows come in
        q, k = normalize_qk(q, k, qk_norm)
    if batch is None:
        lay = Buckets.whole(n, q.device)
    else:  # the quadratic kernel's padding costs twice: finer buckets
        lay = Buckets(batch, per_octave=SIGMOID_BUCKETS_PER_OCTAVE if kernel == "sigmoid" else None)
    padded = (lay.pad(t.flatten(1)) for t in (q, k, v))
    outs = []
    for g0, g1, qb, kb, vb in lay.views(*padded):
        if qb.shape[1] == 0:  # graph indices without nodes
            continue
        qb, kb, vb = (t.unflatten(-1, (h, -1)) for t in (qb, kb, vb))  # (G, S, H, *)
        if kernel == "simple":
            ob = _simple_block(qb, kb, vb, lay.counts[g0:g1], qk_norm)
        else:
            if qk_norm == "global":  # per graph: over its (S, H, D) block
                qb, kb = normalize_qk(qb, kb, qk_norm)
            ob = _sigmoid_block(qb, kb, vb, lay.key_mask(g0, g1, qb.shape[1]), max_block_bytes)
        outs.append(ob.flatten(2).flatten(0, 1))
    return lay.unpad(torch.cat(outs)).view(n, h, dv)
