"""``tau_layers``: the step ``tau * tau_layers / num_layers``, the same time span at every depth."""
import math

import pytest
import torch

from wavygraph.config import ConfigError, load_config
from wavygraph.nn import STEPPERS, StepState, WavyDIFFormer, make_stepper
from wavygraph.nn.model_args import ModelArgs
from wavygraph.nn.validate import InputError

EDGES = torch.tensor([[0, 1, 1, 2, 3, 4, 2, 5, 6, 0], [1, 0, 2, 1, 4, 3, 5, 2, 0, 6]])


@pytest.mark.parametrize("residual,tau,tau_layers,layers,step", [
    ("leapfrog", 0.5, 16, 64, 0.125),
    ("leapfrog", 0.5, 16, 16, 0.5),
    ("leapfrog", 0.5, 16, 7, 0.5 * 16 / 7),
    ("leapfrog", 0.5, None, 64, 0.5),
    ("light_wave", None, 4, 12, STEPPERS["light_wave"].default_tau * 4 / 12),
])
def test_step_size_is_tau_scaled_to_the_depth(residual, tau, tau_layers, layers, step):
    args = ModelArgs(residual=residual, tau=tau, tau_layers=tau_layers, num_layers=layers)
    assert args.step_size() == pytest.approx(step, rel=1e-15)


@pytest.mark.parametrize("residual,reversible", [("leapfrog", True), ("leapfrog", False), ("light_wave", False)])
def test_model_equals_the_model_with_the_scaled_step(residual, reversible):
    """Every layer's stepper takes tau * tau_layers / L; the model's outputs, hidden states and gradients are
    those of the model built with that step written out (7 layers: a step that is not a round number)."""
    x = torch.randn(7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    runs = []
    for kw in (dict(tau=0.6, tau_layers=3), dict(tau=0.6 * 3 / 7)):
        torch.manual_seed(0)
        model = WavyDIFFormer(5, 8, 3, num_layers=7, residual=residual, reversible=reversible, dropout=0.0,
                              source=True, **kw).double()
        assert all(layer.stepper.tau == pytest.approx(0.6 * 3 / 7, rel=1e-15) for layer in model.layers)
        out, hidden = model(x, EDGES, return_hidden=True)
        out.square().sum().backward()
        runs.append((out, hidden, [p.grad for p in model.parameters()]))
    (out_a, hid_a, grad_a), (out_b, hid_b, grad_b) = runs
    torch.testing.assert_close(out_a, out_b, rtol=0, atol=1e-13)
    for a, b in zip(hid_a + grad_a, hid_b + grad_b):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_leapfrog_integrates_the_same_time_span_at_every_depth():
    """x'' = -x from x = 1, v = 0: L leapfrog steps of tau * tau_layers / L end at cos(T), T = tau * tau_layers,
    to the position's first-order error (Y0 = 0 starts the velocity half a step late), however deep."""
    def end(layers):
        stepper = make_stepper("leapfrog", 1, ModelArgs(residual="leapfrog", tau=0.5, tau_layers=16,
                                                        num_layers=layers).step_size())
        state = StepState(torch.ones(1, 1, dtype=torch.float64), torch.zeros(1, 1, dtype=torch.float64))
        for _ in range(layers):
            state = StepState(*stepper(state, -state.x))
        return state.x.item()

    errors = [abs(end(layers) - math.cos(8.0)) for layers in (64, 256, 1024)]
    for coarse, fine in zip(errors, errors[1:]):  # 4 times the layers, a quarter of the step: a quarter the error
        assert 3.5 < coarse / fine < 4.5
    assert errors[-1] < 0.005


@pytest.mark.parametrize("value", [0, -16, 2.5, True, "16"])
def test_bad_tau_layers_is_one_line(value):
    with pytest.raises(InputError, match=r"^tau_layers must be a positive integer, got"):
        WavyDIFFormer(5, 8, 3, tau_layers=value)


def test_bad_tau_layers_in_a_config_names_the_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  residual: leapfrog\n  tau_layers: 0\n")
    with pytest.raises(ConfigError, match=r"model\.tau_layers must be a positive integer, got 0"):
        load_config(str(path))
