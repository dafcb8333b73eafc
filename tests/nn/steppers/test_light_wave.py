"""``light_wave``'s fast path: the step (+ LayerNorm) as autograd functions
with written-out backwards, against gradcheck and the literal formula."""
import pytest
import torch

from wavygraph.nn import StepState, make_stepper


@pytest.mark.parametrize("block", [8, 2**18])  # 8 elements: blocks of two rows, the last one short
def test_light_wave_step_function_gradcheck(monkeypatch, block):
    from wavygraph.nn.steppers import light_wave
    from wavygraph.nn.steppers.light_wave import LightWaveStep as _LightWaveStep

    monkeypatch.setattr(light_wave, "BLOCK", block)

    g = torch.Generator().manual_seed(4)
    x, v, f = (torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    lam = torch.rand(4, generator=g, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: _LightWaveStep.apply(*a, 0.3), (x, v, f, lam))
    # and the module's step equals the plain update, outputs and gradients
    lw = make_stepper("light_wave", 4, tau=0.3).double()
    out = lw(StepState(x, v), f).x
    ref = lw.update(x, v, f, 0.3, lw.lam)[0]
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-15)
    w = torch.randn(7, 4, generator=g, dtype=torch.float64)
    ga = torch.autograd.grad((out * w).sum(), (x, v, f, lw.theta))
    gb = torch.autograd.grad((ref * w).sum(), (x, v, f, lw.theta))
    for a, b in zip(ga, gb):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("block", [8, 2**18])
def test_light_wave_layer_norm_function_is_the_composition(monkeypatch, block):
    """The fused step + LayerNorm of the paper's Light Wave: gradcheck, and
    outputs and every gradient equal to LN(x + tau F + lam (x - x_prev))
    written out with plain ops (float64)."""
    from wavygraph.nn import JointLayerNorm
    from wavygraph.nn.steppers import light_wave
    from wavygraph.nn.steppers.light_wave import LightWaveLayerNorm

    monkeypatch.setattr(light_wave, "BLOCK", block)
    g = torch.Generator().manual_seed(5)
    x, v, f = (torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    lam = torch.rand(4, generator=g, dtype=torch.float64).requires_grad_()
    w = (torch.rand(4, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    b = torch.randn(4, generator=g, dtype=torch.float64, requires_grad=True)
    inputs = (x, v, f, lam, w, b)
    assert torch.autograd.gradcheck(lambda *a: LightWaveLayerNorm.apply(*a, 0.3, 1e-5), inputs)

    def literal(x, v, f, lam, w, b):
        s = x + 0.3 * f + lam * (x - v)
        mu = s.mean(-1, keepdim=True)
        var = ((s - mu) ** 2).mean(-1, keepdim=True)
        return (s - mu) / torch.sqrt(var + 1e-5) * w + b

    out, ref = LightWaveLayerNorm.apply(*inputs, 0.3, 1e-5), literal(*inputs)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    probe = torch.randn(7, 4, generator=g, dtype=torch.float64)
    for a, r in zip(torch.autograd.grad((out * probe).sum(), inputs), torch.autograd.grad((ref * probe).sum(), inputs)):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)
    # the first layer (x_prev is x itself) and the stepper's own path take it
    stepper, norm = make_stepper("light_wave", 4, tau=0.3).double(), JointLayerNorm(4).double()
    state = stepper.step_and_norm(stepper.init(x), f, norm)
    torch.testing.assert_close(state.x, literal(x, x, f, stepper.lam, norm.weight, norm.bias), rtol=1e-12, atol=1e-12)
    assert state.v is x


@pytest.mark.parametrize("fused_norm", [True, False])
@pytest.mark.parametrize("block", [8, 2**18])
def test_light_wave_first_layer_takes_diffusion_path(monkeypatch, block, fused_norm):
    """Where ``X_prev`` is ``x`` itself (layer 0, ``X^{-1} = X^0``) the autograd
    functions compute ``x + tau F`` alone: outputs and gradients of ``x``, ``F``,
    the norm and ``theta`` equal the literal formula with ``X_prev = x`` (float64);
    ``theta`` gets an exact zero gradient (not ``None``: DDP sees it used), and
    with a distinct ``X_prev`` the blocked forward equals the one-shot update bit for bit."""
    from wavygraph.nn import JointLayerNorm
    from wavygraph.nn.steppers import light_wave

    monkeypatch.setattr(light_wave, "BLOCK", block)
    g = torch.Generator().manual_seed(9)
    x, f = (torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    stepper = make_stepper("light_wave", 4, tau=0.3, lam0=0.7).double()
    norm = JointLayerNorm(4).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5, generator=g)
        norm.bias.normal_(generator=g)
    if fused_norm:
        out = stepper.step_and_norm(stepper.init(x), f, norm).x
    else:
        out = stepper(stepper.init(x), f).x
    x2 = x.detach().clone().requires_grad_()
    s = x + 0.3 * f + stepper.lam * (x - x2)  # X_prev = x as a separate leaf: the formula, written out
    ref = torch.nn.functional.layer_norm(s, (4,), norm.weight, norm.bias, 1e-5) if fused_norm else s
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-14)
    probe = torch.randn(7, 4, generator=g, dtype=torch.float64)
    params = (x, f, stepper.theta) + ((norm.weight, norm.bias) if fused_norm else ())
    got = torch.autograd.grad((out * probe).sum(), params)
    want = list(torch.autograd.grad((ref * probe).sum(), params + (x2,)))
    want[0] = want[0] + want.pop()  # x and X_prev are one tensor
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)
    assert torch.equal(got[2], torch.zeros(4, dtype=torch.float64))
    # a distinct X_prev: blocked forward == the plain update, exactly
    v = torch.randn(7, 4, generator=g, dtype=torch.float64)
    lam = stepper.lam.detach()
    assert torch.equal(light_wave._update_blocked(x.detach(), v, f.detach(), 0.3, lam),
                       light_wave.light_wave_update(x.detach(), v, f.detach(), 0.3, lam))
