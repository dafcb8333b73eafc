"""Batched small graphs: no-padding batching against the padded layout and a
per-graph dense reference."""
import pytest
import torch
from torch_geometric.utils import to_dense_batch

from wavygraph.nn import DIFFormerConv
from wavygraph.nn import buckets, folded
from wavygraph.nn.functional import all_pair_attention
from wavygraph.nn.buckets import Buckets, bucket_rows


def padded_simple(q, k, v, batch):
    """The padded approach: to_dense_batch, masked attention, back to nodes."""
    qd, mask = to_dense_batch(q.flatten(1), batch)  # (B, Nmax, H D)
    kd, _ = to_dense_batch(k.flatten(1), batch)
    vd, _ = to_dense_batch(v.flatten(1), batch)
    b, m = mask.shape
    h = q.shape[1]
    qd, kd, vd = qd.view(b, m, h, -1), kd.view(b, m, h, -1), vd.view(b, m, h, -1)
    qd = qd / qd.flatten(1).norm(dim=1).view(b, 1, 1, 1)
    kd = kd / kd.flatten(1).norm(dim=1).view(b, 1, 1, 1)
    w = 1.0 + torch.einsum("bihd,bjhd->bhij", qd, kd) * mask[:, None, None, :]
    w = w * mask[:, None, None, :]
    out = torch.einsum("bhij,bjhe->bihe", w / w.sum(-1, keepdim=True), vd)
    return out[mask]


def graphs(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return batch, g


@pytest.mark.parametrize("heads", [1, 3])
def test_batched_equals_padded_and_dense(heads):
    sizes = [1, 5, 31, 32, 33, 70, 2]
    batch, g = graphs(sizes)
    n = batch.numel()
    q = torch.randn(n, heads, 4, generator=g, dtype=torch.float64)
    k = torch.randn(n, heads, 4, generator=g, dtype=torch.float64)
    v = torch.randn(n, heads, 3, generator=g, dtype=torch.float64)
    out = all_pair_attention(q, k, v, batch=batch)
    torch.testing.assert_close(out, padded_simple(q, k, v, batch), rtol=0, atol=1e-12)
    start = 0
    for s in sizes:  # per-graph dense reference
        sl = slice(start, start + s)
        qs, ks = q[sl] / q[sl].norm(), k[sl] / k[sl].norm()
        w = 1.0 + torch.einsum("ihd,jhd->hij", qs, ks)
        ref = torch.einsum("hij,jhe->ihe", w / w.sum(-1, keepdim=True), v[sl])
        torch.testing.assert_close(out[sl], ref, rtol=0, atol=1e-12)
        start += s


def test_conv_batched_equals_each_graph_and_gradients():
    torch.manual_seed(0)
    sizes = [3, 40, 1, 65, 17]
    batch, _ = graphs(sizes)
    perm = torch.randperm(batch.numel())
    batch = batch[perm]  # nodes in any order
    conv = DIFFormerConv(6, heads=2, use_graph=False).double()
    x = torch.randn(batch.numel(), 6, dtype=torch.float64, requires_grad=True)
    out = conv(x, batch=batch)
    for b in range(len(sizes)):
        idx = (batch == b).nonzero().view(-1)
        torch.testing.assert_close(out[idx], conv(x[idx]), rtol=0, atol=1e-12)
    # folded fast path against the q/k/v path of the functional API
    q, k, v = conv.qkv(x).view(-1, 3, 2, 6).unbind(1)
    ref = all_pair_attention(q, k, v, batch=batch).mean(1)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    gx, = torch.autograd.grad(out.square().sum(), x)
    grx, = torch.autograd.grad(ref.square().sum(), x)
    torch.testing.assert_close(gx, grx, rtol=0, atol=1e-10)


def test_gradcheck_folded_batched():
    torch.manual_seed(0)
    conv = DIFFormerConv(3, heads=2, use_graph=False).double()
    batch = torch.tensor([0, 1, 0, 2, 2, 1, 0])
    x = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: conv(t, batch=batch), (x,))
    assert torch.autograd.gradcheck(lambda t: conv(t), (x,))


