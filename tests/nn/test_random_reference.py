"""Every hand-written autograd function and every fast path against a plain
reference written here: dense per-graph attention, explicit loops over graphs,
autograd through plain torch ops, float64, over seeded random shapes with the
corners (equal / unequal / unsorted / reordered graph sizes, with and without
padding rows, 1-node graphs, sizes at the block and bucket thresholds, the
thresholds lowered through monkeypatch)."""
import random

import pytest
import torch

from wavygraph.nn import DIFFormerConv
from wavygraph.nn.buckets import Buckets
from wavygraph.nn.functional import all_pair_attention

DT = torch.float64


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: one thread (a thread pool on a busy machine only waits)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


def grads_of(loss, inputs):
    """Gradients of ``loss``, the graph kept; an input it does not use gets zeros."""
    gs = torch.autograd.grad(loss, inputs, allow_unused=True, retain_graph=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(inputs, gs)]


def grads(out, inputs, weight):
    """Gradients of ``sum(out * weight)``; an input the output does not use gets zeros."""
    gs = torch.autograd.grad((out * weight).sum(), inputs, allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for t, g in zip(inputs, gs)]


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


# ------------------------------------------------------ random shapes
CORNER_SIZES = (1, 2, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33)  # bucket edges at 8 / 16 / 32 rows, 1-node graphs


