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
    n, h, c = x.shape[0], conv.heads, conv.channels
    q, k, v = conv.qkv(x).view(n, 3, h, c).unbind(1)
    heads = []
    for i in range(h):
        qi, ki = q[:, i], k[:, i]
        if conv.qk_norm == "global":
            qi, ki = qi / q.norm(), ki / k.norm()
        else:
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
@pytest.mark.parametrize("graph_weight", [None, 0.8])
@pytest.mark.parametrize("qk_norm", ["global", "row"])
def test_conv_matches_dense(heads, kernel, graph_weight, qk_norm):
    torch.manual_seed(0)
    conv = DIFFormerConv(4, heads=heads, kernel=kernel, qk_norm=qk_norm, graph_weight=graph_weight).double()
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
        "DIFFormerConv(64, heads=1, kernel='simple', qk_norm='global', use_graph=True, graph_weight=None)"
    )
    assert repr(DIFFormerConv(16, heads=4, kernel="sigmoid", use_graph=False, graph_weight=0.5)) == (
        "DIFFormerConv(16, heads=4, kernel='sigmoid', qk_norm='global', use_graph=False, graph_weight=0.5)"
    )
