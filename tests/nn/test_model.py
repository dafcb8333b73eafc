import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from wavygraph.nn import WavyDIFFormer

GRAPH = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 0, 6], [1, 0, 2, 1, 4, 3, 5, 4, 5, 0]])


def reference_difformer(model, x, edge_index):
    """DIFFormer's forward written out: x = LN(0.5 conv(x) + 0.5 x)."""
    h = F.relu(model.input_norm(model.input(x)))
    hidden = [h]
    for conv, norm in zip(model.convs, model.norms):
        h = F.layer_norm(0.5 * conv(h, edge_index) + 0.5 * h, (h.shape[1],), norm.weight, norm.bias, norm.eps)
        hidden.append(h)
    return model.output(h), hidden


def test_diffusion_is_difformer():
    torch.manual_seed(0)
    model = WavyDIFFormer(5, 8, 3, num_layers=4).double().eval()
    x = torch.randn(7, 5, dtype=torch.float64)
    out, hidden = model(x, GRAPH, return_hidden=True)
    ref, ref_hidden = reference_difformer(model, x, GRAPH)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    assert len(hidden) == 5
    for a, b in zip(hidden, ref_hidden):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_wave_model_matches_explicit_loop():
    torch.manual_seed(0)
    tau = 0.3
    model = WavyDIFFormer(5, 8, 3, num_layers=3, residual="wave", tau=tau, ffn=True).double().eval()
    x = torch.randn(7, 5, dtype=torch.float64)
    out = model(x, GRAPH)
    h = F.relu(model.input_norm(model.input(x)))
    y = torch.zeros_like(h)
    for i in range(3):
        f = model.convs[i](h, GRAPH) - h
        y = y + tau * f
        h = h + tau * y
        ln = model.norms[i]
        sigma = (h.var(dim=1, unbiased=False, keepdim=True) + ln.eps).sqrt()
        h, y = ln.weight * (h - h.mean(1, keepdim=True)) / sigma + ln.bias, ln.weight * y / sigma
        ffn = model.ffns[i]
        pre = ffn.lin1(h)
        gelu_d = 0.5 * (1 + torch.erf(pre / 2**0.5)) + pre * torch.exp(-pre**2 / 2) / (2 * torch.pi) ** 0.5
        h, y = h + ffn.lin2(F.gelu(pre)), y + (gelu_d * (y @ ffn.lin1.weight.T)) @ ffn.lin2.weight.T
        ln = model.ffn_norms[i]
        sigma = (h.var(dim=1, unbiased=False, keepdim=True) + ln.eps).sqrt()
        h, y = ln.weight * (h - h.mean(1, keepdim=True)) / sigma + ln.bias, ln.weight * y / sigma
    torch.testing.assert_close(out, model.output(h), rtol=0, atol=1e-12)


def test_light_wave_momentum_norm_state():
    torch.manual_seed(0)
    model = WavyDIFFormer(5, 8, 3, num_layers=3, residual="light_wave", momentum_norm="state").double().eval()
    x = torch.randn(7, 5, dtype=torch.float64)
    out = model(x, GRAPH)
    h = F.relu(model.input_norm(model.input(x)))
    d = torch.zeros_like(h)
    for i in range(3):
        f = model.convs[i](h, GRAPH) - h
        lam = model.steppers[i].lam
        new = F.layer_norm(h + lam * d + 0.5 * f, (8,), model.norms[i].weight, model.norms[i].bias)
        d, h = new - h, new
    torch.testing.assert_close(out, model.output(h), rtol=0, atol=1e-12)


@pytest.mark.parametrize("residual", ["diffusion", "wave", "mix", "light_wave"])
def test_deep_model_finite(residual):
    torch.manual_seed(0)
    model = WavyDIFFormer(16, 32, 4, num_layers=64, residual=residual, dropout=0.2)
    x = torch.randn(200, 16)
    ei = torch.randint(0, 200, (2, 800))
    out, hidden = model(x, ei, return_hidden=True)
    assert out.shape == (200, 4) and len(hidden) == 65
    assert torch.isfinite(out).all()
    F.cross_entropy(out, torch.randint(0, 4, (200,))).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_batched_graphs_do_not_mix():
    torch.manual_seed(0)
    model = WavyDIFFormer(5, 8, 3, num_layers=2, residual="wave").eval()
    x = torch.randn(14, 5)
    ei = torch.cat([GRAPH, GRAPH + 7], 1)
    batch = torch.tensor([0] * 7 + [1] * 7)
    out = model(x, ei, batch)
    torch.testing.assert_close(out[:7], model(x[:7], GRAPH), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[7:], model(x[7:], GRAPH), rtol=1e-5, atol=1e-6)


def test_repr_and_errors():
    assert repr(WavyDIFFormer(10, 16, 3)) == "WavyDIFFormer(10, 16, 3, num_layers=3, residual='diffusion')"
    assert repr(WavyDIFFormer(10, 16, 3, num_layers=8, residual="wave")) == (
        "WavyDIFFormer(10, 16, 3, num_layers=8, residual='wave')"
    )
    with pytest.raises(ValueError, match="unknown residual 'waves'"):
        WavyDIFFormer(10, 16, 3, residual="waves")
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        WavyDIFFormer(10, 16, 3, num_layers=0)
    with pytest.raises(ValueError, match="momentum_norm"):
        WavyDIFFormer(10, 16, 3, momentum_norm="pre")
    with pytest.raises(ValueError, match="tau must be a positive number"):
        WavyDIFFormer(10, 16, 3, tau=-1.0)
    with pytest.raises(ValueError, match=r"x must have shape \(N, 10\)"):
        WavyDIFFormer(10, 16, 3)(torch.randn(4, 9), GRAPH)


def _shared_cora() -> Path | None:
    here = Path(__file__).resolve()
    for base in (here.parents[3] / "shared", Path("/work/shared")):
        raw = base / "data" / "planetoid" / "Cora" / "raw"
        if raw.is_dir():
            return raw
    return None


@pytest.mark.slow
def test_trains_on_cora(tmp_path):
    """DIFFormer's Cora settings (8 layers, hidden 64, lr 1e-3, weight decay
    0.01, dropout 0.2, row-normalised features), public split, test accuracy
    at the best validation epoch."""
    raw = _shared_cora()
    if raw is None:
        pytest.skip("Planetoid Cora raw files not found in ../shared/data/planetoid/Cora/raw")
    from torch_geometric.datasets import Planetoid
    from torch_geometric.transforms import NormalizeFeatures

    shutil.copytree(raw, tmp_path / "Cora" / "raw")
    data = Planetoid(str(tmp_path), "Cora", transform=NormalizeFeatures())[0]
    torch.manual_seed(0)
    model = WavyDIFFormer(data.num_features, 64, 7, num_layers=8, dropout=0.2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=0.01)
    from wavygraph.nn import gcn_adjacency

    adj = gcn_adjacency(data.edge_index, data.num_nodes)
    best_val, test_at_best = 0.0, 0.0
    for _ in range(EPOCHS):
        model.train()
        opt.zero_grad()
        F.cross_entropy(model(data.x, adj)[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(data.x, adj).argmax(1)
        val = (pred[data.val_mask] == data.y[data.val_mask]).float().mean().item()
        if val > best_val:
            best_val = val
            test_at_best = (pred[data.test_mask] == data.y[data.test_mask]).float().mean().item()
    assert test_at_best >= 0.78, (best_val, test_at_best)


EPOCHS = int(os.environ.get("WAVYGRAPH_TEST_CORA_EPOCHS", "300"))
