"""wavygraph.nn.featscale.FeatScale against a per-graph float64 reference."""
import torch

from wavygraph.nn.featscale import FeatScale


def reference(x, w_dc, w_hc, batch=None):
    """w_dc * mean + w_hc * (x - mean), the mean over each graph's nodes."""
    batch = torch.zeros(x.shape[0], dtype=torch.long) if batch is None else batch
    out = torch.empty_like(x)
    for g in batch.unique().tolist():
        rows = (batch == g).nonzero().flatten()
        mean = x[rows].sum(0) / len(rows)
        for i in rows.tolist():
            out[i] = w_dc * mean + w_hc * (x[i] - mean)
    return out


def _random_weights(layer, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.weight_dc.copy_(torch.rand(layer.channels, generator=g, dtype=torch.float64) + 0.5)
        layer.weight_hc.copy_(torch.rand(layer.channels, generator=g, dtype=torch.float64) * 3)


def test_starts_as_the_identity():
    layer = FeatScale(6)
    x = torch.randn(10, 6)
    torch.testing.assert_close(layer(x), x)
    torch.testing.assert_close(layer(x, torch.tensor([0] * 4 + [1] * 6)), x)
    assert repr(layer) == "FeatScale(6)"


def test_one_graph_matches_reference():
    layer = FeatScale(5).double()
    _random_weights(layer)
    x = torch.randn(8, 5, dtype=torch.float64)
    torch.testing.assert_close(layer(x), reference(x, layer.weight_dc, layer.weight_hc), rtol=1e-12, atol=1e-12)


def test_batched_graphs_use_their_own_mean():
    layer = FeatScale(4).double()
    _random_weights(layer, seed=1)
    x = torch.randn(11, 4, dtype=torch.float64)
    batch = torch.tensor([2, 0, 0, 2, 2, 0, 3, 3, 3, 3, 0])  # any order, graph 1 empty
    out = layer(x, batch)
    torch.testing.assert_close(out, reference(x, layer.weight_dc, layer.weight_hc, batch), rtol=1e-12, atol=1e-12)
    # each graph alone gives the same rows
    for g in (0, 2, 3):
        rows = batch == g
        torch.testing.assert_close(out[rows], layer(x[rows]), rtol=1e-12, atol=1e-12)


def test_high_frequency_weight_scales_deviation_only():
    layer = FeatScale(3).double()
    with torch.no_grad():
        layer.weight_hc.fill_(2.0)
    x = torch.randn(6, 3, dtype=torch.float64)
    out = layer(x)
    torch.testing.assert_close(out.mean(0), x.mean(0), rtol=1e-12, atol=1e-12)  # the DC part unchanged
    torch.testing.assert_close(out - out.mean(0), 2 * (x - x.mean(0)), rtol=1e-12, atol=1e-12)


def test_gradients_of_both_weights():
    layer = FeatScale(3).double()
    _random_weights(layer, seed=2)
    x = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    batch = torch.tensor([0, 0, 1, 1, 1, 0, 1])
    layer(x, batch).pow(2).sum().backward()
    wdc = layer.weight_dc.detach().requires_grad_()
    whc = layer.weight_hc.detach().requires_grad_()
    xr = x.detach().requires_grad_()
    reference(xr, wdc, whc, batch).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.weight_dc.grad, wdc.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.weight_hc.grad, whc.grad, rtol=1e-10, atol=1e-12)
