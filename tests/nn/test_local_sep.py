"""The ego / neighbour local branch (``local="sep"``) against a plain
reference: explicit loops over each node and its in-neighbours, in float64."""
import pytest
import torch

from wavygraph import keys
from wavygraph.config import ConfigError, load_config, to_yaml
from wavygraph.nn import DIFFormerConv, WavyDIFFormer, gcn_adjacency
from wavygraph.nn.graph import neighbour_mean
from wavygraph.nn.validate import InputError
from wavygraph.sweep import cell_hash


def random_batch(seed: int, num_graphs: int = 3, n: int = 11):
    """Nodes of ``num_graphs`` graphs in a shuffled order (an unsorted batch
    vector, one graph left empty), directed edges within graphs with
    duplicates and self-loops, and isolated nodes."""
    g = torch.Generator().manual_seed(seed)
    batch = torch.randint(0, num_graphs + 1, (n,), generator=g)
    batch[batch == num_graphs] = 0  # graph num_graphs stays empty
    src, dst = [], []
    for i in range(n):
        for j in range(n):
            if batch[i] == batch[j] and torch.rand((), generator=g) < 0.3:
                src.append(i)
                dst.append(j)
    edges = torch.tensor([src, dst], dtype=torch.long).reshape(2, -1)
    edges = torch.cat([edges, edges[:, :3], torch.tensor([[0], [0]])], dim=1)  # duplicates and a self-loop
    keep = (edges[0] != n - 1) & (edges[1] != n - 1)  # node n - 1 is isolated
    return edges[:, keep], batch


def reference_local(conv, x, edge_index):
    """W_ego v_i + W_nbr * mean of v_j over the in-neighbours j != i of i
    (an edge counted as often as it is given; 0 without in-neighbours),
    v the head mean of the values."""
    n = x.shape[0]
    if conv.value_proj:
        hc = conv.heads * conv.head_channels
        v = (x @ conv.qkv.weight[2 * hc:].T + conv.qkv.bias[2 * hc:]).view(n, conv.heads, -1).mean(1)
    else:
        v = x
    rows = []
    for i in range(n):
        nbrs = [s for s, t in edge_index.T.tolist() if t == i and s != i]
        mean = sum(v[j] for j in nbrs) / len(nbrs) if nbrs else torch.zeros_like(v[i])
        rows.append(conv.ego @ v[i] + conv.nbr @ mean)
    return torch.stack(rows)


def randomised(conv):
    """Random ego / neighbour weights (not the I / 2 start), so that a swap or transpose shows."""
    with torch.no_grad():
        conv.ego.normal_()
        conv.nbr.normal_()
    return conv