def test_buckets_layout_pad_views_tiles():
    batch = torch.tensor([2, 0, 2, 2, 0, 3, 2, 2, 2, 2, 2, 2, 2])  # graph 1 empty, graph 2: 10 nodes
    lay = Buckets(batch, per_octave=1)  # padded rows: 8, 0, 16, 8
    assert lay.slot_graph.tolist() == [1, 0, 3, 2] and lay.counts.tolist() == [0, 2, 1, 10]
    assert [b[4] for b in lay.buckets] == [0, 8, 16] and lay.num_rows == 32
    x = torch.randn(13, 3, dtype=torch.float64)
    xp = lay.pad(x)
    torch.testing.assert_close(lay.unpad(xp), x, rtol=0, atol=0)
    assert xp.abs().sum(1).ne(0).sum() == 13  # the rest are zero rows
    for g0, g1, view in lay.views(xp):  # every graph's rows, in the given order, then zeros
        for slot in range(g0, g1):
            rows = x[batch == lay.slot_graph[slot]]
            torch.testing.assert_close(view[slot - g0, : rows.shape[0]], rows, rtol=0, atol=0)
            mask = lay.key_mask(g0, g1, view.shape[1])
            assert mask[slot - g0].sum() == rows.shape[0]
    # tiles: every padded row of a non-empty graph exactly once
    for block in (1, 5, 8, 100):
        seen = torch.zeros(lay.num_rows, dtype=torch.long)
        for g0, g1, r0, rows in lay.tiles(block):
            assert (g1 - g0 == 1 or rows <= block) and rows >= 1
            seen[r0 : r0 + (g1 - g0) * rows] += 1
        assert seen.tolist() == [1] * 32
    whole = Buckets.whole(13)
    assert whole.pad(x) is x and whole.unpad(x) is x and whole.key_mask(0, 1, 13) is None


@pytest.mark.parametrize("block_rows", [16, 8192])
def test_folded_row_blocks_equal_reference(block_rows, monkeypatch):
    """The folded path in small row blocks (big graphs cut, small ones
    grouped) against the functional reference, outputs and gradients."""
    monkeypatch.setattr(folded, "BLOCK_ROWS", block_rows)
    torch.manual_seed(0)
    sizes = [3, 40, 1, 65, 17, 9, 9]
    batch, _ = graphs(sizes)
    conv = DIFFormerConv(5, heads=3, use_graph=False).double()
    x = torch.randn(batch.numel(), 5, dtype=torch.float64, requires_grad=True)
    for b in (batch, None):
        out = conv(x, batch=b)
        ref = all_pair_attention(*conv.project(x), batch=b).mean(1)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
        g1 = torch.autograd.grad(out.square().sum(), [x, conv.qkv.weight, conv.qkv.bias])
        g2 = torch.autograd.grad(ref.square().sum(), [x, conv.qkv.weight, conv.qkv.bias])
        for a, r in zip(g1, g2):
            torch.testing.assert_close(a, r, rtol=0, atol=1e-10)


@pytest.mark.parametrize("per_octave", [8, 1])  # CPU's fine buckets; accelerators' powers of two
def test_buckets_many_sizes_unsorted_and_empty_graph(per_octave, monkeypatch):
    """Graph sizes over many buckets, nodes in any order, a graph index with
    no nodes: outputs and gradients equal those of each graph alone."""
    monkeypatch.setitem(buckets.BUCKETS_PER_OCTAVE, "cpu", per_octave)
    torch.manual_seed(0)
    sizes = [1, 7, 8, 9, 64, 65, 130, 257, 3, 40]
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    batch = torch.where(batch >= 4, batch + 1, batch)  # graph 4 has no nodes
    batch = batch[torch.randperm(batch.numel())]
    n = torch.tensor(sizes)
    rows = bucket_rows(n, per_octave)
    assert bool((rows >= n).all()) and bool((rows - n <= n // per_octave + 7).all())
    if per_octave == 1:
        assert rows.tolist() == [8, 8, 8, 16, 64, 128, 256, 512, 8, 64]
    lay = Buckets(batch)
    assert lay.num_graphs == len(sizes) + 1 and len(lay.buckets) == len(set(rows.tolist())) + 1  # + the empty graph
    conv = DIFFormerConv(5, heads=2, use_graph=False).double()
    x = torch.randn(batch.numel(), 5, dtype=torch.float64, requires_grad=True)
    out = conv(x, batch=batch)
    gx, = torch.autograd.grad(out.square().sum(), x)
    for b in batch.unique().tolist():
        idx = (batch == b).nonzero().view(-1)
        xb = x.detach()[idx].requires_grad_()
        ob = conv(xb)
        torch.testing.assert_close(out[idx], ob, rtol=0, atol=1e-12)
        gb, = torch.autograd.grad(ob.square().sum(), xb)
        torch.testing.assert_close(gx[idx], gb, rtol=0, atol=1e-10)
