import pytest
import torch

from wavygraph.nn import DIFFormerConv, gcn_adjacency


def dense_gcn(edge_index, n):
    """D^-1/2 (A + I) D^-1/2 with explicit loops; row = target."""
    a = torch.eye(n, dtype=torch.float64)
    for s, t in edge_index.T.tolist():
        a[t, s] += 1.0
    deg = a.sum(dim=1)
    out = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            out[i, j] = a[i, j] / (deg[i] * deg[j]).sqrt()
    return out


def dense_conv(conv, x, edge_index):
    """DIFFormer's layer written out: per head dense N x N weights, the GCN
    branch on that head's values, heads averaged. Without value projection
    every head's value is x itself (DIFFormer's use_weight=False)."""
    n, h, c = x.shape[0], conv.heads, conv.channels
    if conv.value_proj:
        q, k, v = conv.qkv(x).view(n, 3, h, c).unbind(1)
    else:
        q, k = conv.qkv(x).view(n, 2, h, c).unbind(1)
        v = torch.stack([x] * h, dim=1)
    heads = []
    for i in range(h):
        qi, ki = q[:, i], k[:, i]
        if conv.qk_norm == "global":
            qi, ki = qi / q.norm(), ki / k.norm()
        elif conv.qk_norm == "row":
            qi, ki = qi / qi.norm(dim=1, keepdim=True), ki / ki.norm(dim=1, keepdim=True)
        w = 1.0 + qi @ ki.T if conv.kernel == "simple" else torch.sigmoid(qi @ ki.T)
        glob = (w / w.sum(1, keepdim=True)) @ v[:, i]
        if not conv.use_graph:
            heads.append(glob)
            continue
        loc = dense_gcn(edge_index, n) @ v[:, i]
        gw = conv.graph_weight
        heads.append(glob + loc if gw is None else (1 - gw) * glob + gw * loc)
    return torch.stack(heads).mean(0)


GRAPH = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 0], [1, 0, 2, 1, 4, 3, 5, 4, 5]])


@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
@pytest.mark.parametrize("graph_weight", [None, 0.8, 1.0])
@pytest.mark.parametrize("qk_norm", ["global", "row", None])
@pytest.mark.parametrize("value_proj", [True, False])
def test_conv_matches_dense(heads, kernel, graph_weight, qk_norm, value_proj):
    torch.manual_seed(0)
    conv = DIFFormerConv(
        4, heads=heads, kernel=kernel, qk_norm=qk_norm, graph_weight=graph_weight, value_proj=value_proj
    ).double()
    x = torch.randn(6, 4, dtype=torch.float64)
    out = conv(x, GRAPH)
    torch.testing.assert_close(out, dense_conv(conv, x, GRAPH), rtol=0, atol=1e-10)
    # a prebuilt adjacency gives the same
    torch.testing.assert_close(conv(x, gcn_adjacency(GRAPH, 6, torch.float64)), out, rtol=0, atol=1e-12)


def test_conv_without_graph():
    torch.manual_seed(0)
    conv = DIFFormerConv(4, heads=3, use_graph=False).double()
    x = torch.randn(6, 4, dtype=torch.float64)
    torch.testing.assert_close(conv(x), dense_conv(conv, x, GRAPH), rtol=0, atol=1e-10)


@pytest.mark.parametrize("value_proj", [True, False])
def test_conv_graph_weight_one_skips_the_attention(value_proj):
    """graph_weight=1: the local branch alone (the dense reference's (1 - 1) * Attn + A V); the
    attention is not computed, so the q/k rows of the projection get a zero gradient."""
    torch.manual_seed(0)
    conv = DIFFormerConv(4, heads=2, graph_weight=1.0, value_proj=value_proj).double()
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    out = conv(x, GRAPH)
    torch.testing.assert_close(out, dense_conv(conv, x, GRAPH), rtol=0, atol=1e-12)
    out.sum().backward()
    grad = conv.qkv.weight.grad
    assert grad is None or grad[: 2 * 2 * 4].abs().max() == 0


def test_conv_batched_equals_separate():
    torch.manual_seed(0)
    conv = DIFFormerConv(4, heads=2).double()
    x = torch.randn(12, 4, dtype=torch.float64)
    # two copies of GRAPH; second shifted by 6
    ei = torch.cat([GRAPH, GRAPH + 6], dim=1)
    batch = torch.tensor([0] * 6 + [1] * 6)
    out = conv(x, ei, batch)
    torch.testing.assert_close(out[:6], conv(x[:6], GRAPH), rtol=0, atol=1e-12)
    torch.testing.assert_close(out[6:], conv(x[6:], GRAPH), rtol=0, atol=1e-12)