def test_neighbour_mean_counts_duplicates_and_leaves_out_self_loops():
    edges = torch.tensor([[1, 1, 2, 0, 0, 3], [0, 0, 0, 0, 1, 3]])  # 1->0 twice, loops at 0 and 3
    for dtype in (torch.float64, torch.float32):
        mean = neighbour_mean(gcn_adjacency(edges, 5, dtype)).to_dense()
        expected = torch.zeros(5, 5, dtype=mean.dtype)
        expected[0, 1], expected[0, 2], expected[1, 0] = 2 / 3, 1 / 3, 1.0
        torch.testing.assert_close(mean, expected, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("value_proj, heads, head_channels", [(True, 1, None), (True, 3, None), (True, 2, 3),
                                                              (False, 2, None)])
@pytest.mark.parametrize("graph_weight", [None, 0.7, 1.0])
def test_sep_matches_reference(value_proj, heads, head_channels, graph_weight):
    torch.manual_seed(0)
    edges, batch = random_batch(seed=heads)
    conv = DIFFormerConv(4, heads=heads, graph_weight=graph_weight, head_channels=head_channels,
                         value_proj=value_proj, local="sep").double()
    randomised(conv)
    glob = DIFFormerConv(4, heads=heads, head_channels=head_channels, use_graph=False, value_proj=value_proj).double()
    glob.load_state_dict({k: v for k, v in conv.state_dict().items() if k not in ("ego", "nbr")})
    glob.out = None  # the attention before the output map, (N, Dv)
    x = torch.randn(batch.shape[0], 4, dtype=torch.float64)
    local = reference_local(conv, x, edges)
    w = graph_weight
    expected = glob(x, batch=batch) + local if w is None else (1 - w) * glob(x, batch=batch) + w * local
    if conv.out is not None:
        expected = conv.out(expected)
    out = conv(x, edges, batch)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(conv(x, gcn_adjacency(edges, x.shape[0], torch.float64), batch), out,
                               rtol=0, atol=1e-12)


def test_sep_isolated_nodes_keep_only_the_ego_term():
    conv = randomised(DIFFormerConv(3, graph_weight=1.0, value_proj=False, local="sep").double())
    x = torch.randn(4, 3, dtype=torch.float64)
    out = conv(x, torch.tensor([[0, 1], [1, 0]]))
    torch.testing.assert_close(out[2:], x[2:] @ conv.ego.T, rtol=0, atol=1e-12)


def test_sep_gradient_matches_reference():
    torch.manual_seed(1)
    edges, batch = random_batch(seed=5, n=9)
    conv = randomised(DIFFormerConv(4, heads=2, graph_weight=1.0, local="sep").double())
    x = torch.randn(9, 4, dtype=torch.float64, requires_grad=True)
    g = torch.randn(9, 4, dtype=torch.float64)
    params = [x, conv.ego, conv.nbr, conv.qkv.weight]
    got = torch.autograd.grad((conv(x, edges, batch) * g).sum(), params)
    want = torch.autograd.grad((reference_local(conv, x, edges) * g).sum(), params)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    assert conv.nbr.grad is None and got[2].abs().sum() > 0
    blended = randomised(DIFFormerConv(3, heads=2, graph_weight=0.6, local="sep").double())
    inputs = torch.randn(9, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: blended(t, edges, batch), (inputs,))


def test_sep_starts_as_an_average():
    """I / 2 each: at a node with in-neighbours the branch's weights sum to 1, like GCN's."""
    conv = DIFFormerConv(3, graph_weight=1.0, value_proj=False, local="sep").double()
    x = torch.ones(4, 3, dtype=torch.float64)
    out = conv(x, torch.tensor([[0, 1, 2], [1, 2, 0]]))
    torch.testing.assert_close(out[:3], x[:3], rtol=0, atol=1e-12)
    torch.testing.assert_close(out[3], x[3] / 2, rtol=0, atol=1e-12)


def test_model_state_dict_keys_and_shared_attention():
    default = WavyDIFFormer(5, 8, 3, num_layers=2)
    explicit = WavyDIFFormer(5, 8, 3, num_layers=2, local="gcn")
    assert list(default.state_dict()) == list(explicit.state_dict())
    assert not any(k.endswith((".ego", ".nbr")) for k in default.state_dict())
    sep = WavyDIFFormer(5, 8, 3, num_layers=3, local="sep")
    extra = sorted(set(sep.state_dict()) - set(default.state_dict()) - set(WavyDIFFormer(5, 8, 3, num_layers=3)
                                                                           .state_dict()))
    assert extra == sorted(f"layers.{i}.force.conv.{w}" for i in range(3) for w in ("ego", "nbr"))
    shared = WavyDIFFormer(5, 8, 3, num_layers=3, local="sep", shared_attention=True, value_proj=False)
    assert sum(p.numel() for n, p in shared.named_parameters() if n.endswith((".ego", ".nbr"))) == 2 * 8 * 8
    x, edges = torch.randn(6, 5), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    shared(x, edges).sum().backward()
    assert shared.convs[0].ego.grad.abs().sum() > 0 and shared.convs[0].nbr.grad.abs().sum() > 0


def test_config_key_round_trips_and_leaves_old_cells_alone():
    cfg = load_config(None, ["model.local=sep"])
    assert cfg.model.local == "sep"
    assert load_config(None).model.local == "gcn"
    yaml = to_yaml(cfg)
    assert "local: sep" in yaml
    base = {"model": {"num_layers": 4}, "train": {"seed": 0}}
    with_gcn = {"model": {"num_layers": 4, "local": "gcn"}, "train": {"seed": 0}}
    with_sep = {"model": {"num_layers": 4, "local": "sep"}, "train": {"seed": 0}}
    assert keys.NEUTRAL_KEYS["model.local"] == keys.Added("gcn")
    assert cell_hash(with_gcn) == cell_hash(base) != cell_hash(with_sep)


def test_bad_local_is_one_line():
    with pytest.raises(ConfigError, match=r"^unknown model.local 'sage'; choose one of 'gcn', 'sep'$"):
        load_config(None, ["model.local=sage"])
    with pytest.raises(ConfigError, match=r"^model.local='sep' needs model.use_graph=true \(.*\)$"):
        load_config(None, ["model.local=sep", "model.use_graph=false"])
    with pytest.raises(InputError, match=r"^local='sep' needs use_graph=True \(.*\)$"):
        WavyDIFFormer(5, 8, 3, local="sep", use_graph=False)
    with pytest.raises(InputError, match=r"^unknown local 'sage'; choose one of 'gcn', 'sep'$"):
        DIFFormerConv(8, local="sage")
    with pytest.raises(InputError, match=r"^local='sep' needs use_graph=True"):
        DIFFormerConv(8, local="sep", use_graph=False)
