import pytest
import torch
from torch.func import jvp

from wavygraph.nn import JointFFN


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_joint_ffn_is_jacobian_vector_product(activation):
    torch.manual_seed(0)
    ffn = JointFFN(6, 10, activation=activation).double()
    x = torch.randn(9, 6, dtype=torch.float64)
    v = torch.randn(9, 6, dtype=torch.float64)
    xo, vo = ffn(x, v)
    act = torch.nn.functional.gelu if activation == "gelu" else torch.relu
    plain = lambda t: ffn.lin2(act(ffn.lin1(t)))  # noqa: E731
    fx, jv = jvp(plain, (x,), (v,))
    torch.testing.assert_close(xo, fx, rtol=0, atol=1e-12)
    torch.testing.assert_close(vo, jv, rtol=0, atol=1e-12)
    assert ffn(x)[1] is None


@pytest.mark.parametrize("activation", ["gelu", "relu"])
def test_joint_ffn_without_velocity_is_the_same_map_and_keeps_only_its_input(activation):
    """Without ``v`` the FFN is the same function (value and gradient) as its x-part with ``v``, and keeps for
    backward only lin1's input, ``h`` and lin2's input (the velocity path's derivative is not computed)."""
    torch.manual_seed(1)
    ffn = JointFFN(5, 7, activation=activation).double()
    x = torch.randn(11, 5, dtype=torch.float64, requires_grad=True)
    with_v = ffn(x, torch.randn(11, 5, dtype=torch.float64))[0]
    (g_with,) = torch.autograd.grad(with_v.pow(2).sum(), x)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        alone = ffn(x)[0]
    (g_alone,) = torch.autograd.grad(alone.pow(2).sum(), x)
    torch.testing.assert_close(alone, with_v, rtol=0, atol=1e-14)
    torch.testing.assert_close(g_alone, g_with, rtol=0, atol=1e-12)
    big = [s for s in saved if s == (11, 7)]  # (N, hidden) tensors kept for backward: h and the activation
    assert len(big) <= 2, saved


def test_joint_ffn_gelu_derivative_is_exact_not_tanh():
    ffn = JointFFN(1, 1).double()
    with torch.no_grad():
        ffn.lin1.weight.fill_(1.0)
        ffn.lin1.bias.zero_()
        ffn.lin2.weight.fill_(1.0)
        ffn.lin2.bias.zero_()
    h = torch.linspace(-4, 4, 81, dtype=torch.float64).unsqueeze(1)
    _, d = ffn(h, torch.ones_like(h))
    # finite differences of the exact (erf) GELU
    eps = 1e-6
    fd = (torch.nn.functional.gelu(h + eps) - torch.nn.functional.gelu(h - eps)) / (2 * eps)
    torch.testing.assert_close(d, fd, rtol=0, atol=1e-8)
    tanh_fd = (torch.nn.functional.gelu(h + eps, approximate="tanh") - torch.nn.functional.gelu(h - eps, approximate="tanh")) / (2 * eps)
    assert (d - tanh_fd).abs().max() > 1e-4


def test_joint_ffn_errors_and_repr():
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        JointFFN(4, activation="tanh")
    assert repr(JointFFN(4)) == "JointFFN(4, hidden_channels=8, activation='gelu')"
