import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from wavygraph.nn import WavyDIFFormer
from wavygraph.nn.model_args import RECIPE_ARGS


def recipe(*sizes, **kw):
    """WavyDIFFormer with the depth recipe's settings (RECIPE_ARGS), the class defaults these tests were written for."""
    return WavyDIFFormer(*sizes, **{**RECIPE_ARGS, **kw})


GRAPH = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 0, 6], [1, 0, 2, 1, 4, 3, 5, 4, 5, 0]])

# DIFFormer's own model (Wu et al.), written out here rather than imported: its value projection, the
# local branch added, step 0.5, no source term, no dropout, dropout on the state, one attention layer per step;
# and every kind's own options (mix from lam0 0.5)
DIFFORMER = dict(graph_weight=None, value_proj=True, source=False, source_weight=1.0, tau=0.5, dropout=0.0,
                 dropout_at="state", shared_attention=False, residual_options={})


def difformer_model(*sizes, **kwargs):
    """``WavyDIFFormer`` with DIFFormer's arguments, then ``kwargs``."""
    return WavyDIFFormer(*sizes, **{**DIFFORMER, **kwargs})


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
    model = difformer_model(5, 8, 3, num_layers=4).double().eval()
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
    model = difformer_model(5, 8, 3, num_layers=3, residual="wave", tau=tau, ffn=True).double().eval()
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


def _ln(h, norm):
    return F.layer_norm(h, (h.shape[1],), norm.weight, norm.bias, norm.eps)


def _joint_ln(h, y, norm):
    sigma = (h.var(dim=1, unbiased=False, keepdim=True) + norm.eps).sqrt()
    return norm.weight * (h - h.mean(1, keepdim=True)) / sigma + norm.bias, norm.weight * y / sigma


def _random_lams(model, seed=3):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for st in model.steppers:
            st.theta.copy_(torch.randn(st.theta.shape, generator=g, dtype=st.theta.dtype))


def test_light_wave_model_is_the_paper(tmp_path):
    """The paper's Light Wave, layer by layer: X^{l+1} = LN(X^l + tau F + lam (X^l - X^{l-1})),
    X^{-1} = X^0; every hidden state compared."""
    torch.manual_seed(0)
    tau = 0.4
    model = difformer_model(5, 8, 3, num_layers=4, residual="light_wave", tau=tau).double().eval()
    _random_lams(model)
    x = torch.randn(7, 5, dtype=torch.float64)
    out, hidden = model(x, GRAPH, return_hidden=True)
    h = F.relu(model.input_norm(model.input(x)))
    prev = h
    ref_hidden = [h]
    for i in range(4):
        f = model.convs[i](h, GRAPH) - h
        lam = torch.sigmoid(model.steppers[i].theta)
        prev, h = h, _ln(h + tau * f + lam * (h - prev), model.norms[i])
        ref_hidden.append(h)
    for a, b in zip(hidden, ref_hidden):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    torch.testing.assert_close(out, model.output(h), rtol=0, atol=1e-12)


