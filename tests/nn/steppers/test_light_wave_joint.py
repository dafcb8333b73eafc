"""``light_wave_joint``: the package's own light-wave variant, whose step
and joint LayerNorm run in one hand-written autograd function."""
import pytest
import torch

from wavygraph.nn import JointLayerNorm, JointLightWaveStepper, StepState
from wavygraph.nn.steppers.light_wave_joint import _LightWaveJointLayerNormFn


def _light_wave_inputs(n=13, c=6):
    torch.manual_seed(0)
    norm = JointLayerNorm(c).double()
    stepper = JointLightWaveStepper(c, tau=0.3).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.normal_()
        stepper.theta.normal_()
    x, d, f = (torch.randn(n, c, dtype=torch.float64, requires_grad=True) for _ in range(3))
    return norm, stepper, x, d, f


@pytest.mark.parametrize("outputs", ["both", "x only", "v only"])
def test_fused_light_wave_step_and_norm_equals_composition(outputs):
    """The fused light-wave step + joint LayerNorm against the stepper followed
    by the norm: outputs and the gradients of x, D, F, theta, weight and bias
    (float64, to rounding), also when only one output is used."""
    norm, stepper, x, d, f = _light_wave_inputs()
    gx, gv = torch.randn_like(x), torch.randn_like(x)
    params = [x, d, f, stepper.theta, norm.weight, norm.bias]

    def loss(xo, vo):
        return {"both": (xo * gx).sum() + (vo * gv).sum(), "x only": (xo * gx).sum(), "v only": (vo * gv).sum()}[outputs]

    state = stepper(StepState(x, d), f)
    ref_out = norm(state.x, state.v)
    ref_grads = torch.autograd.grad(loss(*ref_out), params, allow_unused=True)
    out = stepper.step_and_norm(StepState(x, d), f, norm)
    grads = torch.autograd.grad(loss(*out), params, allow_unused=True)
    for a, b in zip(out, ref_out):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)
    for a, b in zip(grads, ref_grads):
        if b is None:
            assert a is None or float(a.abs().max()) == 0.0
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_fused_light_wave_gradcheck():
    norm, stepper, x, d, f = _light_wave_inputs(n=7, c=4)
    lam = stepper.lam.detach().clone().requires_grad_()
    w, b = norm.weight.detach().clone().requires_grad_(), norm.bias.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: _LightWaveJointLayerNormFn.apply(*a, 0.3, 1e-5), (x, d, f, lam, w, b))
