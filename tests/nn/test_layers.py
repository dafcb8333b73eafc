"""The model as embed -> layers -> head: layer modules, memory modes as wrappers over them, one source of the
model's arguments, and state_dicts saved before the layers were modules."""
import dataclasses
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from wavygraph.config import ConfigError, load_config, wavy_model_keys
from wavygraph.nn import STEPPERS, WavyDIFFormer
from wavygraph.nn.layer import PostNormLayer, PreNormLayer
from wavygraph.nn.model_args import DIFFORMER_ARGS, RECIPE_ARGS, ModelArgs
from wavygraph.nn.validate import InputError

EDGES = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 0, 6, 7, 8, 9, 10, 11, 2],
                      [1, 0, 2, 1, 4, 3, 5, 4, 5, 0, 8, 7, 10, 9, 3, 11]])
BATCH = torch.tensor([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
BATCH_EDGES = EDGES[:, BATCH[EDGES[0]] == BATCH[EDGES[1]]]  # an edge across graphs of a batch is refused
LEAPFROG = dict(RECIPE_ARGS, residual="leapfrog", num_layers=4, tau=0.7, dropout=0.3)


def _x(seed=0):
    return torch.randn(12, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _model(**kw):
    torch.manual_seed(0)
    model = WavyDIFFormer(5, 8, 3, **kw).double()
    with torch.no_grad():  # away from the initialisation (ReZero's 0, LayerNorm's 1 and 0)
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model


_FLAT = {"force.conv": "convs", "stepper": "steppers", "norm": "norms", "force.ffn": "ffns",
         "force.ffn_norm": "ffn_norms", "force.featscale": "featscales"}
_LAYER_KEY = re.compile(r"layers\.(\d+)\.(force\.conv|stepper|norm|force\.ffn_norm|force\.ffn|force\.featscale)\.(.*)")


def _flat_name(key: str) -> str:
    """A key of the model under its name before the layers were modules."""
    match = _LAYER_KEY.fullmatch(key)
    if match:
        return f"{_FLAT[match.group(2)]}.{match.group(1)}.{match.group(3)}"
    return "alpha" if key.endswith("force.alpha") else key


def _flat_state_dict(model) -> dict:
    """The model's state_dict under the keys of the model before its layers were modules."""
    return {_flat_name(key): value.clone() for key, value in model.state_dict().items()}


@pytest.mark.parametrize("kw", [dict(residual="mix", ffn=True, featscale=True, force_scale="rezero"),
                                dict(LEAPFROG, ffn=True, force_scale="rezero"),
                                dict(RECIPE_ARGS, residual="wave", norm="pair")])
def test_a_state_dict_saved_before_the_layers_were_modules_loads_strictly(kw):
    saved = _model(**kw).eval()
    flat = _flat_state_dict(saved)
    assert any(k.startswith("convs.") for k in flat) and not any(k.startswith("layers.") for k in flat)
    fresh = _model(**dict(kw, num_layers=kw.get("num_layers", 3)))
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(flat, strict=True)
    fresh.eval()
    torch.testing.assert_close(fresh(_x(), EDGES), saved(_x(), EDGES), rtol=0, atol=0)
    if kw.get("force_scale") == "rezero":
        assert fresh.alpha is fresh.layers[-1].force.alpha and fresh.alpha.abs().sum() > 0


def test_layers_are_modules_chosen_by_the_kind():
    for name, cls in STEPPERS.items():
        model = WavyDIFFormer(5, 8, 3, residual=name, num_layers=2)
        assert all(type(layer) is (PreNormLayer if cls.pre_norm else PostNormLayer) for layer in model.layers)
        assert (model.final_norm is not None) == bool(cls.pre_norm)
    model = WavyDIFFormer(5, 8, 3, **RECIPE_ARGS)
    assert model.layers[0].force.conv is model.layers[2].force.conv  # shared attention: one module


def test_model_module_holds_no_memory_mode_code():
    source = (Path(__file__).parents[2] / "wavygraph" / "nn" / "model.py").read_text()
    assert not re.search("reversible|checkpoint", source, re.IGNORECASE)


class _Gain(nn.Module):
    """A sub-module added to a layer from outside: a learnable gain on the attention output."""

    def __init__(self, channels):
        super().__init__()
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, channels, dtype=torch.float64))

    def forward(self, out, batch=None):
        return out * self.gain


def _grads(model, x, hidden_loss: bool):
    torch.manual_seed(11)
    model.zero_grad(set_to_none=True)
    out, hidden = model(x, BATCH_EDGES, BATCH, return_hidden=True)
    loss = out.square().sum()
    if hidden_loss:  # every hidden state, the embedding and the last one included
        loss = loss + sum((k + 1) * (h.sin() * h).sum() for k, h in enumerate(hidden))
    loss.backward()
    return out.detach(), [h.detach() for h in hidden], {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dropout_at", ["state", "force"])
def test_reversible_gives_a_sub_module_added_to_a_layer_its_gradient(dropout_at):
    """The memory modes take a layer's parameters from ``layer.parameters()``: a new sub-module needs no listing."""
    model = _model(**dict(LEAPFROG, dropout_at=dropout_at)).train()
    for layer in model.layers:
        layer.force.featscale = _Gain(8)  # used by Force.attention, registered by assignment
    x = _x()
    out_plain, _, plain = _grads(model, x, hidden_loss=False)
    model.reversible = True
    out_rev, _, rev = _grads(model, x, hidden_loss=False)
    torch.testing.assert_close(out_rev, out_plain, rtol=0, atol=1e-12)
    gains = [n for n in plain if n.endswith("featscale.gain")]
    assert len(gains) == 4 and set(plain) == set(rev)
    for name, g in plain.items():
        assert g.abs().max() > 0, name
        torch.testing.assert_close(rev[name], g, rtol=1e-9, atol=1e-11, msg=name)


@pytest.mark.parametrize("opts", [dict(ffn=True, source=True, force_scale="rezero"),
                                  dict(dropout_at="state", norm="pair", source_weight=0.5)])
def test_reversible_hidden_states_carry_their_gradients(opts):
    """return_hidden=True under reversible=True: a loss on the hidden states gives the parameter (and input)
    gradients of the plain mode, in float64."""
    model = _model(**dict(LEAPFROG, **opts)).train()
    x = _x().requires_grad_(True)
    out_plain, hid_plain, plain = _grads(model, x, hidden_loss=True)
    gx_plain, x.grad = x.grad.clone(), None
    model.reversible = True
    out_rev, hid_rev, rev = _grads(model, x, hidden_loss=True)
    torch.testing.assert_close(out_rev, out_plain, rtol=0, atol=1e-12)
    assert len(hid_rev) == 5
    for a, b in zip(hid_rev, hid_plain):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    for name, g in plain.items():
        assert g.abs().max() > 0, name
        torch.testing.assert_close(rev[name], g, rtol=1e-9, atol=1e-11, msg=name)
    torch.testing.assert_close(x.grad, gx_plain, rtol=1e-9, atol=1e-11)
    # the hidden states' own terms matter: without them the gradients differ
    _, _, out_only = _grads(model, x, hidden_loss=False)
    assert max((out_only[n] - g).abs().max() for n, g in plain.items()) > 1e-3


def test_python_and_config_defaults_are_one_set():
    """WavyDIFFormer(in, hidden, out) and a config without model keys resolve the same arguments."""
    cfg = load_config(None)
    args = ModelArgs(hidden_channels=8)
    assert set(wavy_model_keys()) == {f.name for f in dataclasses.fields(ModelArgs)}
    for name in wavy_model_keys():
        if name != "hidden_channels":
            assert cfg.model[name] == getattr(args, name), name
    assert WavyDIFFormer(5, 8, 3).args == args
    from wavygraph.data import DatasetInfo
    from wavygraph.train.models import build_model

    info = DatasetInfo(name="toy", task="multiclass", metric="acc", num_features=5, num_outputs=3)
    torch.manual_seed(0)
    built = build_model(cfg, info)
    torch.manual_seed(0)
    direct = WavyDIFFormer(5, 64, 3)
    assert built.args == direct.args
    x = torch.randn(12, 5)
    built.eval(), direct.eval()
    torch.testing.assert_close(built(x, EDGES), direct(x, EDGES), rtol=0, atol=0)
    assert {k: v for k, v in DIFFORMER_ARGS.items() if k != "dropout"} == {
        k: getattr(args, k) for k in DIFFORMER_ARGS if k != "dropout"}  # DIFFormer's model: its dropout away


def test_per_kind_defaults_live_on_the_stepper_classes():
    for name, cls in STEPPERS.items():
        model = WavyDIFFormer(5, 8, 3, residual=name, tau=None, residual_options=None)
        assert all(st.tau == cls.default_tau for st in model.steppers), name
    assert STEPPERS["leapfrog"].default_tau == 0.5 and STEPPERS["diffusion"].default_tau == 1.0
    assert WavyDIFFormer(5, 8, 3, residual="mix", residual_options=None).steppers[0].lam0 == 0.1


@pytest.mark.parametrize("key, value, choices", [("norm", "group", "'layer', 'batch', 'pair', 'none'"),
                                                 ("dropout_at", "attention", "'state', 'force'"),
                                                 ("kernel", "softmax", "'simple', 'sigmoid'"),
                                                 ("local", "sage", "'gcn', 'sep'")])
def test_one_wording_for_a_bad_choice(key, value, choices):
    with pytest.raises(InputError, match=rf"^unknown {key} '{value}'; choose one of {choices}$"):
        WavyDIFFormer(5, 8, 3, **{key: value})
    with pytest.raises(ConfigError, match=rf"^unknown model.{key} '{value}'; choose one of {choices}$"):
        load_config(None, [f"model.{key}={value}"])


def test_parameters_keep_the_order_of_the_flat_model():
    """An optimiser's state is stored by parameter position: the order is that of the model before its layers were
    modules (written out here for one model), so a checkpoint's optimiser state from then still matches."""
    model = WavyDIFFormer(5, 8, 3, num_layers=2, residual="mix", ffn=True, featscale=True, force_scale="rezero",
                          shared_attention=True)
    names = [_flat_name(n) for n, _ in model.named_parameters()]
    expected = ["alpha", "input.weight", "input.bias", "input_norm.weight", "input_norm.bias", "convs.0.qkv.weight",
                "convs.0.qkv.bias", "steppers.0.theta", "steppers.1.theta"]
    expected += [f"norms.{i}.{w}" for i in range(2) for w in ("weight", "bias")]
    expected += [f"ffns.{i}.{lin}.{w}" for i in range(2) for lin in ("lin1", "lin2") for w in ("weight", "bias")]
    expected += [f"ffn_norms.{i}.{w}" for i in range(2) for w in ("weight", "bias")]
    expected += [f"featscales.{i}.{w}" for i in range(2) for w in ("weight_dc", "weight_hc")]
    assert names == expected + ["output.weight", "output.bias"]
    assert [id(p) for p in model.parameters()] == [id(p) for _, p in model.named_parameters()]