@pytest.mark.parametrize("source", [False, True])
def test_light_wave_model_gradients_are_the_paper(monkeypatch, source):
    """Gradients of the paper's Light Wave model (every parameter, the input and
    each hidden state, two backward passes on one graph) equal those of the
    literal loop in plain ops, float64. Without the source term every layer runs the
    fused step + LayerNorm function (counted: it must), with it the plain ops."""
    from wavygraph.nn.steppers import light_wave

    calls = []
    real_apply = light_wave.LightWaveLayerNorm.apply
    monkeypatch.setattr(light_wave.LightWaveLayerNorm, "apply", lambda *a: calls.append(1) or real_apply(*a))
    torch.manual_seed(1)
    tau, layers = 0.4, 5
    model = difformer_model(5, 8, 3, num_layers=layers, residual="light_wave", tau=tau, source=source,
                          source_weight=0.3 if source else 1.0).double()
    _random_lams(model)
    with torch.no_grad():
        for norm in model.norms:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_()
    x = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    probe = torch.randn(7, 3, dtype=torch.float64)
    params = [x, *model.parameters()]

    out, hidden = model(x, GRAPH, return_hidden=True)
    loss = (out * probe).sum() + sum((h ** 2).sum() * 0.01 * i for i, h in enumerate(hidden))
    got = torch.autograd.grad(loss, params + hidden, retain_graph=True)
    again = torch.autograd.grad(loss, params)
    assert len(calls) == (0 if source else layers)  # the source term wraps the norm: plain ops

    h = F.relu(model.input_norm(model.input(x)))
    x0 = 0.3 * h if source else None
    prev, ref_hidden = h, [h]
    for i in range(layers):
        f = model.convs[i](h, GRAPH) - h
        lam = torch.sigmoid(model.steppers[i].theta)
        s = h + tau * f + lam * (h - prev)
        prev, h = h, _ln(s + x0 if source else s, model.norms[i])
        ref_hidden.append(h)
    ref = model.output(h)
    ref_loss = (ref * probe).sum() + sum((r ** 2).sum() * 0.01 * i for i, r in enumerate(ref_hidden))
    want = torch.autograd.grad(ref_loss, params + ref_hidden)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(again, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_mix_model_is_the_authors():
    """The authors' mix through the joint LayerNorm, layer by layer."""
    torch.manual_seed(0)
    tau = 0.5
    model = difformer_model(5, 8, 3, num_layers=4, residual="mix", tau=tau).double().eval()
    _random_lams(model)
    x = torch.randn(7, 5, dtype=torch.float64)
    out, hidden = model(x, GRAPH, return_hidden=True)
    h = F.relu(model.input_norm(model.input(x)))
    y = torch.zeros_like(h)
    for i in range(4):
        delta = model.convs[i](h, GRAPH) - h
        a = torch.sigmoid(model.steppers[i].theta)
        y = a * (tau * delta + y) + (1 - a) * delta
        h, y = _joint_ln(tau * y + h, y, model.norms[i])
        torch.testing.assert_close(hidden[i + 1], h, rtol=0, atol=1e-12)
    torch.testing.assert_close(out, model.output(h), rtol=0, atol=1e-12)


def test_light_wave_joint_model():
    """This package's joint light wave: the displacement through the joint LayerNorm."""
    torch.manual_seed(0)
    model = difformer_model(5, 8, 3, num_layers=3, residual="light_wave_joint").double().eval()
    x = torch.randn(7, 5, dtype=torch.float64)
    h = F.relu(model.input_norm(model.input(x)))
    d = torch.zeros_like(h)
    for i in range(3):
        f = model.convs[i](h, GRAPH) - h
        d = model.steppers[i].lam * d + 0.5 * f
        h, d = _joint_ln(h + d, d, model.norms[i])
    torch.testing.assert_close(model(x, GRAPH), model.output(h), rtol=0, atol=1e-12)


def test_difformer_switches():
    """value_proj=False (values = the layer input), input_norm=False with norm='none'
    (DIFFormer's --use_bn off), source=True (x_0 added before each norm)."""
    torch.manual_seed(0)
    model = difformer_model(5, 8, 3, num_layers=3, value_proj=False, input_norm=False, norm="none",
                          tau=1.0).double().eval()
    assert model.input_norm is None
    x = torch.randn(7, 5, dtype=torch.float64)
    h = F.relu(model.input(x))
    for conv in model.convs:  # tau = 1, no norm: x' = conv(x) (DIFFormer without --use_residual)
        h = conv(h, GRAPH)
    torch.testing.assert_close(model(x, GRAPH), model.output(h), rtol=0, atol=1e-12)

    model = difformer_model(5, 8, 3, num_layers=3, source=True).double().eval()
    h0 = F.relu(model.input_norm(model.input(x)))
    h = h0
    for conv, norm in zip(model.convs, model.norms):
        h = _ln(0.5 * conv(h, GRAPH) + 0.5 * h + h0, norm)
    torch.testing.assert_close(model(x, GRAPH), model.output(h), rtol=0, atol=1e-12)


@pytest.mark.parametrize("residual", ["diffusion", "wave"])
def test_source_weight_adds_alpha_x0(residual):
    """source_weight=alpha (this package's own): alpha * x_0 added before each norm,
    written out for diffusion and for wave (velocity through the joint LayerNorm)."""
    torch.manual_seed(0)
    model = difformer_model(5, 8, 3, num_layers=3, residual=residual, source=True, source_weight=0.3,
                          tau=0.7).double().eval()
    x = torch.randn(7, 5, dtype=torch.float64)
    h0 = F.relu(model.input_norm(model.input(x)))
    h, y = h0, torch.zeros_like(h0)
    for conv, norm in zip(model.convs, model.norms):
        f = conv(h, GRAPH) - h
        if residual == "diffusion":
            h = _ln(h + 0.7 * f + 0.3 * h0, norm)
        else:
            y = y + 0.7 * f
            h, y = _joint_ln(h + 0.7 * y + 0.3 * h0, y, norm)
    torch.testing.assert_close(model(x, GRAPH), model.output(h), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kwargs, match", [
    (dict(source=False, source_weight=0.5), "needs source=True"),
    (dict(source=True, source_weight=-0.1), "source_weight must be a number >= 0"),
    (dict(source=True, source_weight=float("nan")), "source_weight must be a number >= 0"),
])
def test_source_weight_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        WavyDIFFormer(5, 8, 3, **kwargs)


