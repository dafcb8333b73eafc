"""ReZero force scale, PairNorm and FeatScale against hand-written references."""
import pytest
import torch
from torch_geometric.nn import PairNorm

from wavygraph.nn import WavyDIFFormer
from wavygraph.nn.featscale import FeatScale
from wavygraph.nn.joint_norm import JointPairNorm
from wavygraph.nn.model import DIFFORMER_ARGS
from wavygraph.nn.model_args import RECIPE_ARGS


def recipe(*sizes, **kw):
    """WavyDIFFormer with the depth recipe's settings (RECIPE_ARGS), the class defaults these tests were written for."""
    return WavyDIFFormer(*sizes, **{**RECIPE_ARGS, **kw})


GRAPH = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 0, 6], [1, 0, 2, 1, 4, 3, 5, 4, 5, 0]])


def test_rezero_at_zero_is_identity(residual_kind):
    torch.manual_seed(0)
    model = WavyDIFFormer(5, 8, 3, **{**DIFFORMER_ARGS, "num_layers": 6, "residual": residual_kind,
                                      "force_scale": "rezero", "norm": "none"}).double()
    x = torch.randn(7, 5, dtype=torch.float64)
    _, hidden = model(x, GRAPH, return_hidden=True)
    for h in hidden[1:]:
        assert torch.equal(h, hidden[0])
    # alpha receives a gradient, so the blocks can switch on (a loss that weighs nodes differently: leapfrog's
    # force is centred over the nodes, so a plain sum of the outputs has no first-order dependence on alpha)
    weights = torch.randn(7, 3, dtype=torch.float64)
    (model(x, GRAPH) * weights).sum().backward()
    assert model.alpha.grad.abs().sum() > 0
    # and a non-zero alpha changes the output
    with torch.no_grad():
        model.alpha.fill_(0.5)
    _, hidden2 = model(x, GRAPH, return_hidden=True)
    assert (hidden2[-1] - hidden[0]).abs().max() > 1e-3


def test_rezero_scales_the_force():
    torch.manual_seed(0)
    model = WavyDIFFormer(5, 8, 3, **{**DIFFORMER_ARGS, "num_layers": 1, "residual": "wave", "tau": 0.3,
                                      "force_scale": "rezero", "norm": "none"}).double()
    with torch.no_grad():
        model.alpha.fill_(0.7)
    x = torch.randn(7, 5, dtype=torch.float64)
    _, hidden = model(x, GRAPH, return_hidden=True)
    h0 = hidden[0]
    f = model.convs[0](h0, GRAPH) - h0
    y = 0.3 * 0.7 * f
    torch.testing.assert_close(hidden[1], h0 + 0.3 * y, rtol=0, atol=1e-12)


def test_pairnorm_model_equals_pyg():
    torch.manual_seed(0)
    model = WavyDIFFormer(5, 8, 3, **{**DIFFORMER_ARGS, "num_layers": 2, "norm": "pair"}).double()
    x = torch.randn(7, 5, dtype=torch.float64)
    _, hidden = model(x, GRAPH, return_hidden=True)
    pn = PairNorm()
    h = hidden[0]
    for i in range(2):
        h = pn(h + 0.5 * (model.convs[i](h, GRAPH) - h))
        torch.testing.assert_close(hidden[i + 1], h, rtol=0, atol=1e-12)


@pytest.mark.parametrize("batched", [False, True])
def test_joint_pairnorm_velocity(batched):
    torch.manual_seed(0)
    x = torch.randn(9, 4, dtype=torch.float64) * 2 + 1
    v = torch.randn(9, 4, dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2]) if batched else None
    xo, vo = JointPairNorm(4, scale=2.0)(x, v, batch)
    torch.testing.assert_close(xo, PairNorm(scale=2.0)(x, batch), rtol=0, atol=1e-12)
    groups = batch.tolist() if batched else [0] * 9
    for i in range(9):
        members = [j for j in range(9) if groups[j] == groups[i]]
        mean = x[members].mean(0)
        ms = sum(((x[j] - mean) ** 2).sum() for j in members) / len(members)
        torch.testing.assert_close(vo[i], 2.0 * v[i] / (1e-5 + ms).sqrt(), rtol=0, atol=1e-12)


def test_featscale_unit_weights_is_identity_and_reference():
    torch.manual_seed(0)
    fs = FeatScale(4).double()
    x = torch.randn(9, 4, dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2])
    torch.testing.assert_close(fs(x), x, rtol=0, atol=1e-12)
    torch.testing.assert_close(fs(x, batch), x, rtol=0, atol=1e-12)
    with torch.no_grad():
        fs.weight_dc.copy_(torch.tensor([0.0, 0.5, 1.0, 2.0]))
        fs.weight_hc.copy_(torch.tensor([3.0, 1.0, 0.0, -1.0]))
    out = fs(x, batch)
    for i in range(9):
        members = [j for j in range(9) if batch[j] == batch[i]]
        dc = x[members].mean(0)
        torch.testing.assert_close(out[i], fs.weight_dc * dc + fs.weight_hc * (x[i] - dc), rtol=0, atol=1e-12)
    assert repr(fs) == "FeatScale(4)"


def test_featscale_model_unit_weights_equals_plain():
    torch.manual_seed(0)
    a = recipe(5, 8, 3, num_layers=3, residual="light_wave", featscale=True).double().eval()
    torch.manual_seed(0)
    b = recipe(5, 8, 3, num_layers=3, residual="light_wave").double().eval()
    b.load_state_dict({k: v for k, v in a.state_dict().items() if "featscale" not in k})
    x = torch.randn(7, 5, dtype=torch.float64)
    torch.testing.assert_close(a(x, GRAPH), b(x, GRAPH), rtol=0, atol=1e-12)


def test_option_errors():
    with pytest.raises(ValueError, match="unknown force_scale 'alpha'.*'fixed', 'rezero'"):
        WavyDIFFormer(5, 8, 3, force_scale="alpha")
    with pytest.raises(ValueError, match="unknown norm 'group'.*'layer', 'batch', 'pair', 'none'"):
        WavyDIFFormer(5, 8, 3, norm="group")
