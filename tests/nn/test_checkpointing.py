"""Gradient checkpointing of every kind and the per-layer hook of ``WavyDIFFormer.forward``."""
import pytest
import torch

from wavygraph.config import ConfigError, load_config
from wavygraph.nn import WavyDIFFormer
from wavygraph.nn.checkpointing import default_segments, segment_bounds
from wavygraph.nn.validate import InputError
from wavygraph.nn.model_args import RECIPE_ARGS


def recipe(*sizes, **kw):
    """WavyDIFFormer with the depth recipe's settings (RECIPE_ARGS), the class defaults these tests were written for."""
    return WavyDIFFormer(*sizes, **{**RECIPE_ARGS, **kw})


N = 12
EDGES = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 0, 6, 7, 8, 9, 10, 11, 2],
                      [1, 0, 2, 1, 4, 3, 5, 4, 5, 0, 8, 7, 10, 9, 3, 11]])
X = torch.randn(N, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


def _model(kind, **kw):
    torch.manual_seed(0)
    model = recipe(5, 8, 3, num_layers=5, residual=kind, **kw).double().train()
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():  # off the identity / zero initialisations (ReZero, FeatScale, norms)
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _grads(model, batch=None, seed=1):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    edges = EDGES if batch is None else EDGES[:, batch[EDGES[0]] == batch[EDGES[1]]]  # no edge across graphs
    out = model(X, edges, batch)
    (out.square().sum() + out[:, 1].sum()).backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_segments():
    assert [default_segments(n) for n in (1, 4, 8, 64, 1000)] == [1, 2, 3, 8, 32]
    assert segment_bounds(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert segment_bounds(3, 8) == [(0, 1), (1, 2), (2, 3)]


@pytest.mark.parametrize("segments", [None, 1, 5])
def test_checkpointed_gradients_equal_plain(residual_kind, segments):
    """Every parameter's gradient and the output equal (float64) with checkpointing, for every
    registered kind, with the FFN, the source, FeatScale, ReZero and dropout (masks repeat)."""
    model = _model(residual_kind, ffn=True, source=True, source_weight=0.5, featscale=True, dropout=0.3,
                   force_scale="rezero")
    out, plain = _grads(model)
    with torch.no_grad():
        assert not torch.allclose(model.eval()(X, EDGES), out)  # dropout was on
    model.train()
    model.gradient_checkpointing, model.checkpoint_segments = True, segments
    out_ckpt, ckpt = _grads(model)
    torch.testing.assert_close(out_ckpt, out, rtol=0, atol=1e-12)
    # every gradient is non-zero but light_wave's first lam (X - X_prev = 0 at the first layer)
    assert [n for n, g in plain.items() if g.abs().max() == 0] in ([], ["layers.0.stepper.theta"])
    for name, g in plain.items():
        torch.testing.assert_close(ckpt[name], g, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("kind", ["light_wave", "wave", "leapfrog"])
@pytest.mark.parametrize("opts", [dict(shared_attention=True, dropout_at="force"), dict(norm="pair"),
                                  dict(heads=2, kernel="sigmoid", ffn=True)])
def test_checkpointed_with_a_batch_of_graphs(kind, opts):
    batch = torch.tensor([0] * 5 + [1] * 7)
    model = _model(kind, dropout=0.2, **opts)
    out, plain = _grads(model, batch)
    model.gradient_checkpointing = True
    out_ckpt, ckpt = _grads(model, batch)
    torch.testing.assert_close(out_ckpt, out, rtol=0, atol=1e-12)
    for name, g in plain.items():
        torch.testing.assert_close(ckpt[name], g, rtol=1e-10, atol=1e-12, msg=name)


def test_checkpointing_saves_fewer_tensors_and_is_off_in_evaluation():
    def saved(model, grad=True):
        count = [0]

        def pack(t):
            count[0] += 1
            return t

        with torch.set_grad_enabled(grad), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(X, EDGES)
        return count[0]

    plain = saved(recipe(5, 8, 3, num_layers=16, residual="mix").double().train())
    ckpt = saved(recipe(5, 8, 3, num_layers=16, residual="mix", gradient_checkpointing=True).double().train())
    assert ckpt < plain / 3
    # evaluation (or no autograd) runs the plain loop
    ev = recipe(5, 8, 3, num_layers=16, residual="mix", gradient_checkpointing=True).double().eval()
    assert saved(ev) == saved(recipe(5, 8, 3, num_layers=16, residual="mix").double().eval())


@pytest.mark.parametrize("mode", ["plain", "checkpointed", "segments", "reversible", "eval", "no_grad"])
def test_layer_hook_sees_every_state_once_in_every_mode(mode):
    kind = "leapfrog" if mode == "reversible" else "light_wave"
    torch.manual_seed(0)
    model = recipe(5, 8, 3, num_layers=6, residual=kind, dropout=0.2, reversible=mode == "reversible",
                          gradient_checkpointing=mode in ("checkpointed", "segments"),
                          checkpoint_segments=2 if mode == "segments" else None).double()
    model.train(mode != "eval")
    calls = []
    with torch.set_grad_enabled(mode != "no_grad"):
        torch.manual_seed(3)
        out, hidden = model(X, EDGES, return_hidden=True, layer_hook=lambda i, x: calls.append((i, x.detach())))
        if out.requires_grad:
            out.sum().backward()  # a recomputation calls no hook
    assert [i for i, _ in calls] == list(range(7))
    assert all(x.shape == (N, 8) for _, x in calls)
    for (_, a), b in zip(calls, hidden):
        assert torch.equal(a, b.detach())
    plain = recipe(5, 8, 3, num_layers=6, residual=kind, dropout=0.2).double().train(mode != "eval")
    plain.load_state_dict(model.state_dict())
    torch.manual_seed(3)
    with torch.set_grad_enabled(mode != "no_grad"):
        _, ref = plain(X, EDGES, return_hidden=True)  # the same states as without the memory options
    for a, b in zip(hidden, ref):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("segments, recomputed", [(None, [0, 1, 2, 3]), (3, [0, 1, 2, 3]), (6, [0, 1, 2, 3, 4]),
                                                   (1, [])])
def test_backward_recomputes_every_segment_but_the_last(segments, recomputed):
    """6 layers: default ceil(sqrt(6)) = 3 segments (0-1, 2-3, 4-5); backward reruns layers 0-3 once,
    never the last segment, whose tensors it needs first (one segment: nothing to recompute)."""
    model = recipe(5, 8, 3, num_layers=6, residual="light_wave", gradient_checkpointing=True,
                          checkpoint_segments=segments).double().train()
    calls = []
    for i, stepper in enumerate(model.steppers):
        stepper.register_forward_hook(lambda mod, args, out, i=i: calls.append(i))
    out = model(X, EDGES)
    assert calls == list(range(6))
    calls.clear()
    out.sum().backward()
    assert sorted(calls) == recomputed


def test_without_return_hidden_no_list_is_kept():
    model = recipe(5, 8, 3, num_layers=3).double()
    assert isinstance(model(X, EDGES), torch.Tensor)


def test_one_line_errors():
    with pytest.raises(InputError, match=r"^checkpoint_segments=2 needs gradient_checkpointing=True$"):
        WavyDIFFormer(5, 8, 3, checkpoint_segments=2)
    with pytest.raises(InputError, match="checkpoint_segments must be a positive integer or None, got 0"):
        WavyDIFFormer(5, 8, 3, gradient_checkpointing=True, checkpoint_segments=0)
    with pytest.raises(InputError, match="gradient_checkpointing must be True or False"):
        WavyDIFFormer(5, 8, 3, gradient_checkpointing="yes")
    cfg = load_config(None, ["model.gradient_checkpointing=true", "model.checkpoint_segments=4"])
    assert cfg.model.gradient_checkpointing is True and cfg.model.checkpoint_segments == 4
    with pytest.raises(ConfigError, match=r"^model.checkpoint_segments=4 needs model.gradient_checkpointing=true$"):
        load_config(None, ["model.checkpoint_segments=4"])
