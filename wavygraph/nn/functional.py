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


import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

KERNELS = ("simple", "sigmoid")
QK_NORMS = ("global", "row", "none")

#: Working-memory budget of one row block of the ``sigmoid`` kernel.
DEFAULT_BLOCK_BYTES = 256 * 2**20


def _check_choice(name: str, value: str, choices) -> None:
    if value not in choices:
        raise ValueError(
            f"unknown {name} {value!r}; choose one of {', '.join(map(repr, choices))}"
        )


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
    if batch is not None:
        if not isinstance(batch, Tensor) or batch.dim() != 1 or batch.numel() != q.shape[0]:
            raise ValueError(
                f"batch must be a 1-D tensor with one graph index per node ({q.shape[0]}), "
                f"got {tuple(batch.shape) if isinstance(batch, Tensor) else type(batch).__name__}"
            )
        if batch.dtype.is_floating_point or batch.dtype == torch.bool or batch.is_complex():
            raise ValueError(f"batch must hold integer graph indices, got dtype {batch.dtype}")
        if batch.numel() > 0 and int(batch.min()) < 0:
            raise ValueError("batch holds a negative graph index; graph indices start at 0")


def _normalize(q: Tensor, k: Tensor, qk_norm: str) -> tuple[Tensor, Tensor]:
    """Scale q and k of one graph: ``global`` by the Frobenius norm over all
    nodes and heads, ``row`` per node and head, ``none`` untouched."""
    if qk_norm == "global":
        tiny = torch.finfo(q.dtype).tiny
        q = q / torch.linalg.vector_norm(q).clamp_min(tiny)
        k = k / torch.linalg.vector_norm(k).clamp_min(tiny)
    elif qk_norm == "row":
        q = F.normalize(q, dim=-1)
        k = F.normalize(k, dim=-1)
    return q, k


def _simple_single(q: Tensor, k: Tensor, v: Tensor, qk_norm: str) -> Tensor:
    n = q.shape[0]
    q, k = _normalize(q, k, qk_norm)
    kv = torch.einsum("nhd,nhe->hde", k, v)  # (H, D, Dv)
    num = v.sum(0) + torch.einsum("nhd,hde->nhe", q, kv)  # (N, H, Dv)
    den = n + torch.einsum("nhd,hd->nh", q, k.sum(0))  # (N, H)
    # Every weight 1 + q~.k~ lies in [0, 2] (|q~|, |k~| <= 1), so the true
    # denominator is >= 0 and is 0 only if every weight of the row is 0, in
    # which case the numerator is 0 as well. The clamp keeps that corner
    # (and rounding just below 0) finite without touching ordinary rows,
    # whose denominator is close to N.
    den = den.clamp_min(n * torch.finfo(den.dtype).eps)
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
    _check_choice("kernel", kernel, KERNELS)
    _check_choice("qk_norm", qk_norm, QK_NORMS)
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
