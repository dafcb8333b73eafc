import torch

from wavygraph.nn import JointLayerNorm


def test_joint_layernorm_reference():
    torch.manual_seed(0)
    ln = JointLayerNorm(5).double()
    with torch.no_grad():
        ln.weight.copy_(torch.linspace(0.5, 2.0, 5))
        ln.bias.copy_(torch.linspace(-1.0, 1.0, 5))
    x = torch.randn(7, 5, dtype=torch.float64) * 3 + 1
    v = torch.randn(7, 5, dtype=torch.float64)
    xo, vo = ln(x, v)
    for i in range(7):  # explicit per-row formulas
        mu = sum(x[i].tolist()) / 5
        var = sum((t - mu) ** 2 for t in x[i].tolist()) / 5
        for c in range(5):
            ex = ln.weight[c] * (x[i, c] - mu) / (var + ln.eps) ** 0.5 + ln.bias[c]
            ev = ln.weight[c] * v[i, c] / (var + ln.eps) ** 0.5
            assert abs(xo[i, c] - ex) < 1e-12 and abs(vo[i, c] - ev) < 1e-12
    # no velocity: an ordinary LayerNorm
    ref = torch.nn.LayerNorm(5).double()
    ref.load_state_dict(ln.state_dict())
    xo2, none = ln(x)
    assert none is None
    torch.testing.assert_close(xo2, ref(x))
    assert repr(ln) == "JointLayerNorm(5, eps=1e-05)"


def test_joint_layer_norm_function_gradcheck():
    from wavygraph.nn.joint_norm import _JointLayerNormFn

    g = torch.Generator().manual_seed(3)
    x, v = (torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    w = (torch.rand(4, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    b = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *a: _JointLayerNormFn.apply(*a, 1e-5), (x, v, w, b))
