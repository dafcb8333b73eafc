"""``identity_map=lam`` (GCNII's identity mapping): each layer's attention
output ``h`` becomes ``(1 - beta_l) h + beta_l h W_l`` with ``beta_l =
ln(lam / l + 1)`` (``l = 1 .. L``) and a weight ``W_l`` of the layer's own.
Checked against a literal transcription of the model in float64 (shared and
per-layer attention, one graph and a batch of unequal, unsorted graphs),
and every memory mode against the plain one with dropout on."""
import math

import pytest
import torch
import torch.nn.functional as F

from wavygraph.config import ConfigError, load_config
from wavygraph.nn import WavyDIFFormer
from wavygraph.nn.validate import InputError

from .test_readout import _graph  # random batches of unequal graphs, optionally unsorted


def _perturbed(model, seed: int):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # off the identity initialisations of the norms
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("case", range(3))
def test_identity_map_is_gcnii_formula(shared, case):
    lam, tau, w = [0.5, 1.3, 0.1][case], 0.7, 0.3
    layers = [1, 4, 9][case]
    x, edges, batch = _graph(case, [[8], [3, 10, 1], [6, 2, 7]][case], shuffle=case == 2)
    batch = None if case == 0 else batch
    torch.manual_seed(case)
    model = WavyDIFFormer(5, 6, 3, num_layers=layers, residual="diffusion", tau=tau, source=True, source_weight=w,
                          graph_weight=0.7, shared_attention=shared, identity_map=lam).double().eval()
    _perturbed(model, case + 10)
    h0 = F.relu(model.input_norm(model.input(x)))
    h = h0
    for i, layer in enumerate(model.layers):
        beta = math.log(lam / (i + 1) + 1)
        a = layer.force.conv(h, edges, batch)
        a = (1 - beta) * a + beta * a @ layer.force.identity.weight.T
        norm = layer.norm
        h = F.layer_norm(h + tau * (a - h) + w * h0, (6,), norm.weight, norm.bias, norm.eps)
    torch.testing.assert_close(model(x, edges, batch), model.output(h), rtol=0, atol=1e-12)
    # without the map (the same weights otherwise) the output differs: the test can fail
    for layer in model.layers:
        layer.force.identity = None
    assert not torch.allclose(model(x, edges, batch), model.output(h), atol=1e-6)


def test_each_layer_has_its_own_weight_and_beta():
    plain = WavyDIFFormer(5, 8, 3, num_layers=6, shared_attention=True)
    model = WavyDIFFormer(5, 8, 3, num_layers=6, shared_attention=True, identity_map=0.5)
    weights = [layer.force.identity.weight for layer in model.layers]
    assert len({id(w) for w in weights}) == 6
    assert sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in plain.parameters()) == 6 * 8 * 8
    assert [layer.force.beta for layer in model.layers] == pytest.approx([math.log(0.5 / k + 1) for k in range(1, 7)])
    assert all(layer.force.identity is None for layer in plain.layers)
    # the parameters the optimiser sees are every parameter once, the maps among them
    assert {id(p) for p in model.parameters()} == {id(p) for p in model.state_dict(keep_vars=True).values()}


def _run(model, x, edges, batch, seed=3):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    out = model(x, edges, batch)
    (out.square().sum() + out[:, 0].sum()).backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind,modes", [("leapfrog", ["checkpoint", "reversible"]), ("light_wave", ["checkpoint"])])
@pytest.mark.parametrize("case", range(2))
def test_memory_modes_give_the_plain_gradients(kind, modes, case):
    layers = [5, 11][case]
    x, edges, batch = _graph(20 + case, [[7], [4, 9, 2]][case], shuffle=case == 1)
    batch = None if case == 0 else batch
    torch.manual_seed(case)
    model = WavyDIFFormer(5, 6, 3, num_layers=layers, residual=kind, source=True, source_weight=0.2, dropout=0.3,
                          dropout_at="force", shared_attention=case == 0, identity_map=0.8).double().train()
    _perturbed(model, case)
    out, plain = _run(model, x, edges, batch)
    assert all(g.abs().sum() > 0 for n, g in plain.items() if ".identity." in n)
    for mode in modes:
        if mode == "checkpoint":
            model.gradient_checkpointing, model.checkpoint_segments = True, 3
        else:
            model.reversible = True
        got, grads = _run(model, x, edges, batch)
        model.gradient_checkpointing, model.checkpoint_segments, model.reversible = False, None, False
        torch.testing.assert_close(got, out, rtol=0, atol=1e-11, msg=mode)
        for name, g in plain.items():
            torch.testing.assert_close(grads[name], g, rtol=1e-9, atol=1e-11, msg=f"{mode} {name}")


@pytest.mark.parametrize("value", [0, -0.5, float("nan"), float("inf"), True, "0.5"])
def test_bad_identity_map(value, tmp_path):
    with pytest.raises(InputError, match="identity_map must be a positive number"):
        WavyDIFFormer(5, 8, 3, identity_map=value)
    if isinstance(value, str):  # a config's typed field reads "0.5" as the number
        return
    path = tmp_path / "c.yaml"
    path.write_text(f"model:\n  identity_map: {str(value).lower()}\n")
    with pytest.raises(ConfigError, match="model.identity_map"):
        load_config(str(path))