def test_dropout_at_force_is_the_authors_placement():
    """dropout_at='force': F = dropout(conv(x)) - x, FFN branches with their own masks;
    the state itself is never masked. Replayed with the same random numbers."""
    torch.manual_seed(0)
    model = difformer_model(5, 8, 3, num_layers=2, residual="wave", dropout=0.0, layer_dropout=0.5,
                          dropout_at="force", ffn=True).double().train()
    x = torch.randn(7, 5, dtype=torch.float64)
    torch.manual_seed(11)
    out = model(x, GRAPH)
    torch.manual_seed(11)
    h = F.relu(model.input_norm(model.input(x)))
    y = torch.zeros_like(h)
    for i in range(2):
        f = F.dropout(model.convs[i](h, GRAPH), 0.5, True) - h
        y = y + 0.5 * f
        h, y = _joint_ln(h + 0.5 * y, y, model.norms[i])
        fx, fy = model.ffns[i](h, y)
        fx, fy = F.dropout(fx, 0.5, True), F.dropout(fy, 0.5, True)
        h, y = _joint_ln(h + fx, y + fy, model.ffn_norms[i])
    torch.testing.assert_close(out, model.output(h), rtol=0, atol=1e-12)


def test_state_dropout_keeps_light_wave_previous_state():
    """dropout_at='state': a velocity shares the state's mask; light_wave's previous
    state is the previous (already dropped) output and is not masked again."""
    torch.manual_seed(0)
    model = difformer_model(5, 8, 3, num_layers=3, residual="light_wave", layer_dropout=0.5).double().train()
    x = torch.randn(7, 5, dtype=torch.float64)
    torch.manual_seed(5)
    out = model(x, GRAPH)
    torch.manual_seed(5)
    h = F.relu(model.input_norm(model.input(x)))
    prev = h
    for i in range(3):
        f = model.convs[i](h, GRAPH) - h
        new = _ln(h + 0.5 * f + model.steppers[i].lam * (h - prev), model.norms[i])
        prev, h = h, F.dropout(new, 0.5, True)
    torch.testing.assert_close(out, model.output(h), rtol=0, atol=1e-12)


