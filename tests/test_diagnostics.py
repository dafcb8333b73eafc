"""Diagnostics against plain dense float64 references (explicit loops, N x N)."""
import math

import pytest
import torch
from torch_geometric.data import Data

from wavygraph.diagnostics import (
    attention_qk,
    cosine_similarity,
    dirichlet_energy,
    feature_variance,
    inter_class_variance,
    layer_diagnostics,
    layer_spectral_gap,
    simple_attention_matrix,
    spectral_gap,
)
from wavygraph.nn import DIFFormerConv, WavyDIFFormer
from wavygraph.nn.model_args import RECIPE_ARGS


def recipe(*sizes, **kw):
    """WavyDIFFormer with the depth recipe's settings (RECIPE_ARGS), the class defaults these tests were written for."""
    return WavyDIFFormer(*sizes, **{**RECIPE_ARGS, **kw})


def ring_graph(n: int) -> torch.Tensor:
    src = torch.arange(n)
    dst = (src + 1) % n
    extra = torch.tensor([[0, 2], [n // 2, n - 1]])  # a few chords: unequal degrees
    ei = torch.cat([torch.stack([src, dst]), extra], dim=1)
    return torch.cat([ei, ei.flip(0)], dim=1)


def ref_dirichlet(h, ei):
    n = h.shape[0]
    deg = [0] * n
    for s in ei[0].tolist():
        deg[s] += 1
    total = 0.0
    for s, t in ei.t().tolist():
        for c in range(h.shape[1]):
            total += (h[s, c].item() / math.sqrt(1 + deg[s]) - h[t, c].item() / math.sqrt(1 + deg[t])) ** 2
    return total / n


def ref_variance(h):
    n, d = h.shape
    out = 0.0
    for c in range(d):
        mean = sum(h[i, c].item() for i in range(n)) / n
        out += sum((h[i, c].item() - mean) ** 2 for i in range(n)) / n
    return out / d


def ref_inter_class(h, y):
    classes = sorted(set(y.tolist()))
    means = []
    for c in classes:
        rows = [i for i in range(len(y)) if y[i] == c]
        means.append([sum(h[i, j].item() for i in rows) / len(rows) for j in range(h.shape[1])])
    out = 0.0
    for j in range(h.shape[1]):
        mu = sum(m[j] for m in means) / len(means)
        out += sum((m[j] - mu) ** 2 for m in means) / len(means)
    return out


def ref_cosine(h):
    n = h.shape[0]
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                total += torch.nn.functional.cosine_similarity(h[i], h[j], dim=0).item()
    return total / (n * (n - 1))


def ref_gap(a):
    moduli = torch.linalg.eigvals(a).abs().sort(descending=True).values
    return 1.0 - moduli[1].item()


def test_measures_match_dense_references():
    torch.manual_seed(0)
    n, d = 12, 5
    h = torch.randn(n, d, dtype=torch.float64)
    ei = ring_graph(n)
    y = torch.tensor([0, 1, 2] * 4)
    assert dirichlet_energy(h, ei) == pytest.approx(ref_dirichlet(h, ei), rel=1e-12)
    assert feature_variance(h) == pytest.approx(ref_variance(h), rel=1e-12)
    assert inter_class_variance(h, y) == pytest.approx(ref_inter_class(h, y), rel=1e-12)
    assert cosine_similarity(h) == pytest.approx(ref_cosine(h), rel=1e-10, abs=1e-12)


def test_measures_see_over_smoothing():
    torch.manual_seed(1)
    n = 10
    ei = ring_graph(n)
    y = torch.arange(n) % 2
    # identical rows: no variance, cosine 1; energy zero only after scaling by sqrt(1+d)
    h = torch.ones(n, 3).double()
    assert feature_variance(h) == 0.0
    assert inter_class_variance(h, y) == 0.0
    assert cosine_similarity(h) == pytest.approx(1.0)
    deg = torch.bincount(ei[0], minlength=n).double()
    assert dirichlet_energy(h * (1 + deg).sqrt().unsqueeze(-1), ei) == pytest.approx(0.0, abs=1e-24)
    assert dirichlet_energy(torch.randn(n, 3), ei) > 0.1
    # a zero row counts as similarity 0, the others still 1
    h[0] = 0
    assert cosine_similarity(h) == pytest.approx((n - 1) * (n - 2) / (n * (n - 1)))


@pytest.mark.parametrize("n,d", [(3, 6), (7, 6), (40, 4), (120, 8)])
def test_spectral_gap_equals_dense_eigvals(n, d):
    # both N < d+1 and N > d+1: the (d+1)x(d+1) route agrees with the N x N one
    torch.manual_seed(n)
    q = torch.randn(n, d, dtype=torch.float64)
    k = torch.randn(n, d, dtype=torch.float64) + 0.5
    q, k = q / q.norm(), k / k.norm()
    a = simple_attention_matrix(q, k)
    assert torch.allclose(a.sum(1), torch.ones(n, dtype=torch.float64))
    assert spectral_gap(q, k) == pytest.approx(ref_gap(a), abs=1e-8)


def test_spectral_gap_of_a_layer_matches_its_attention():
    # the recomputed q~, k~ give the attention DIFFormerConv really applies
    torch.manual_seed(3)
    n, c, heads = 9, 4, 3
    conv = DIFFormerConv(c, heads=heads, use_graph=False).double()
    x = torch.randn(n, c, dtype=torch.float64)
    q, k = attention_qk(conv, x)
    v = conv.qkv(x).view(n, 3, heads, c)[:, 2]  # (N, H, C)
    dense = torch.stack([simple_attention_matrix(q[:, h], k[:, h]) @ v[:, h] for h in range(heads)], 1)
    assert torch.allclose(dense.mean(1), conv(x), atol=1e-12)
    gaps = [ref_gap(simple_attention_matrix(q[:, h], k[:, h])) for h in range(heads)]
    assert layer_spectral_gap(conv, x) == pytest.approx(sum(gaps) / heads, abs=1e-8)


@pytest.mark.parametrize("residual", ["diffusion", "wave", "mix", "light_wave", "leapfrog"])
def test_layer_diagnostics_of_a_model(residual):
    torch.manual_seed(4)
    n, layers = 15, 3
    data = Data(x=torch.randn(n, 6), edge_index=ring_graph(n), y=torch.arange(n) % 3)
    model = recipe(6, 8, 3, num_layers=layers, residual=residual, heads=2, dropout=0.5)
    model.train()
    out = layer_diagnostics(model, data)
    assert model.training  # mode restored
    assert set(out) == {"dirichlet_energy", "feature_variance", "inter_class_variance", "cosine_similarity", "spectral_gap"}
    model.eval()
    seen = []  # what every conv really receives in the forward (a pre-norm kind: the normed state)
    handles = [conv.register_forward_pre_hook(lambda mod, args: seen.append(args[0].detach()))
               for conv in dict.fromkeys(model.convs)]  # a shared attention layer: one hook
    _, hidden = model(data.x, data.edge_index, return_hidden=True)
    for handle in handles:
        handle.remove()
    for name, fn in (("dirichlet_energy", lambda h: ref_dirichlet(h.double(), data.edge_index)),
                     ("feature_variance", lambda h: ref_variance(h.double())),
                     ("inter_class_variance", lambda h: ref_inter_class(h.double(), data.y)),
                     ("cosine_similarity", lambda h: ref_cosine(h.double()))):
        assert len(out[name]) == layers + 1
        assert out[name] == pytest.approx([fn(h.detach()) for h in hidden], rel=1e-6, abs=1e-9), name
    assert len(out["spectral_gap"]) == layers == len(seen)
    for layer, conv in enumerate(model.convs):
        with torch.no_grad():
            q, k = attention_qk(conv.double(), seen[layer].double())
        gaps = [ref_gap(simple_attention_matrix(q[:, h], k[:, h])) for h in range(2)]
        assert out["spectral_gap"][layer] == pytest.approx(sum(gaps) / 2, abs=1e-6)
        conv.float()


@pytest.mark.parametrize("residual", ["light_wave", "leapfrog"])
def test_layer_diagnostics_keep_no_list_of_states(monkeypatch, residual):
    # the measures run as the states pass: when state i arrives, states 1 .. i-2 are gone (the
    # forward holds x_0, light_wave's step x_{i-1}); a list of all states would keep them alive
    import weakref

    from wavygraph.diagnostics import LayerStream

    refs, alive_at = [], []
    original = LayerStream.__call__

    def spy(self, i, h):
        alive_at.append([j for j, r in enumerate(refs) if r() is not None])
        refs.append(weakref.ref(h))
        original(self, i, h)

    monkeypatch.setattr(LayerStream, "__call__", spy)
    torch.manual_seed(10)
    layers = 6
    data = Data(x=torch.randn(12, 4), edge_index=ring_graph(12), y=torch.arange(12) % 2)
    out = layer_diagnostics(recipe(4, 8, 2, num_layers=layers, residual=residual), data)
    assert len(out["feature_variance"]) == layers + 1 == len(alive_at)
    for i, alive in enumerate(alive_at):
        assert all(j == 0 or j >= i - 1 for j in alive), (i, alive)


def test_multilabel_targets_skip_inter_class_variance():
    torch.manual_seed(5)
    n = 8
    data = Data(x=torch.randn(n, 4), edge_index=ring_graph(n), y=torch.randint(0, 2, (n, 3)).float())
    out = layer_diagnostics(recipe(4, 8, 3, num_layers=2), data)
    assert "inter_class_variance" not in out
    assert all(len(v) == 3 for k, v in out.items() if k != "spectral_gap")


def test_spectral_gap_scales_linearly_without_dense_matrix():
    # N = 200k would need 320 GB as a dense float64 matrix; the gap still comes out
    torch.manual_seed(6)
    n, d = 200_000, 16
    q = torch.randn(n, d, dtype=torch.float64)
    k = torch.randn(n, d, dtype=torch.float64)
    gap = spectral_gap(q / q.norm(), k / k.norm())
    assert 0.0 <= gap <= 1.0


# --- streaming: the block-wise measures against the plain (one-tensor) formulas ---------------------------------

def plain_dirichlet(h, ei):
    """The E x d formula: every difference at once."""
    h = h.double()
    deg = torch.zeros(h.shape[0], dtype=torch.float64).index_add_(0, ei[0], torch.ones(ei.shape[1], dtype=torch.float64))
    hn = h / (1 + deg).sqrt().unsqueeze(-1)
    return float((hn[ei[0]] - hn[ei[1]]).pow(2).sum() / h.shape[0])


def plain_inter_class(h, y):
    h, y = h.double()[y >= 0], y[y >= 0]
    means = torch.stack([h[y == c].mean(0) for c in torch.unique(y)])  # (C, d)
    return float(means.var(0, unbiased=False).sum())


def plain_cosine(h):
    unit = torch.nn.functional.normalize(h.double(), dim=-1)
    n = h.shape[0]
    return float(((unit @ unit.T).sum() - unit.pow(2).sum()) / (n * (n - 1)))  # the N x N sum itself


def awkward_graph(n: int, extra: int, seed: int):
    """Directed edges (one direction only), self loops, a repeated edge and
    isolated nodes (the last three take part in no edge)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n - 3, (extra,), generator=g)
    dst = torch.randint(0, n - 3, (extra,), generator=g)
    loops = torch.arange(0, n - 3, 4)
    ei = torch.cat([torch.stack([src, dst]), torch.stack([loops, loops]), torch.tensor([[1, 1], [2, 2]])], dim=1)
    return ei


@pytest.mark.parametrize("block", [1, 7, 64, 2**20])
def test_blocked_measures_match_plain_formulas(monkeypatch, block):
    # blocks of 1, 7 and 64 numbers split edges, channels and nodes unevenly; 2**20 is one block
    monkeypatch.setattr("wavygraph.diagnostics.BLOCK", block)
    torch.manual_seed(7)
    n, d = 23, 6
    ei = awkward_graph(n, 70, seed=block)
    h = torch.randn(n, d) * torch.linspace(0.5, 3.0, d)  # float32 input, as a model gives
    y = torch.randint(-1, 4, (n,))  # -1: unlabelled
    assert dirichlet_energy(h, ei) == pytest.approx(plain_dirichlet(h, ei), rel=1e-12)
    assert dirichlet_energy(h, ei) == pytest.approx(ref_dirichlet(h.double(), ei), rel=1e-12)
    assert feature_variance(h) == pytest.approx(float(h.double().var(0, unbiased=False).mean()), rel=1e-12)
    assert inter_class_variance(h, y) == pytest.approx(plain_inter_class(h, y), rel=1e-12)
    assert inter_class_variance(h, y) == pytest.approx(ref_inter_class(h.double()[y >= 0], y[y >= 0]), rel=1e-12)
    h[3] = 0  # a zero row
    assert cosine_similarity(h) == pytest.approx(plain_cosine(h), rel=1e-12)
    assert cosine_similarity(h) == pytest.approx(ref_cosine(h.double()), rel=1e-10)
    q, k = torch.randn(n, d), torch.randn(n, d) + 0.3
    q, k = q / q.norm(), k / k.norm()
    assert spectral_gap(q, k) == pytest.approx(ref_gap(simple_attention_matrix(q.double(), k.double())), abs=1e-10)


def test_blocked_dirichlet_energy_is_accurate_on_smooth_states(monkeypatch):
    # differences, not the expanded quadratic form sum deg ||hn||^2 - 2 hn.(A hn): on states that are
    # smooth up to 1e-6 at scale 1e3 the expansion would cancel ~1e8 down to ~1e-9 and keep only rounding
    monkeypatch.setattr("wavygraph.diagnostics.BLOCK", 5)
    torch.manual_seed(9)
    n = 30
    ei = awkward_graph(n, 90, seed=1)
    deg = torch.bincount(ei[0], minlength=n).double()
    h = (1e3 + 1e-6 * torch.randn(n, 4, dtype=torch.float64)) * (1 + deg).sqrt().unsqueeze(-1)
    expected = ref_dirichlet(h, ei)
    assert 0 < expected < 1e-9
    assert dirichlet_energy(h, ei) == pytest.approx(expected, rel=1e-6)


class LargestTensor(torch.overrides.TorchFunctionMode):
    """Records the largest dense float tensor that any torch call returns (and the largest float64 one)."""

    def __init__(self):
        super().__init__()
        self.largest = {"float": 0, "float64": 0}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dtype.is_floating_point:
                self.largest["float"] = max(self.largest["float"], t.numel())
                if t.dtype == torch.float64:
                    self.largest["float64"] = max(self.largest["float64"], t.numel())
        return out


def test_layer_diagnostics_never_forms_edge_or_float64_state_tensors(monkeypatch):
    # a graph with E = 20 N: the old E x d difference tensor would be 20x the states
    from wavygraph.diagnostics import LayerStream

    monkeypatch.setattr("wavygraph.diagnostics.BLOCK", 64)
    torch.manual_seed(8)
    n, c, layers = 40, 8, 3
    ei = awkward_graph(n, 20 * n, seed=8)
    data = Data(x=torch.randn(n, 5), edge_index=ei, y=torch.arange(n) % 3)
    model = recipe(5, c, 3, num_layers=layers, residual="light_wave")
    with LargestTensor() as mode:
        out = layer_diagnostics(model, data)
    assert len(out["dirichlet_energy"]) == layers + 1
    assert mode.largest["float"] < ei.shape[1] * c / 4  # nothing near E x d, model included
    # the measures themselves, fed the states and the attention inputs one by one
    model.eval()  # as layer_diagnostics runs it (the default dropout would draw other states)
    _, hidden = model(data.x, data.edge_index, return_hidden=True)
    stream = LayerStream(model, data.edge_index, data.y)
    with LargestTensor() as mode:
        for i, h in enumerate(hidden):
            stream(i, h)
            if i < layers:
                stream._attention_hook(model.convs[i], (h,))
    assert stream.values == out
    # float64 only in blocks, per-node vectors, the (D+1) x (D+1) matrix and the E weights of the sparse A
    assert 0 < mode.largest["float64"] <= max(64, n, (c + 1) ** 2, ei.shape[1]) < ei.shape[1] * c


def test_layer_stream_takes_states_in_order():
    model = recipe(4, 8, 3, num_layers=2)
    from wavygraph.diagnostics import LayerStream

    stream = LayerStream(model, ring_graph(6), torch.arange(6) % 2)
    stream(0, torch.randn(6, 8))
    with pytest.raises(ValueError, match="expected state 1, got 2"):
        stream(2, torch.randn(6, 8))


def test_dirichlet_form_is_reused_and_checks_the_node_count():
    from wavygraph.diagnostics import DirichletForm

    torch.manual_seed(11)
    ei = awkward_graph(20, 50, seed=11)
    form = DirichletForm(ei, 20)
    for _ in range(2):
        h = torch.randn(20, 3, dtype=torch.float64)
        assert form(h) == pytest.approx(ref_dirichlet(h, ei), rel=1e-12)
    with pytest.raises(ValueError, match="19 rows for a graph of 20 nodes"):
        form(torch.randn(19, 3))
    assert DirichletForm(torch.empty(2, 0, dtype=torch.long), 5)(torch.randn(5, 3)) == 0.0


def dense_graph_gaps(conv, x, batch):
    """Every graph's own dense attention matrix (q, k normalised over that graph), its gap per head, averaged."""
    out = []
    for g in range(int(batch.max()) + 1):
        idx = (batch == g).nonzero().flatten()
        if idx.numel() < 2:
            out.append(float("nan"))
            continue
        q, k = attention_qk(conv, x[idx])
        out.append(sum(ref_gap(simple_attention_matrix(q[:, h], k[:, h])) for h in range(conv.heads)) / conv.heads)
    return out


@pytest.mark.parametrize("sizes,shuffle", [((5, 7), False), ((5, 7), True), ((9, 1, 4, 12), True)])
def test_spectral_gap_on_a_batch_is_per_graph(sizes, shuffle):
    from wavygraph.diagnostics import graph_spectral_gaps

    torch.manual_seed(12)
    conv = DIFFormerConv(4, heads=2, use_graph=False).double()
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    if shuffle:
        batch = batch[torch.randperm(batch.numel())]
    x = torch.randn(batch.numel(), 4, dtype=torch.float64)
    ref = dense_graph_gaps(conv, x, batch)
    got = graph_spectral_gaps(conv, x, batch)
    assert got == pytest.approx(ref, abs=1e-8, nan_ok=True)
    real = [g for g in ref if not math.isnan(g)]
    assert layer_spectral_gap(conv, x, batch) == pytest.approx(sum(real) / len(real), abs=1e-8)
    # the matrix over all nodes of the batch (never formed by the layer) has another gap
    assert abs(layer_spectral_gap(conv, x) - layer_spectral_gap(conv, x, batch)) > 1e-4


def test_layer_stream_on_a_batch_reports_the_mean_of_the_graphs_gaps():
    from torch_geometric.data import Batch

    torch.manual_seed(13)
    edges = lambda n: ring_graph(n) if n > 2 else torch.empty(2, 0, dtype=torch.long)  # noqa: E731
    graphs = [Data(x=torch.randn(n, 5), edge_index=edges(n), y=torch.arange(n) % 2) for n in (5, 7, 1, 6)]
    data = Batch.from_data_list(graphs)
    model = WavyDIFFormer(5, 8, 2, num_layers=3, residual="light_wave", heads=2).double()
    data.x = data.x.double()
    out = layer_diagnostics(model, data)
    seen = []  # what every conv receives in the forward, with its batch
    handles = [conv.register_forward_pre_hook(lambda mod, args: seen.append((args[0].detach(), args[2])))
               for conv in dict.fromkeys(model.convs)]
    model.eval()
    model(data.x, data.edge_index, data.batch)
    for handle in handles:
        handle.remove()
    assert len(out["spectral_gap"]) == 3 == len(seen)
    for layer, (h, batch) in enumerate(seen):
        assert batch is data.batch
        ref = [g for g in dense_graph_gaps(model.convs[layer], h, data.batch) if not math.isnan(g)]
        assert len(ref) == 3  # the 1-node graph has no second eigenvalue
        assert out["spectral_gap"][layer] == pytest.approx(sum(ref) / len(ref), abs=1e-8)
