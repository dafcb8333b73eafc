"""The ``leapfrog`` kind (pre-norm wave, invertible) and reversible
backpropagation (``WavyDIFFormer(..., reversible=True)``)."""
import pytest
import torch
import torch.nn.functional as F

from wavygraph.config import ConfigError, load_config
from wavygraph.nn import STEPPERS, LeapfrogStepper, StepState, WavyDIFFormer, make_stepper
from wavygraph.nn.joint_norm import JointPairNorm
from wavygraph.nn.prenorm import graph_layer_norm
from wavygraph.nn.reversible import invertible_kinds, rebuild, reconstruction_error, seeded_dropout
from wavygraph.nn.validate import InputError
from wavygraph.nn.model_args import RECIPE_ARGS


def recipe(*sizes, **kw):
    """WavyDIFFormer with the depth recipe's settings (RECIPE_ARGS), the class defaults these tests were written for."""
    return WavyDIFFormer(*sizes, **{**RECIPE_ARGS, **kw})


N = 12
EDGES = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 0, 6, 7, 8, 9, 10, 11, 2],
                      [1, 0, 2, 1, 4, 3, 5, 4, 5, 0, 8, 7, 10, 9, 3, 11]])


def _within(batch):
    """The edges of EDGES inside the graphs of ``batch`` (an edge across graphs is refused)."""
    return EDGES[:, batch[EDGES[0]] == batch[EDGES[1]]]