def test_deep_model_finite(residual_kind):
    torch.manual_seed(0)
    model = recipe(16, 32, 4, num_layers=64, residual=residual_kind, dropout=0.2)
    x = torch.randn(200, 16)
    ei = torch.randint(0, 200, (2, 800))
    out, hidden = model(x, ei, return_hidden=True)
    assert out.shape == (200, 4) and len(hidden) == 65
    assert torch.isfinite(out).all()
    F.cross_entropy(out, torch.randint(0, 4, (200,))).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_64_layer_wave_model(dtype):
    """A model cast to bfloat16 / float16 runs forward and backward on CPU
    (the sparse local branch lacks those dtypes there) with finite values."""
    torch.manual_seed(0)
    model = recipe(16, 32, 4, num_layers=64, residual="wave", graph_weight=0.5).to(dtype)
    x = torch.randn(200, 16, dtype=dtype)
    ei = torch.randint(0, 200, (2, 800))
    out = model(x, ei)
    assert out.dtype == dtype and torch.isfinite(out).all()
    F.cross_entropy(out.float(), torch.randint(0, 4, (200,))).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_residual_options_reach_the_stepper():
    model = recipe(5, 8, 3, num_layers=2, residual="mix", residual_options={"lam0": 0.25})
    assert all(abs(st.lam0 - 0.25) < 1e-12 for st in model.steppers)
    with pytest.raises(ValueError, match="residual 'wave' takes no option lam0"):
        WavyDIFFormer(5, 8, 3, residual="wave", residual_options={"lam0": 0.25})
    with pytest.raises(ValueError, match="residual_options must be a dict"):
        WavyDIFFormer(5, 8, 3, residual="mix", residual_options=0.25)
    with pytest.raises(ValueError, match="dropout_at.*'state', 'force'"):
        WavyDIFFormer(5, 8, 3, dropout_at="attention")