def random_case(seed: int, max_graphs: int = 4, max_size: int = 40):
    """``(batch, sizes)`` of a seeded random batch: 1-``max_graphs`` graphs of
    1-``max_size`` nodes (every third case a corner size, every fourth case
    only multiples of 8: no padding row), sorted, reordered or unsorted, and
    in some cases an unused graph index (an empty graph)."""
    gen = torch.Generator().manual_seed(seed)
    num = int(torch.randint(1, max_graphs + 1, (1,), generator=gen))
    if seed % 4 == 3:
        sizes = (8 * torch.randint(1, max(2, max_size // 8 + 1), (num,), generator=gen)).tolist()
    elif seed % 3 == 0:
        sizes = [CORNER_SIZES[int(i)] for i in torch.randint(0, len(CORNER_SIZES), (num,), generator=gen)]
    else:
        sizes = torch.randint(1, max_size + 1, (num,), generator=gen).tolist()
    if seed % 5 == 4:
        sizes.insert(int(torch.randint(0, num + 1, (1,), generator=gen)), 0)  # an empty graph index
    order = ("sorted", "reordered", "unsorted")[seed % 3]
    return make_batch(sizes, order, gen), gen


def random_edges(batch, gen, per_node: float = 1.5):
    """Random directed edges inside every graph of ``batch``, duplicates
    possible, no self-loops (the GCN normalisation adds one to every node)."""
    edges = []
    for g in batch.unique().tolist():
        idx = (batch == g).nonzero().flatten()
        m = int(per_node * idx.numel())
        if idx.numel() > 1 and m:
            src = torch.randint(0, idx.numel(), (m,), generator=gen)
            dst = (src + torch.randint(1, idx.numel(), (m,), generator=gen)) % idx.numel()  # no self-loop
            edges.append(idx[torch.stack([src, dst])])
    return torch.cat(edges, 1) if edges else torch.empty(2, 0, dtype=torch.long)


def per_graph_edges(edge_index, batch, idx):
    """The edges of the graph of nodes ``idx``, relabelled to ``0..len(idx)-1``."""
    local = torch.full((batch.numel(),), -1, dtype=torch.long)
    local[idx] = torch.arange(idx.numel())
    keep = local[edge_index[0]] >= 0
    return local[edge_index[:, keep]]


# ------------------------------------------------ dense references
def dense_attention(q, k, v, kernel: str, qk_norm: str):
    """One graph's attention, the ``N x N`` matrix written out: q, k ``(N, H, D)``, v ``(N, H, Dv)``."""
    if qk_norm == "global":
        q, k = q / q.norm(), k / k.norm()
    elif qk_norm == "row":
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    scores = torch.einsum("ihd,jhd->hij", q, k)
    w = 1.0 + scores if kernel == "simple" else torch.sigmoid(scores)
    return torch.einsum("hij,jhe->ihe", w / w.sum(-1, keepdim=True), v.expand(-1, q.shape[1], -1))


def dense_gcn(edge_index, n):
    """``D^-1/2 (A + I) D^-1/2`` as a dense matrix, messages from source to target."""
    a = torch.eye(n, dtype=DT)
    for s, t in edge_index.t().tolist():
        a[t, s] += 1.0
    d = a.sum(1).rsqrt()
    return d[:, None] * a * d[None, :]


def dense_conv(conv, x, edge_index):
    """:class:`DIFFormerConv` on one graph from its parameters, through plain ops."""
    n, h, d = x.shape[0], conv.heads, conv.head_channels
    qkv = x @ conv.qkv.weight.T + (0 if conv.qkv.bias is None else conv.qkv.bias)
    q, k = qkv[:, : h * d].view(n, h, d), qkv[:, h * d : 2 * h * d].view(n, h, d)
    v = qkv[:, 2 * h * d :].view(n, h, d) if conv.value_proj else x.unsqueeze(1)
    glob = dense_attention(q, k, v, conv.kernel, conv.qk_norm).mean(1)
    out = glob
    if conv.use_graph:
        local = dense_gcn(edge_index, n) @ v.expand(n, h, -1).mean(1)
        w = conv.graph_weight
        out = glob + local if w is None else (1 - w) * glob + w * local
    return out if conv.out is None else conv.out(out)


# --------------------------------------------------- attention paths
def _thresholds(monkeypatch, seed):
    """Bucket and block thresholds lowered, chosen by ``seed``: buckets of
    powers of two (as on accelerators) or fine ones, the sigmoid kernel in
    row blocks of 3 or 8 rows, the folded product in tiles of 4-16 rows, its
    rows rescaled before the Gram matrix or not."""
    from wavygraph.nn import buckets, folded, functional

    monkeypatch.setitem(buckets.BUCKETS_PER_OCTAVE, "cpu", (1, 8, 2)[seed % 3])
    monkeypatch.setattr(functional, "SIGMOID_BUCKETS_PER_OCTAVE", (32, 1, 4)[seed % 3])
    monkeypatch.setattr(folded, "BLOCK_ROWS", (4, 9, 16, 10**6)[seed % 4])
    monkeypatch.setattr(folded, "SAFE_RANGE", (2.0**40, 1.0)[seed // 2 % 2])  # 1.0: rows always rescaled, as on GPUs
    return (3, 8, None)[seed % 3]  # rows per sigmoid block (None: one block)


def check_all_pair(seed, monkeypatch):
    batch, gen = random_case(seed)
    block_rows = _thresholds(monkeypatch, seed)
    kernel = ("simple", "sigmoid")[seed % 2]
    qk_norm = {"simple": ("global", "row"), "sigmoid": ("none", "global", "row")}[kernel][seed % (2 + seed % 2)]
    # D >= 2 for the simple kernel: with D = 1 a 1-node graph's q~ . k~ is +-1, and at -1 every weight
    # 1 + q~ . k~ of its row is 0 (the output is 0 by convention, its gradient rounding noise over a floor)
    n, h, d = batch.numel(), 1 + seed % 3, 1 + seed % 4 + (kernel == "simple" and seed % 4 == 0)
    shared_v = seed % 5 == 1
    q, k = (torch.randn(n, h, d, dtype=DT, generator=gen, requires_grad=True) for _ in range(2))
    v = torch.randn(n, 1 if shared_v else h, 3, dtype=DT, generator=gen, requires_grad=True)
    w = torch.randn(n, h, 3, dtype=DT, generator=gen)
    per_row = 3 * h * 40 * 8  # bytes of one query row of the largest bucket (see _sigmoid_block)
    max_bytes = per_row * block_rows if block_rows else 2**28
    out = all_pair_attention(q, k, v, batch, kernel, qk_norm, max_block_bytes=max_bytes)
    ref = per_graph(lambda a, b, c: dense_attention(a, b, c, kernel, qk_norm), batch, q, k, v)
    assert_close(out, ref, 1e-12)
    for g, gr in zip(grads(out, (q, k, v), w), grads(ref, (q, k, v), w)):
        assert_close(g, gr)


def check_conv(seed, monkeypatch):
    """DIFFormerConv (folded fast path or projected q/k/v, local branch) against
    :func:`dense_conv` per graph: output and the gradients of x and every parameter."""
    batch, gen = random_case(seed)
    _thresholds(monkeypatch, seed)
    torch.manual_seed(seed)
    kernel = ("simple", "sigmoid")[seed % 2]
    use_graph = seed % 3 != 0
    conv = DIFFormerConv(5, heads=1 + seed % 4, kernel=kernel, qk_norm=("global", "row")[seed // 2 % 2],
                         use_graph=use_graph, graph_weight=(None, 0.3, 1.0)[seed % 3] if use_graph else None,
                         head_channels=(None, 3)[seed // 3 % 2], bias=seed % 7 != 0,
                         value_proj=seed % 5 != 2).double()
    x = torch.randn(batch.numel(), 5, dtype=DT, generator=gen, requires_grad=True)
    ei = random_edges(batch, gen)
    out = conv(x, ei if use_graph else None, batch)
    ref = torch.zeros_like(out)
    for g in batch.unique().tolist():
        idx = (batch == g).nonzero().flatten()
        ref = ref.index_copy(0, idx, dense_conv(conv, x[idx], per_graph_edges(ei, batch, idx)))
    assert_close(out, ref, 1e-12)
    w = torch.randn(out.shape, dtype=DT, generator=gen)
    params = [x, *conv.parameters()]
    for g, gr in zip(grads(out, params, w), grads(ref, params, w)):
        assert_close(g, gr)


@pytest.mark.parametrize("seed", range(24))
def test_all_pair_attention_random_batches_equal_dense_per_graph(seed, monkeypatch):
    check_all_pair(seed, monkeypatch)


@pytest.mark.parametrize("seed", range(24))
def test_conv_random_batches_equal_dense_per_graph(seed, monkeypatch):
    check_conv(seed, monkeypatch)


@pytest.mark.slow
def test_attention_and_conv_many_random_batches(monkeypatch):
    for seed in range(24, 400):
        with monkeypatch.context() as m:
            check_all_pair(seed, m)
            check_conv(seed, m)


# ------------------------------------------- the steppers' functions
def plain_ln(s, weight, bias, eps):
    mean = s.mean(-1, keepdim=True)
    var = ((s - mean) ** 2).mean(-1, keepdim=True)
    return (s - mean) / torch.sqrt(var + eps) * weight + bias, torch.rsqrt(var + eps)


def check_step_functions(seed, monkeypatch):
    """The written-out backwards of the light-wave step, its LayerNorm, the
    joint LayerNorm and the joint light-wave step against autograd through
    their formulas, in row blocks of 1 to a few rows."""
    from wavygraph.nn.joint_norm import _JointLayerNormFn
    from wavygraph.nn.steppers import light_wave
    from wavygraph.nn.steppers.light_wave_joint import _LightWaveJointLayerNormFn

    gen = torch.Generator().manual_seed(seed)
    n, c = int(torch.randint(1, 41, (1,), generator=gen)), int(torch.randint(1, 10, (1,), generator=gen))
    monkeypatch.setattr(light_wave, "BLOCK", (1, 2 * c + 1, 2**18)[seed % 3])
    x, v, f = (torch.randn(n, c, dtype=DT, generator=gen, requires_grad=True) for _ in range(3))
    lam, weight, bias = (torch.randn(c, dtype=DT, generator=gen, requires_grad=True) for _ in range(3))
    tau, eps = float(torch.rand(1, generator=gen)) + 0.1, 1e-5
    first = seed % 4 == 0  # the first layer: X_prev is x itself
    vv = x if first else v
    w1, w2 = torch.randn(n, c, dtype=DT, generator=gen), torch.randn(n, c, dtype=DT, generator=gen)
    inputs = (x, v, f, lam, weight, bias)

    def compare(out, ref):
        for a, b in zip(out, ref):
            assert_close(a, b, 1e-12)
        # a loss on either output alone (the other's gradient None) and on both
        for ws in ((w1, None), (None, w2), (w1, w2))[: len(out) + 1 if len(out) == 2 else 1]:
            loss = lambda outs: sum((o * w).sum() for o, w in zip(outs, ws) if w is not None)  # noqa: E731
            for g, e in zip(grads_of(loss(out), inputs), grads_of(loss(ref), inputs)):
                assert_close(g, e)

    step = x + tau * f + lam * (x - vv)
    compare((light_wave.LightWaveStep.apply(x, vv, f, lam, tau),), (step,))
    compare((light_wave.LightWaveLayerNorm.apply(x, vv, f, lam, weight, bias, tau, eps),),
            (plain_ln(step, weight, bias, eps)[0],))
    ln, rstd = plain_ln(x, weight, bias, eps)
    compare(_JointLayerNormFn.apply(x, v, weight, bias, eps), (ln, weight * v * rstd))
    d = tau * f + lam * v
    ln, rstd = plain_ln(x + d, weight, bias, eps)
    compare(_LightWaveJointLayerNormFn.apply(x, v, f, lam, weight, bias, tau, eps), (ln, weight * d * rstd))


@pytest.mark.parametrize("seed", range(8))
def test_step_functions_random_shapes_equal_their_formulas(seed, monkeypatch):
    check_step_functions(seed, monkeypatch)


# ------------------------------------ a batch equals each graph run alone
def must_show_case(i: int):
    """Case ``i`` of the batch-vs-alone check: 16 + 8 nodes and ``[0, 1] * 8``
    first, then seeded random batches of 1-5 graphs of 1-40 nodes (sorted,
    reordered, unsorted; with and without padding rows; an empty graph index
    now and then); kernel and heads (1-4) vary with ``i``."""
    kernel, heads = ("simple", "sigmoid")[(i // 2) % 2], 1 + (i // 4) % 4
    if i == 0:
        return torch.tensor([0] * 16 + [1] * 8), torch.Generator().manual_seed(0), kernel, heads
    if i == 1:
        return torch.tensor([0, 1] * 8), torch.Generator().manual_seed(1), kernel, heads
    batch, gen = random_case(1000 + i, max_graphs=5)
    return batch, gen, kernel, heads


def alone(module, x, ei, batch, **kw):
    """``module`` on every graph of ``batch`` alone (no ``batch``), rows scattered back."""
    out = None
    for g in batch.unique().tolist():
        idx = (batch == g).nonzero().flatten()
        og = module(x[idx], None if ei is None else per_graph_edges(ei, batch, idx), **kw)
        out = og.new_zeros((batch.numel(),) + og.shape[1:]) if out is None else out
        out = out.index_copy(0, idx, og)
    return out


def check_batch_equals_alone(module, x, ei, batch, gen):
    out = module(x, ei, batch)
    ref = alone(module, x, ei, batch)
    assert_close(out, ref, 1e-12)
    w = torch.randn(out.shape, dtype=DT, generator=gen)
    params = [x, *module.parameters()]
    for g, gr in zip(grads(out, params, w), grads(ref, params, w)):
        assert_close(g, gr)


def check_conv_alone(i):
    batch, gen, kernel, heads = must_show_case(i)
    torch.manual_seed(i)
    use_graph = i % 3 == 2
    conv = DIFFormerConv(8, heads=heads, kernel=kernel, use_graph=use_graph, value_proj=i % 5 != 3).double()
    x = torch.randn(batch.numel(), 8, dtype=DT, generator=gen, requires_grad=True)
    check_batch_equals_alone(conv, x, random_edges(batch, gen) if use_graph else None, batch, gen)


def check_model_alone(i):
    """WavyDIFFormer on a batch against each graph alone: every residual kind,
    dropout 0 (the masks would differ between the runs); in training mode
    half the time, so the checkpointed and reversible stacks run too. The
    graph-level operations (PairNorm, the pre-norm kinds' centring,
    FeatScale) act per graph of ``batch``."""
    from wavygraph.nn import WavyDIFFormer
    from wavygraph.nn.steppers import STEPPERS

    batch, gen, kernel, heads = must_show_case(i)
    kind = list(STEPPERS)[i % len(STEPPERS)]
    memory = (i // len(STEPPERS)) % 3  # 0 plain, 1 checkpointed, 2 reversible (checkpointed if not invertible)
    train = memory > 0 or (i // (3 * len(STEPPERS))) % 2 == 0  # the memory modes run in training only
    pick = random.Random(i).random
    torch.manual_seed(i)
    model = WavyDIFFormer(
        5, 8, 3, num_layers=2 + (pick() < 0.5), residual=kind, heads=heads, kernel=kernel, use_graph=pick() < 0.7,
        norm="pair" if pick() < 0.4 else "layer", dropout=0.0, ffn=pick() < 0.3, featscale=pick() < 0.3,
        shared_attention=pick() < 0.5, source=pick() < 0.7,
        reversible=memory == 2 and STEPPERS[kind].invertible,
        gradient_checkpointing=memory == 1 or (memory == 2 and not STEPPERS[kind].invertible),
    ).double().train(train)
    with torch.no_grad():  # off the identity / zero initialisations
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, dtype=DT, generator=gen))
    x = torch.randn(batch.numel(), 5, dtype=DT, generator=gen, requires_grad=True)
    check_batch_equals_alone(model, x, random_edges(batch, gen) if model.use_graph else None, batch, gen)


@pytest.mark.parametrize("i", range(18))  # every kind plain, checkpointed, reversible (or checkpointed)
def test_batch_equals_each_graph_alone(i):
    """A bounded set by default; the 200 batches of the full check are slow-marked below."""
    check_conv_alone(i)
    check_model_alone(i)


@pytest.mark.slow
def test_batch_equals_each_graph_alone_200_batches():
    for i in range(200):
        check_conv_alone(i)
        check_model_alone(i)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["light_wave", "wave"])
def test_compiled_step_on_a_batch_equals_each_graph_alone_eager(kind):
    """``step_impl="compile"`` (the compiled step and joint norm) on a random
    batch against the eager model on each graph alone."""
    from wavygraph.nn import WavyDIFFormer

    batch, gen = random_case(7, max_graphs=4)
    torch.manual_seed(7)
    from wavygraph.nn.steppers import compiled

    compiled._compiled.clear()
    model = WavyDIFFormer(5, 8, 3, num_layers=2, residual=kind, dropout=0.0, source=False,  # the fused step
                          step_impl="compile").double()
    x = torch.randn(batch.numel(), 5, dtype=DT, generator=gen, requires_grad=True)
    ei = random_edges(batch, gen)
    out = model(x, ei, batch)
    w = torch.randn(out.shape, dtype=DT, generator=gen)
    got = grads(out, [x, *model.parameters()], w)
    assert compiled._compiled  # the compiled step ran
    model.step_impl = "eager"
    ref = alone(model, x, ei, batch)
    assert_close(out, ref, 1e-12)
    for g, gr in zip(got, grads(ref, [x, *model.parameters()], w)):
        assert_close(g, gr)
