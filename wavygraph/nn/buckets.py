"""The batching layout of the all-pair attention: graphs padded to bucket sizes.

Attention never crosses graphs, so every kernel needs per-graph sums (``K^T V``,
Gram matrices, column sums) and per-node products with its graph's matrix.
:class:`Buckets` lays a batch out so that both are batched matrix products
without a Python loop over graphs and without padding every graph to the
largest one: each graph is padded to a *bucket size* (at most 1/8 more rows on
CPU, the next power of two on accelerators) and graphs of equal padded size
form one contiguous ``(graphs, size, F)`` block. One graph alone is the
trivial layout (:meth:`Buckets.whole`): no padding, no copy, no host sync.

It is the only layout in the package: the plain kernels of
:mod:`wavygraph.nn.functional` and the folded fast path of
:mod:`wavygraph.nn.folded` both run on it.
"""
from __future__ import annotations

from typing import Iterator

import torch
from torch import Tensor

#: Bucket sizes per doubling of the graph size, by device type; other devices
#: take :data:`DEFAULT_BUCKETS_PER_OCTAVE`. On CPU fine buckets (little
#: padding: the work is the rows); on accelerators coarse ones (powers of
#: two): each bucket costs several kernel launches, and padded rows are
#: nearly free there.
BUCKETS_PER_OCTAVE = {"cpu": 8}
DEFAULT_BUCKETS_PER_OCTAVE = 1


