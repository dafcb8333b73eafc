"""``norm="batch"``: JointBatchNorm against a literal transcription of its
formula, and every memory mode giving the plain mode's outputs, gradients and
running statistics (the recomputation must not update them a second time)."""
import pytest
import torch

from wavygraph.nn import WavyDIFFormer
from wavygraph.nn.joint_norm import JointBatchNorm, frozen_stats

EPS = 1e-5


def _bn(channels=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    norm = JointBatchNorm(channels).double()
    with torch.no_grad():
        norm.norm.weight.copy_(1 + 0.3 * torch.randn(channels, generator=g, dtype=torch.float64))
        norm.norm.bias.copy_(0.3 * torch.randn(channels, generator=g, dtype=torch.float64))
    return norm


@pytest.mark.parametrize("n", [2, 3, 17])
def test_joint_batch_norm_reference(n):
    g = torch.Generator().manual_seed(n)
    x = 3 * torch.randn(n, 6, generator=g, dtype=torch.float64) + 2
    v = torch.randn(n, 6, generator=g, dtype=torch.float64)
    norm = _bn()
    w, b = norm.norm.weight.detach(), norm.norm.bias.detach()
    xo, vo = norm.train()(x, v)
    mean = x.sum(0) / n
    var = ((x - mean) ** 2).sum(0) / n  # biased, over the nodes
    torch.testing.assert_close(xo, w * (x - mean) / torch.sqrt(var + EPS) + b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(vo, w * v / torch.sqrt(var + EPS), rtol=1e-12, atol=1e-12)
    # running statistics: momentum 0.1 toward the mean and the unbiased variance
    torch.testing.assert_close(norm.norm.running_mean, 0.1 * mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(norm.norm.running_var, 0.9 + 0.1 * var * n / (n - 1), rtol=1e-12, atol=1e-12)
    xe, ve = norm.eval()(x, v)
    rm, rv = norm.norm.running_mean, norm.norm.running_var
    torch.testing.assert_close(xe, w * (x - rm) / torch.sqrt(rv + EPS) + b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ve, w * v / torch.sqrt(rv + EPS), rtol=1e-12, atol=1e-12)
    assert norm(x)[1] is None


def test_frozen_stats_normalise_by_the_batch_and_keep_the_running_statistics():
    x = torch.randn(9, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    norm = _bn().train()
    ref = norm(x)[0]
    before = [t.clone() for t in (norm.norm.running_mean, norm.norm.running_var, norm.norm.num_batches_tracked)]
    with frozen_stats():
        torch.testing.assert_close(norm(x)[0], ref, rtol=0, atol=0)
    after = (norm.norm.running_mean, norm.norm.running_var, norm.norm.num_batches_tracked)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    norm(x)  # outside the context the statistics move again
    assert not torch.equal(norm.norm.running_mean, before[0])


def test_joint_batch_norm_gradcheck():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(7, 4, generator=g, dtype=torch.float64, requires_grad=True)
    norm = _bn(4).train()
    assert torch.autograd.gradcheck(lambda a, b: norm(a, b), (x, v))


EDGES = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5, 0, 6, 7, 8, 9, 10, 11, 2],
                      [1, 0, 2, 1, 4, 3, 5, 4, 5, 0, 8, 7, 10, 9, 3, 11]])


def _step(model, x, seed=1):
    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    out = model(x, EDGES)
    (out.square().sum() + out[:, 1].sum()).backward()
    stats = {n: b.clone() for n, b in model.named_buffers()}
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, stats


@pytest.mark.parametrize("kind, mode", [("light_wave", "checkpointed"), ("diffusion", "checkpointed"),
                                        ("leapfrog", "checkpointed"), ("leapfrog", "reversible")])
def test_memory_modes_equal_plain_with_batch_norm(kind, mode):
    x = torch.randn(12, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    def build():
        torch.manual_seed(0)
        model = WavyDIFFormer(5, 8, 3, num_layers=5, residual=kind, norm="batch", ffn=True, source=True,
                              dropout=0.3, dropout_at="force").double().train()
        with torch.no_grad():  # off the identity initialisations of the norms
            g = torch.Generator().manual_seed(4)
            for p in model.parameters():
                p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        return model

    plain = build()
    out, grads, stats = _step(plain, x)
    model = build()
    setattr(model, "reversible" if mode == "reversible" else "gradient_checkpointing", True)
    out_m, grads_m, stats_m = _step(model, x)
    torch.testing.assert_close(out_m, out, rtol=0, atol=1e-12)
    for name, g in grads.items():
        assert g.abs().max() > 0 or name == "layers.0.stepper.theta", name  # light_wave: X - X_prev = 0 at first
        torch.testing.assert_close(grads_m[name], g, rtol=1e-9, atol=1e-11, msg=name)
    bn = [n for n in stats if n.endswith("running_mean")]
    assert len(bn) >= 5
    for name, s in stats.items():  # updated once per training step, as in the plain mode
        torch.testing.assert_close(stats_m[name], s, rtol=1e-12, atol=1e-12, msg=name)
    with torch.no_grad():  # evaluation reads the running statistics
        torch.testing.assert_close(model.eval()(x, EDGES), plain.eval()(x, EDGES), rtol=0, atol=1e-12)