def _x(dtype=torch.float64, seed=0):
    return torch.randn(N, 5, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _model(**kw):
    torch.manual_seed(0)
    opts = dict(num_layers=4, residual="leapfrog", tau=0.7, dropout=0.0)  # dropout: where a test sets it
    opts.update(kw)
    return recipe(5, 8, 3, **opts).double()


def _ln(h, norm):
    """PairNorm's centring and scale over the graph's nodes with the LayerNorm's weight and bias."""
    hc = h - h.mean(0, keepdim=True)
    return norm.weight * hc / (hc.pow(2).sum(1).mean() + norm.eps).sqrt() + norm.bias


def _randomise(model, seed=5):
    """Non-trivial norms, FeatScale and ReZero scales (their init is the identity or zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def test_graph_layer_norm_takes_the_statistics_of_each_graph():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(N, 6, dtype=torch.float64, generator=g) * torch.arange(1, N + 1, dtype=torch.float64)[:, None]
    w, b = torch.randn(6, dtype=torch.float64, generator=g), torch.randn(6, dtype=torch.float64, generator=g)
    batch = torch.tensor([0] * 4 + [1] * 8)
    out = graph_layer_norm(x, w, b, 1e-5, batch)
    for graph in (slice(0, 4), slice(4, N)):
        xs = x[graph]
        n = xs.shape[0]
        mean = sum(xs[i] for i in range(n)) / n
        ms = sum(((xs[i] - mean) ** 2).sum() for i in range(n)) / n
        ref = torch.stack([w * (xs[i] - mean) / (ms + 1e-5) ** 0.5 + b for i in range(n)])
        torch.testing.assert_close(out[graph], ref, rtol=0, atol=1e-12)
    ones, zeros = torch.ones(6, dtype=torch.float64), torch.zeros(6, dtype=torch.float64)
    torch.testing.assert_close(graph_layer_norm(x, ones, zeros), JointPairNorm(6)(x)[0], rtol=0, atol=1e-12)


def test_registered_with_its_class_attributes():
    assert STEPPERS["leapfrog"] is LeapfrogStepper
    assert LeapfrogStepper.pre_norm and LeapfrogStepper.invertible and LeapfrogStepper.second_order
    assert invertible_kinds() == ["leapfrog"]
    assert repr(make_stepper("leapfrog", 4, 0.3)) == "LeapfrogStepper(4, tau=0.3)"


def test_step_and_inverse_are_the_literal_formulas():
    g = torch.Generator().manual_seed(1)
    x, v = (torch.randn(6, 4, dtype=torch.float64, generator=g) for _ in range(2))
    w = torch.randn(4, 4, dtype=torch.float64, generator=g)

    def force(z):
        return torch.tanh(z @ w)

    st = make_stepper("leapfrog", 4, 0.4)
    x1, v1 = st(StepState(x, v), force(x))
    v_ref = v + 0.4 * torch.tanh(x @ w)
    torch.testing.assert_close(v1, v_ref, rtol=0, atol=1e-14)
    torch.testing.assert_close(x1, x + 0.4 * v_ref, rtol=0, atol=1e-14)
    x0, v0 = st.inverse(x1, v1, force, st.tau)
    torch.testing.assert_close(x0, x, rtol=0, atol=1e-13)
    torch.testing.assert_close(v0, v, rtol=0, atol=1e-13)


@pytest.mark.parametrize("ffn", [False, True])
def test_model_is_the_pre_norm_leapfrog(ffn):
    """Y' = Y + tau F(X), X' = X + tau Y', F = G - mean over the nodes of G, G = a (A(Z) Z - Z) + w (X0 - Z)
    [+ FFN(N'(X))], Z = N(X) with the graph's statistics and the LayerNorm's weight and bias; an ordinary
    final LayerNorm before the output layer; every hidden state compared."""
    model = _model(source=True, source_weight=0.3, force_scale="rezero", featscale=True, ffn=ffn).eval()
    _randomise(model)
    x = _x()
    out, hidden = model(x, EDGES, return_hidden=True)
    h = F.relu(model.input_norm(model.input(x)))
    ref_hidden, y = [h], torch.zeros_like(h)
    for i in range(4):
        z = _ln(h, model.norms[i])
        f = model.alpha[i] * (model.featscales[i](model.convs[i](z, EDGES)) - z) + 0.3 * (ref_hidden[0] - z)
        if ffn:
            zf = _ln(h, model.ffn_norms[i])
            f = f + model.ffns[i].lin2(F.gelu(model.ffns[i].lin1(zf)))
        f = f - f.mean(0)
        y = y + 0.7 * f
        h = h + 0.7 * y
        ref_hidden.append(h)
    final = F.layer_norm(h, (8,), model.final_norm.weight, model.final_norm.bias, model.final_norm.eps)
    torch.testing.assert_close(out, model.output(final), rtol=0, atol=1e-12)
    for a, b in zip(hidden, ref_hidden):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_the_graph_mean_does_not_drift():
    """The force is centred over each graph's nodes: over 1,000 layers the graph's mean of X stays the
    embedding's (per graph of a batch) while the nodes keep moving; without the centring the mean of this
    force (beta against X_0's mean) pushes it to ~1e4 by layer 1,000."""
    batch = torch.tensor([0] * 5 + [1] * 7)
    model = _model(num_layers=1000, tau=0.5, source=True, source_weight=0.5).eval()
    with torch.no_grad():
        for norm in model.norms:
            norm.bias.copy_(torch.linspace(-1, 1, 8, dtype=norm.bias.dtype))
    _, hidden = model(_x(), _within(batch), batch, return_hidden=True)
    means = [torch.stack([h[batch == b].mean(0) for b in (0, 1)]) for h in hidden]
    for m in means[1:]:
        torch.testing.assert_close(m, means[0], rtol=0, atol=1e-9)
    assert (hidden[-1] - hidden[0]).abs().max() > 0.1


def test_seeded_dropout_repeats_its_mask_and_scales():
    t = torch.ones(200, 30, dtype=torch.float64)
    a, b, c = seeded_dropout(t, 0.4, 7, 3), seeded_dropout(t, 0.4, 7, 3), seeded_dropout(t, 0.4, 7, 4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert set(a.unique().tolist()) == {0.0, 1 / 0.6}
    assert abs((a == 0).double().mean().item() - 0.4) < 0.03
    assert seeded_dropout(t, 0.4, None, 3) is t and seeded_dropout(t, 0.0, 7, 3) is t


def _grads(model, x, batch=None, seed=1):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    out = model(x, EDGES, batch)
    (out.square().sum() + out[:, 0].sum()).backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dropout_at", ["state", "force"])
@pytest.mark.parametrize("opts", [dict(ffn=True, source=True, featscale=True, force_scale="rezero"),
                                  dict(shared_attention=True, norm="pair", source=True, source_weight=0.5),
                                  dict(norm="none", heads=2, kernel="sigmoid")])
def test_reversible_gradients_equal_plain_gradients(dropout_at, opts):
    """Every parameter's gradient by inversion equals the stored-graph gradient (float64), with
    dropout inside the force (the seeded masks repeat in the backward pass)."""
    model = _model(num_layers=6, dropout=0.3, dropout_at=dropout_at, **opts).train()
    _randomise(model)
    x = _x()
    out_plain, plain = _grads(model, x)
    model.reversible = True
    out_rev, rev = _grads(model, x)
    torch.testing.assert_close(out_rev, out_plain, rtol=0, atol=1e-12)
    for name, g in plain.items():
        assert g.abs().max() > 0, name
        torch.testing.assert_close(rev[name], g, rtol=1e-9, atol=1e-11, msg=name)
    torch.manual_seed(2)
    assert not torch.allclose(model(x, EDGES), out_rev)  # another seed, other masks
    with torch.no_grad():  # evaluation: no dropout, the plain loop in both modes
        ev = model.eval()(x, EDGES)
        model.reversible = False
        torch.testing.assert_close(model(x, EDGES), ev, rtol=0, atol=0)


def test_reversible_with_a_batch_of_graphs_and_the_input_gradient():
    model = _model(num_layers=5, source=True, reversible=True).train()
    _randomise(model)
    x = _x().requires_grad_(True)
    batch = torch.tensor([0] * 6 + [1] * 6)
    out = model(x, _within(batch), batch)
    (gx,) = torch.autograd.grad(out.square().sum(), x)
    model.reversible = False
    (ref,) = torch.autograd.grad(model(x, _within(batch), batch).square().sum(), x)
    torch.testing.assert_close(gx, ref, rtol=1e-9, atol=1e-11)


def _saved_tensors(model, x):
    count = [0]

    def pack(t):
        count[0] += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x, EDGES)
    out.sum().backward()
    return count[0]


def test_reversible_keeps_no_per_layer_tensors():
    """The number of tensors saved for backward does not grow with the depth (it does without)."""
    x = _x()
    rev = [_saved_tensors(_model(num_layers=n, reversible=True, dropout=0.2, ffn=True).train(), x) for n in (2, 8, 32)]
    plain = [_saved_tensors(_model(num_layers=n, dropout=0.2, ffn=True).train(), x) for n in (2, 8)]
    assert rev[0] == rev[1] == rev[2]
    assert plain[1] > plain[0] + 6 * 5  # the test can fail: every layer saves several tensors


def test_rebuild_recovers_the_input_state():
    model = _model(num_layers=32, source=True, ffn=True).eval()
    _randomise(model)
    h, ctx = model.embed(_x(), EDGES, None)
    x, v = h, torch.zeros_like(h)
    with torch.no_grad():
        for layer in model.layers:
            x, v = layer(StepState(x, v), ctx)
    x_back, v_back = rebuild(model.layers, StepState(x, v), ctx)
    assert (x - h).abs().max() > 1.0  # the state moved
    torch.testing.assert_close(x_back, h, rtol=0, atol=1e-9)
    torch.testing.assert_close(v_back, torch.zeros_like(h), rtol=0, atol=1e-9)
    assert reconstruction_error(model, _x(), EDGES) < 1e-12  # the same, relative, by the library


def test_one_line_errors():
    with pytest.raises(InputError, match=r"^reversible=True needs a residual kind with an inverse \('leapfrog'\), "
                                         r"got 'wave'$"):
        WavyDIFFormer(5, 8, 3, residual="wave", reversible=True)
    with pytest.raises(InputError, match="already stores no layer state; set gradient_checkpointing=False"):
        WavyDIFFormer(5, 8, 3, residual="leapfrog", reversible=True, gradient_checkpointing=True)
    with pytest.raises(InputError, match="reversible must be True or False"):
        WavyDIFFormer(5, 8, 3, residual="leapfrog", reversible=1)
    base = ["model.residual=leapfrog", "model.reversible=true"]
    assert load_config(None, base).model.reversible is True
    with pytest.raises(ConfigError, match=r"^model.reversible=true needs a residual kind with an inverse "
                                          r"\('leapfrog'\), got 'mix'$"):
        load_config(None, ["model.residual=mix", "model.reversible=true"])
    with pytest.raises(ConfigError, match="set model.gradient_checkpointing=false"):
        load_config(None, base + ["model.gradient_checkpointing=true"])


def test_reversible_under_autocast_recomputes_in_the_same_precision():
    """bfloat16 autocast on the CPU: the backward pass recomputes the force under autocast too;
    the gradients are those of the stored graph up to bfloat16 rounding."""
    torch.manual_seed(0)
    model = recipe(5, 16, 3, num_layers=4, residual="leapfrog", source=True, dropout=0.0).train()
    x = _x(torch.float32)
    grads = []
    for reversible in (False, True):
        model.reversible = reversible
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x, EDGES)
        assert out.dtype == torch.bfloat16
        out.float().square().sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.isfinite(grads[1]).all()
    assert (grads[1] - grads[0]).norm() < 0.01 * grads[0].norm()