def test_conv_gradients_and_errors():
    conv = DIFFormerConv(8, heads=2)
    x = torch.randn(6, 8, requires_grad=True)
    conv(x, GRAPH).sum().backward()
    assert torch.isfinite(x.grad).all() and conv.qkv.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="needs edge_index"):
        conv(torch.randn(6, 8))
    with pytest.raises(ValueError, match=r"x must have shape \(N, 8\)"):
        conv(torch.randn(6, 5), GRAPH)
    with pytest.raises(ValueError, match="unknown kernel"):
        DIFFormerConv(8, kernel="softmax")
    with pytest.raises(ValueError, match="graph_weight"):
        DIFFormerConv(8, graph_weight=1.5)


def test_conv_repr():
    assert repr(DIFFormerConv(64)) == (
        "DIFFormerConv(64, heads=1, kernel='simple', qk_norm='global', use_graph=True, graph_weight=None, "
        "value_proj=True, local='gcn')"
    )
    conv = DIFFormerConv(16, heads=4, kernel="sigmoid", use_graph=False, graph_weight=0.5, value_proj=False)
    assert repr(conv) == (
        "DIFFormerConv(16, heads=4, kernel='sigmoid', qk_norm='none', use_graph=False, graph_weight=0.5, "
        "value_proj=False, local='gcn')"
    )
    assert repr(DIFFormerConv(8, local="sep")).endswith("value_proj=True, local='sep')")


def test_kernel_default_qk_norm():
    assert DIFFormerConv(8).qk_norm == "global"
    assert DIFFormerConv(8, kernel="sigmoid").qk_norm == "none"
    assert DIFFormerConv(8, kernel="sigmoid", qk_norm="global").qk_norm == "global"
    with pytest.raises(ValueError, match="kernel='simple' needs normalised q and k"):
        DIFFormerConv(8, qk_norm="none")
    with pytest.raises(ValueError, match="unknown qk_norm 'frobenius'.*'global', 'row', 'none'"):
        DIFFormerConv(8, qk_norm="frobenius")


def difformer_use_weight_off(wq, bq, wk, bk, x, adj, heads, kernel):
    """DIFFormer-s/-a with use_weight=False as its code computes it: value =
    x of shape (N, 1, C) broadcast over the heads in the attention and in the
    GCN branch (one propagation of x, added to every head), heads averaged."""
    n, c = x.shape
    q = (x @ wq.T + bq).view(n, heads, -1)
    k = (x @ wk.T + bk).view(n, heads, -1)
    if kernel == "simple":
        q, k = q / q.norm(), k / k.norm()
    out = torch.zeros(n, c, dtype=x.dtype)
    for h in range(heads):
        s = q[:, h] @ k[:, h].T
        w = 1.0 + s if kernel == "simple" else torch.sigmoid(s)
        out += (w / w.sum(1, keepdim=True)) @ x + adj @ x
    return out / heads


@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
@pytest.mark.parametrize("heads", [1, 3])
def test_without_value_projection_matches_difformer(kernel, heads):
    torch.manual_seed(1)
    conv = DIFFormerConv(5, heads=heads, kernel=kernel, value_proj=False).double()
    assert conv.qkv.weight.shape == (2 * heads * 5, 5) and conv.out is None
    x = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    w, b = conv.qkv.weight, conv.qkv.bias
    hd = heads * 5
    ref = difformer_use_weight_off(w[:hd], b[:hd], w[hd:], b[hd:], x, dense_gcn(GRAPH, 6), heads, kernel)
    out = conv(x, GRAPH)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-10)
    g_out = torch.autograd.grad(out.square().sum(), [x, w])
    g_ref = torch.autograd.grad(ref.square().sum(), [x, w])
    for a, r in zip(g_out, g_ref):
        torch.testing.assert_close(a, r, rtol=0, atol=1e-9)
    # head_channels sets only the q/k size: the values stay x
    narrow = DIFFormerConv(5, heads=heads, kernel=kernel, value_proj=False, head_channels=2).double()
    assert narrow(x, GRAPH).shape == (6, 5) and narrow.out is None


def test_gradcheck_without_value_projection():
    torch.manual_seed(0)
    batch = torch.tensor([0, 1, 0, 1, 1, 0])
    conv = DIFFormerConv(3, heads=2, value_proj=False, use_graph=False).double()
    x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: conv(t, batch=batch), (x,))
    assert torch.autograd.gradcheck(lambda t: conv(t), (x,))