def bucket_rows(counts: Tensor, per_octave: int = 8) -> Tensor:
    """Padded rows of every graph: its node count rounded up to a multiple of
    ``max(8, 2^(floor(log2 n) - log2(per_octave)))``, so at most
    ``1/per_octave`` (and fewer than 8 rows) of padding per graph and about
    ``per_octave`` sizes per octave. ``per_octave`` is a power of two."""
    shift = int(per_octave).bit_length() - 1
    if per_octave < 1 or 1 << shift != per_octave:
        raise ValueError(f"per_octave must be a power of two, got {per_octave!r}")
    c = counts.clamp_min(1)
    gran = torch.exp2((torch.log2(c.double()).floor() - shift).clamp_min(3)).long()  # (B,)
    return torch.where(counts > 0, (counts + gran - 1) // gran * gran, torch.zeros_like(counts))


def _rank_in_graph(batch: Tensor, counts: Tensor) -> Tensor:
    """The rank ``(N,)`` of every node inside its graph, in the given order.
    Skips the sort when ``batch`` is already sorted, as PyG's are."""
    n = batch.numel()
    ptr = torch.cumsum(counts, 0) - counts  # (B,) first node of every graph
    arange = torch.arange(n, device=batch.device)
    if n < 2 or bool((batch[1:] >= batch[:-1]).all()):
        return arange - ptr[batch]
    perm = torch.argsort(batch, stable=True)
    inverse = torch.empty_like(perm).scatter_(0, perm, arange)  # position of every node in sorted order
    return inverse - ptr[batch]


class Buckets:
    r"""Nodes of a batch of graphs padded to bucket sizes, grouped by size.

    Every graph gets :func:`bucket_rows` rows (zero-filled past its nodes);
    graphs of equal padded size ``s`` form one *bucket*, a contiguous
    ``(graphs, s, F)`` block of the padded ``(num_rows, F)`` buffer. Graphs
    are numbered by *slot* (sorted by padded size); ``slot_graph`` maps slots
    back to graph indices and per-slot tensors (``counts``) follow slot order.
    Building it reads the bucket sizes once (one host sync).

    Args:
        batch (torch.Tensor): graph index of every node ``(N,)``, any order.
        num_graphs (int, optional): number of graphs ``B``; :obj:`None` takes
            ``batch.max() + 1``. (default: :obj:`None`)
        per_octave (int, optional): bucket sizes per doubling of the graph
            size; :obj:`None` takes :data:`BUCKETS_PER_OCTAVE` of the device.
            (default: :obj:`None`)
    """

    def __init__(self, batch: Tensor, num_graphs: int | None = None, per_octave: int | None = None):
        batch = batch.long()
        device = batch.device
        if num_graphs is None:
            num_graphs = int(batch.max()) + 1 if batch.numel() > 0 else 0
        counts = torch.bincount(batch, minlength=num_graphs)
        if per_octave is None:
            per_octave = BUCKETS_PER_OCTAVE.get(device.type, DEFAULT_BUCKETS_PER_OCTAVE)
        rows = bucket_rows(counts, per_octave)  # (B,)
        slot_graph = torch.argsort(rows, stable=True)  # (B,) graph of every slot
        slot = torch.empty_like(slot_graph).scatter_(0, slot_graph, torch.arange(num_graphs, device=device))
        rows_s = rows[slot_graph]  # (B,) padded rows per slot, ascending
        start_s = torch.cumsum(rows_s, 0) - rows_s  # (B,) first padded row of every slot
        self.dest = start_s[slot[batch]] + _rank_in_graph(batch, counts)  # (N,) padded row of every node
        sizes, per = torch.unique_consecutive(rows_s, return_counts=True)
        self.buckets = []  # (first slot, end slot, first row, end row, rows per graph)
        g0 = r0 = 0
        for size, num in zip(sizes.tolist(), per.tolist()):  # the one host sync
            self.buckets.append((g0, g0 + num, r0, r0 + num * size, size))
            g0, r0 = g0 + num, r0 + num * size
        self.num_rows = r0
        self.num_graphs = num_graphs
        self.slot_graph = slot_graph
        self.counts = counts[slot_graph]  # (B,) node count per slot
        self.rows_per_slot = rows_s

    @classmethod
    def whole(cls, num_nodes: int, device: torch.device | str | None = None) -> "Buckets":
        """One graph of ``num_nodes`` nodes: no padding, :meth:`pad` and
        :meth:`unpad` return their input, no host sync."""
        lay = cls.__new__(cls)
        lay.dest = None
        lay.buckets = [(0, 1, 0, num_nodes, num_nodes)]
        lay.num_rows = num_nodes
        lay.num_graphs = 1
        lay.slot_graph = torch.zeros(1, dtype=torch.long, device=device)
        lay.counts = torch.full((1,), num_nodes, dtype=torch.long, device=device)
        lay.rows_per_slot = lay.counts
        return lay

    def pad(self, x: Tensor) -> Tensor:
        """``(N, F)`` -> padded ``(num_rows, F)`` (zero rows), differentiable."""
        return x if self.dest is None else _Pad.apply(x, self.dest, self.num_rows)

    def unpad(self, xp: Tensor) -> Tensor:
        """Padded ``(num_rows, F)`` -> ``(N, F)``, differentiable."""
        return xp if self.dest is None else _Pad.apply(xp, self.dest, None)

    def views(self, *tensors: Tensor) -> Iterator[tuple]:
        """``(first slot, end slot, (graphs, rows, F) view of each padded
        tensor...)`` per bucket."""
        # one split (not a slice per bucket): its backward is one concatenation
        lengths = [r1 - r0 for _, _, r0, r1, _ in self.buckets]
        parts = [t.split(lengths) for t in tensors]
        for i, (g0, g1, _, _, size) in enumerate(self.buckets):
            yield (g0, g1) + tuple(p[i].view(g1 - g0, size, p[i].shape[-1]) for p in parts)

    def tiles(self, block_rows: int) -> Iterator[tuple[int, int, int, int]]:
        """Blocks of at most about ``block_rows`` padded rows that never split
        a bucket's graphs unevenly: ``(first slot, end slot, first row, rows
        per graph)``; the block's rows are ``(end - first) * rows per graph``
        consecutive padded rows. Graphs larger than ``block_rows`` are cut
        into row blocks, smaller ones grouped."""
        for g0, g1, r0, _, size in self.buckets:
            if size == 0:
                continue
            if size > block_rows:
                for g in range(g0, g1):
                    base = r0 + (g - g0) * size
                    for a in range(0, size, block_rows):
                        yield g, g + 1, base + a, min(size - a, block_rows)
            else:
                per = max(1, block_rows // size)
                for ga in range(g0, g1, per):
                    yield ga, min(g1, ga + per), r0 + (ga - g0) * size, size

    def key_mask(self, g0: int, g1: int, size: int) -> Tensor | None:
        """``(graphs, size)`` True on the real (not padding) rows of slots
        ``g0..g1``; :obj:`None` when no row of them is padding."""
        if self.dest is None:
            return None
        return torch.arange(size, device=self.counts.device) < self.counts[g0:g1].unsqueeze(1)


class _Pad(torch.autograd.Function):
    """Row scatter into a zero buffer of ``num_rows`` rows (``num_rows`` given:
    pad) or row gather (``num_rows`` None: unpad); each one's backward is the
    other, applied through this function again (so it is differentiable
    twice). The mode comes from ``num_rows`` alone, never from the shapes:
    without padding rows a pad and a gather have the same shapes but are
    different permutations."""

    @staticmethod
    def forward(ctx, x: Tensor, dest: Tensor, num_rows: int | None) -> Tensor:
        ctx.save_for_backward(dest)
        ctx.gather = num_rows is None
        ctx.in_rows = x.shape[0]
        if num_rows is None:
            return x.index_select(0, dest)
        return x.new_zeros((num_rows, x.shape[1])).index_copy_(0, dest, x)

    @staticmethod
    def backward(ctx, g: Tensor):
        (dest,) = ctx.saved_tensors
        if ctx.gather:  # backward of the gather: scatter into the input's rows
            return _Pad.apply(g, dest, ctx.in_rows), None, None
        return _Pad.apply(g, dest, None), None, None  # backward of the scatter: gather
