"""Every hand-written autograd function and every fast path against a plain
reference written here: dense per-graph attention, explicit loops over graphs,
autograd through plain torch ops, float64, over seeded random shapes with the
corners (equal / unequal / unsorted / reordered graph sizes, with and without
padding rows, 1-node graphs, sizes at the block and bucket thresholds, the
thresholds lowered through monkeypatch)."""
import pytest
import torch

from wavygraph.nn import DIFFormerConv
from wavygraph.nn.buckets import Buckets
from wavygraph.nn.functional import all_pair_attention

DT = torch.float64


# ---------------------------------------------------------------- batches
def make_batch(sizes, order: str, gen: torch.Generator) -> torch.Tensor:
    """Graph index of every node for graphs of ``sizes``: ``sorted`` (PyG's
    layout), ``reordered`` (sorted, graph ids permuted, so the bucket slots
    differ from the graph order) or ``unsorted`` (nodes shuffled)."""
    ids = torch.arange(len(sizes))
    if order == "reordered":
        ids = ids[torch.randperm(len(sizes), generator=gen)]
    batch = torch.repeat_interleave(ids, torch.tensor(sizes))
    if order == "unsorted":
        batch = batch[torch.randperm(batch.numel(), generator=gen)]
    return batch


def per_graph(fn, batch, *tensors):
    """``fn`` on every graph's rows alone (an explicit loop), scattered back."""
    out = None
    for g in batch.unique().tolist():
        idx = (batch == g).nonzero().flatten()
        og = fn(*(t[idx] for t in tensors))
        if out is None:
            out = og.new_zeros((batch.numel(),) + og.shape[1:])
        out = out.index_copy(0, idx, og)  # differentiable
    return out


def grads(out, inputs, weight):
    return torch.autograd.grad((out * weight).sum(), inputs, allow_unused=True)


def assert_close(a, b, tol=1e-10):
    torch.testing.assert_close(a, b, rtol=0, atol=tol)


# ------------------------------------------------------------ the padding
@pytest.mark.parametrize("sizes,order", [((16, 8), "sorted"), ((8, 16), "sorted"), ((8, 8), "unsorted"),
                                         ((17, 8), "sorted"), ((1, 9, 3), "reordered"), ((5,), "sorted")])
def test_pad_unpad_gradients_are_the_index_maps(sizes, order):
    """``pad`` is ``zeros.index_copy(dest)`` and ``unpad`` is ``index_select(dest)``
    with their autograd gradients, also when no padding row exists (then
    both have the same shapes) and twice differentiated."""
    gen = torch.Generator().manual_seed(0)
    batch = make_batch(sizes, order, gen)
    lay = Buckets(batch, per_octave=8)
    n = batch.numel()
    x = torch.randn(n, 3, dtype=DT, generator=gen, requires_grad=True)
    xp = torch.randn(lay.num_rows, 3, dtype=DT, generator=gen, requires_grad=True)
    ref_pad = torch.zeros(lay.num_rows, 3, dtype=DT).index_copy(0, lay.dest, x)
    ref_unpad = xp.index_select(0, lay.dest)
    assert_close(lay.pad(x), ref_pad, 0)
    assert_close(lay.unpad(xp), ref_unpad, 0)
    for out, ref, inp in ((lay.pad(x), ref_pad, x), (lay.unpad(xp), ref_unpad, xp)):
        w = torch.randn_like(ref)
        (g,) = torch.autograd.grad((out * w).sum(), inp, create_graph=True)
        (gr,) = torch.autograd.grad((ref * w).sum(), inp, create_graph=True)
        assert_close(g, gr, 0)
        assert torch.autograd.gradcheck(lambda t: lay.pad(t).sin().sum() if t.shape[0] == n else lay.unpad(t),
                                        (inp.detach().clone().requires_grad_(),))
    assert torch.autograd.gradgradcheck(lambda t: lay.pad(t).square(), (x.detach().clone().requires_grad_(),))
    assert torch.autograd.gradgradcheck(lambda t: lay.unpad(t).square(), (xp.detach().clone().requires_grad_(),))


@pytest.mark.parametrize("batch", [torch.tensor([0] * 16 + [1] * 8), torch.tensor([0, 1] * 8),
                                   torch.tensor([1] * 16 + [0] * 8), torch.tensor([0] * 17 + [1] * 8)],
                         ids=["16+8", "[0,1]*8", "8+16 reordered", "17+8 pads"])
def test_conv_gradient_on_batch_equals_each_graph_alone(batch):
    torch.manual_seed(0)
    conv = DIFFormerConv(8, use_graph=False).double()
    x = torch.randn(batch.numel(), 8, dtype=DT, requires_grad=True)
    w = torch.randn(batch.numel(), 8, dtype=DT)
    out = conv(x, batch=batch)
    ref = per_graph(conv, batch, x)
    assert_close(out, ref, 1e-12)
    for g, gr in zip(grads(out, [x, *conv.parameters()], w), grads(ref, [x, *conv.parameters()], w)):
        assert_close(g, gr)


@pytest.mark.parametrize("kernel", ["simple", "sigmoid"])
def test_all_pair_attention_gradient_shuffled_equal_sizes(kernel):
    gen = torch.Generator().manual_seed(1)
    batch = make_batch((16, 16), "unsorted", gen)
    q, k, v = (torch.randn(32, 2, 4, dtype=DT, generator=gen, requires_grad=True) for _ in range(3))
    w = torch.randn(32, 2, 4, dtype=DT, generator=gen)
    out = all_pair_attention(q, k, v, batch, kernel)
    ref = per_graph(lambda a, b, c: all_pair_attention(a, b, c, kernel=kernel), batch, q, k, v)
    assert_close(out, ref, 1e-12)
    for g, gr in zip(grads(out, (q, k, v), w), grads(ref, (q, k, v), w)):
        assert_close(g, gr)