def test_batched_graphs_do_not_mix():
    torch.manual_seed(0)
    model = recipe(5, 8, 3, num_layers=2, residual="wave").eval()
    x = torch.randn(14, 5)
    ei = torch.cat([GRAPH, GRAPH + 7], 1)
    batch = torch.tensor([0] * 7 + [1] * 7)
    out = model(x, ei, batch)
    torch.testing.assert_close(out[:7], model(x[:7], GRAPH), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[7:], model(x[7:], GRAPH), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("residual", ["diffusion", "wave", "mix", "light_wave"])
def test_defaults_written_out(residual):
    """The recipe (RECIPE_ARGS) in training mode against the literal loop: one attention layer for every step, the layer
    input as its values, its local branch blended 0.9; dropout 0.2 after the input layer and on the attention
    output inside the force; 0.25 x_0 added before each norm; step 1 (wave 0.5); mix from lam 0.1."""
    torch.manual_seed(0)
    model = recipe(5, 8, 3, num_layers=3, residual=residual).double().train()
    conv = model.convs[0]
    assert all(c is conv for c in model.convs) and conv.graph_weight == 0.9 and not conv.value_proj
    tau = 0.5 if residual == "wave" else 1.0
    x = torch.randn(7, 5, dtype=torch.float64)
    torch.manual_seed(3)
    out = model(x, GRAPH)
    torch.manual_seed(3)
    h0 = F.dropout(F.relu(model.input_norm(model.input(F.dropout(x, 0.0, True)))), 0.2, True)
    h, prev, y = h0, h0, torch.zeros_like(h0)
    for i, norm in enumerate(model.norms):
        f = F.dropout(conv(h, GRAPH), 0.2, True) - h
        lam = torch.sigmoid(model.steppers[i].theta) if residual in ("mix", "light_wave") else None
        if residual == "diffusion":
            h = _ln(h + f + 0.25 * h0, norm)
        elif residual == "light_wave":
            prev, h = h, _ln(h + f + lam * (h - prev) + 0.25 * h0, norm)
        else:
            y = y + tau * f if residual == "wave" else lam * (y + f) + (1 - lam) * f
            h, y = _joint_ln(h + tau * y + 0.25 * h0, y, norm)
    torch.testing.assert_close(out, model.output(h), rtol=0, atol=1e-12)
    if lam is not None:
        torch.testing.assert_close(lam, torch.full_like(lam, 0.1 if residual == "mix" else 0.5), rtol=0, atol=1e-7)


def test_per_kind_defaults_and_explicit_arguments():
    """tau=None and residual_options=None take the kind's; anything given is used as given."""
    from wavygraph.nn.model import DIFFORMER_ARGS

    assert DIFFORMER_ARGS == DIFFORMER
    taus = {k: recipe(5, 8, 3, residual=k).steppers[0].tau for k in ("diffusion", "wave", "mix", "light_wave")}
    assert taus == {"diffusion": 1.0, "wave": 0.5, "mix": 1.0, "light_wave": 1.0}
    assert recipe(5, 8, 3, residual="wave", tau=0.8).steppers[0].tau == 0.8
    assert recipe(5, 8, 3, residual="mix").steppers[0].lam0 == 0.1
    assert recipe(5, 8, 3, residual="mix", residual_options={}).steppers[0].lam0 == 0.5
    assert recipe(5, 8, 3, residual="light_wave").steppers[0].lam0 == 0.5
    model = recipe(5, 8, 3, source=False)  # the default source_weight needs no source
    assert not model.source and model.convs[0] is model.convs[2]
    assert recipe(5, 8, 3, source_weight=0.5).source_weight == 0.5


def test_repr_and_errors():
    assert repr(WavyDIFFormer(10, 16, 3)) == "WavyDIFFormer(10, 16, 3, num_layers=3, residual='diffusion')"
    assert repr(WavyDIFFormer(10, 16, 3, num_layers=8, residual="wave")) == (
        "WavyDIFFormer(10, 16, 3, num_layers=8, residual='wave')"
    )
    with pytest.raises(ValueError, match="unknown residual 'waves'"):
        WavyDIFFormer(10, 16, 3, residual="waves")
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        WavyDIFFormer(10, 16, 3, num_layers=0)
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
    model = difformer_model(data.num_features, 64, 7, num_layers=8, dropout=0.2)
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


@pytest.mark.parametrize("residual", ["diffusion", "wave"])
def test_shared_attention_is_one_conv_for_every_step(residual, tmp_path):
    """shared_attention=True: the same DIFFormerConv (one set of query/key/value and local-branch
    parameters) at every step, written out with one conv; norms stay per layer."""
    torch.manual_seed(0)
    kw = dict(num_layers=4, residual=residual, tau=0.7, value_proj=True)
    model = difformer_model(5, 8, 3, shared_attention=True, **kw).double().eval()
    one = model.convs[0]
    conv_params = sum(p.numel() for p in one.parameters())
    separate = difformer_model(5, 8, 3, **kw)
    assert sum(p.numel() for p in separate.parameters()) - sum(p.numel() for p in model.parameters()) \
        == 3 * conv_params > 0
    with torch.no_grad():
        for norm in model.norms:  # per-layer norms: make them differ
            norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(7, 5, dtype=torch.float64)
    h = F.relu(model.input_norm(model.input(x)))
    y = torch.zeros_like(h)
    for norm in model.norms:
        f = one(h, GRAPH) - h
        if residual == "diffusion":
            h = _ln(h + 0.7 * f, norm)
        else:
            y = y + 0.7 * f
            h, y = _joint_ln(h + 0.7 * y, y, norm)
    torch.testing.assert_close(model(x, GRAPH), model.output(h), rtol=0, atol=1e-12)
    # a saved and reloaded model keeps the sharing
    torch.save(model.state_dict(), tmp_path / "m.pt")
    again = difformer_model(5, 8, 3, shared_attention=True, **kw).double().eval()
    again.load_state_dict(torch.load(tmp_path / "m.pt"))
    assert again.convs[0] is again.convs[3]
    torch.testing.assert_close(again(x, GRAPH), model(x, GRAPH), rtol=0, atol=0)
