"""A residual kind defined outside the package, registered through the
public function, trains through the model and through ``wavygraph train``
(its module named in the config's ``imports``), with no package file changed."""
import json
import sys
import textwrap

import pytest
import torch

from wavygraph.cli import main
from wavygraph.nn import STEPPERS, WavyDIFFormer, unregister_stepper
from wavygraph.nn.model_args import RECIPE_ARGS


def recipe(*sizes, **kw):
    """WavyDIFFormer with the depth recipe's settings (RECIPE_ARGS), the class defaults these tests were written for."""
    return WavyDIFFormer(*sizes, **{**RECIPE_ARGS, **kw})


PLUGIN = textwrap.dedent('''
    import torch
    from wavygraph.nn import Stepper, register_stepper


    class DampedWave(Stepper):
        """A damped wave: Y' = (1 - gamma) Y + tau F; X' = X + tau Y'."""

        second_order = True

        def __init__(self, channels, tau=0.5, gamma: float = 0.1):
            super().__init__(channels, tau)
            if not 0.0 <= gamma <= 1.0:
                raise ValueError(f"gamma must lie in [0, 1], got {gamma!r}")
            self.gamma = gamma

        def forward(self, state, force):
            v = (1.0 - self.gamma) * state.v + self.tau * force
            return type(state)(state.x + self.tau * v, v)

        @staticmethod
        def update(x, v, force, tau, lam):
            raise NotImplementedError("the compiled path needs a pure update; this plugin runs eager")


    register_stepper("damped_wave_plugin", DampedWave)
''')


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "wavy_plugin_test.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    yield "wavy_plugin_test"
    unregister_stepper("damped_wave_plugin")
    sys.modules.pop("wavy_plugin_test", None)
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def test_external_stepper_through_the_model(plugin):
    sys.path.insert(0, ".")
    __import__(plugin)
    assert "damped_wave_plugin" in STEPPERS
    torch.manual_seed(0)
    model = recipe(5, 8, 3, num_layers=3, residual="damped_wave_plugin", residual_options={"gamma": 0.2})
    x = torch.randn(20, 5)
    ei = torch.randint(0, 20, (2, 60))
    out = model(x, ei)
    out.square().sum().backward()
    assert torch.isfinite(out).all() and model.input.weight.grad is not None
    # the velocity goes through the joint LayerNorm: it matters for the output
    with torch.no_grad():
        other = recipe(5, 8, 3, num_layers=3, residual="damped_wave_plugin", residual_options={"gamma": 1.0})
        other.load_state_dict(model.state_dict())
        assert (other(x, ei) - model(x, ei)).abs().max() > 1e-4


def test_external_stepper_through_wavygraph_train(plugin, tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "data.name=csbm", "data.csbm.preset=small", "data.csbm.num_nodes=300", "train.epochs=3",
               "model.num_layers=2", "model.hidden_channels=16", "train.progress=false", "train.diagnostics=false",
               f"imports=[{plugin}]", "model.residual=damped_wave_plugin", "model.residual_options.gamma=0.3",
               f"out_dir={out}"])
    assert rc == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["test"] <= 1.0
    assert "damped_wave_plugin" in (out / "config.yaml").read_text()


def test_unknown_plugin_and_option_are_one_line_errors(plugin, tmp_path, capsys):
    rc = main(["train", "imports=[no_such_plugin_module]", f"out_dir={tmp_path / 'a'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "no_such_plugin_module" in err
    rc = main(["train", f"imports=[{plugin}]", "model.residual=damped_wave_plugin", "model.residual_options.lam0=0.5",
               f"out_dir={tmp_path / 'b'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "takes no option lam0" in err and "gamma" in err


@pytest.mark.slow
def test_external_stepper_in_the_demo_sweep_with_workers(plugin, tmp_path):
    """The demo (and so the sweep) picks up a registered plugin kind; its
    module goes into the sweep file's imports, so spawned workers know it."""
    sys.path.insert(0, ".")
    __import__(plugin)
    from wavygraph.demo import demo_sweep_file
    from wavygraph.sweep import load_sweep, run_sweep

    out = tmp_path / "demo"
    path = demo_sweep_file(str(out), depths=[2], seeds=[0], epochs=2, residuals=["wave", "damped_wave_plugin"])
    assert "wavy_plugin_test" in path.read_text()
    sweep = load_sweep(str(path), ["data.csbm.num_nodes=300", "model.hidden_channels=16"])
    counts = run_sweep(sweep, jobs=2, progress=False, log=lambda line: None)
    assert counts["failed"] == 0 and counts["done"] == 2, counts
