"""wavygraph.nn.validate: every check accepts what the module docstring
promises and refuses the rest with an InputError (a ValueError) whose one
line names the argument and the fix."""
import pytest
import torch

from wavygraph.nn import validate as v
from wavygraph.nn.graph import gcn_adjacency


def _raises(match, fn, *args, **kwargs):
    with pytest.raises(v.InputError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_check_choice():
    v.check_choice("residual", "wave", ("diffusion", "wave"))
    _raises(r"unknown residual 'bogus'; choose one of 'diffusion', 'wave'", v.check_choice, "residual", "bogus",
            ("diffusion", "wave"))


def test_check_x_accepts_and_returns_n():
    assert v.check_x(torch.randn(5, 3), 3) == 5
    assert v.check_x(torch.empty(0, 3), 3) == 0  # an empty graph is valid
    assert v.check_x(torch.randn(1, 3, dtype=torch.float64), 3) == 1


@pytest.mark.parametrize(
    "x,match",
    [
        (torch.randn(5, 4), r"x must have shape \(N, 3\), got \(5, 4\)"),
        (torch.randn(5), r"x must have shape \(N, 3\), got \(5,\)"),
        ([[1.0, 2.0, 3.0]], r"x must have shape \(N, 3\), got list"),
        (torch.ones(5, 3, dtype=torch.long), r"floating tensor.*x\.float\(\)"),
    ],
)
def test_check_x_refuses(x, match):
    _raises(match, v.check_x, x, 3)


def test_non_finite_features(monkeypatch):
    x = torch.randn(4, 2)
    x[1, 0], x[3, 1] = float("nan"), float("inf")
    _raises(r"x holds 2 NaN/Inf entries.*nan_to_num.*CHECK_FINITE = False", v.check_x, x, 2)
    assert v.check_x(x, 2, finite=False) == 4  # the layers skip it
    monkeypatch.setattr(v, "CHECK_FINITE", False)
    assert v.check_x(x, 2) == 4


def test_check_edge_index_accepts():
    v.check_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3)
    v.check_edge_index(torch.empty(2, 0, dtype=torch.long), 0)
    v.check_edge_index(torch.tensor([[0, 0], [1, 1]], dtype=torch.int32), 2)  # duplicates, int32
    v.check_edge_index(gcn_adjacency(torch.tensor([[0], [1]]), 3), 3)  # the sparse matrix


@pytest.mark.parametrize(
    "edges,match",
    [
        ([[0, 1]], r"must be a tensor of shape \(2, E\), got list"),
        (torch.tensor([[0, 1], [1, 2], [2, 0]]), r"shape \(2, E\), got \(3, 2\); transpose an \(E, 2\) list with \.t\(\)"),
        (torch.tensor([[0.0, 1.0], [1.0, 0.0]]), r"integer node indices.*edge_index\.long\(\)"),
        (torch.tensor([[0, -1], [1, 0]]), r"negative node index \(-1\)"),
        (torch.tensor([[0, 3], [1, 0]]), r"refers to node 3 but x has only 3 nodes; indices must lie in \[0, 3\)"),
    ],
)
def test_check_edge_index_refuses(edges, match):
    _raises(match, v.check_edge_index, edges, 3)


def test_sparse_matrix_of_the_wrong_size():
    adj = gcn_adjacency(torch.tensor([[0], [1]]), 4)
    _raises(r"sparse matrix of shape \(4, 4\), expected \(3, 3\)", v.check_edge_index, adj, 3)


def test_check_batch():
    v.check_batch(None, 4)
    v.check_batch(torch.tensor([2, 0, 0, 2]), 4)  # any order, unused indices allowed
    _raises(r"batch must have shape \(4,\), one graph index per node of x, got \(3,\)", v.check_batch,
            torch.zeros(3, dtype=torch.long), 4)
    _raises(r"integer graph indices.*batch\.long\(\)", v.check_batch, torch.zeros(4), 4)
    _raises(r"negative graph index \(-1\)", v.check_batch, torch.tensor([0, -1, 0, 0]), 4)


def test_check_inputs_runs_every_check():
    x = torch.randn(3, 2)
    assert v.check_inputs(x, 2, torch.tensor([[0], [2]]), torch.zeros(3, dtype=torch.long)) == 3
    assert v.check_inputs(x, 2) == 3
    _raises(r"use_graph=True needs edge_index", v.check_inputs, x, 2, need_edges=True)
    _raises(r"refers to node 5", v.check_inputs, x, 2, torch.tensor([[0], [5]]))
    _raises(r"batch must have shape \(3,\)", v.check_inputs, x, 2, None, torch.zeros(2, dtype=torch.long))
    bad = x.clone()
    bad[0, 0] = float("nan")
    _raises(r"NaN/Inf", v.check_inputs, bad, 2)
    assert v.check_inputs(bad, 2, finite=False) == 3


def test_dtype_and_device_of_x_against_the_model_and_the_layer():
    from wavygraph.nn import DIFFormerConv, WavyDIFFormer

    model = WavyDIFFormer(4, 8, 2, num_layers=2)
    conv = DIFFormerConv(4, use_graph=False)
    ei = torch.tensor([[0, 1], [1, 2]])
    x64 = torch.randn(3, 4, dtype=torch.float64)
    _raises(r"x has dtype torch.float64 but the model's parameters are torch.float32; convert it with "
            r"x.to\(torch.float32\) \(or the model with model.to\(torch.float64\)\)", model, x64, ei)
    _raises(r"x has dtype torch.float64 .*x.to\(torch.float32\)", conv, x64)
    _raises(r"x has dtype torch.bfloat16", model, x64.bfloat16(), ei)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts on its own
        assert model(x64.float(), ei).shape == (3, 2) and conv(x64.float().bfloat16()).shape == (3, 4)
    _raises(r"x is on meta but the model's parameters are on cpu; move it with x.to\('cpu'\)",
            model, torch.empty(3, 4, device="meta"), ei)
    _raises(r"edge_index is on meta but x is on cpu; move it with edge_index.to\('cpu'\)",
            model, x64.float(), ei.to("meta"))
    _raises(r"batch is on meta but x is on cpu", conv, x64.float(), None, torch.zeros(3, dtype=torch.long, device="meta"))
    assert model.double()(x64, ei).dtype == torch.float64


def test_edges_across_graphs_of_the_batch(monkeypatch):
    from wavygraph.nn import DIFFormerConv, WavyDIFFormer

    batch = torch.tensor([0, 0, 1, 1, 1, 2])
    inside = torch.tensor([[0, 1, 2, 3, 4], [1, 0, 3, 4, 2]])
    v.check_inputs(torch.randn(6, 2), 2, inside, batch)
    v.check_inputs(torch.randn(6, 2), 2, torch.empty(2, 0, dtype=torch.long), batch)
    across = torch.tensor([[0, 1, 4, 5], [1, 0, 5, 1]])
    msg = r"edge_index joins nodes of different graphs of batch \(2 edges, the first 4 -> 5 between graphs 1 and 2\); " \
          r"relabel each graph's edges by its node offset"
    _raises(msg, v.check_inputs, torch.randn(6, 2), 2, across, batch)
    _raises(msg, WavyDIFFormer(2, 4, 2, num_layers=1), torch.randn(6, 2), across, batch)
    _raises(msg, DIFFormerConv(2), torch.randn(6, 2), across, batch)
    v.check_inputs(torch.randn(6, 2), 2, gcn_adjacency(across, 6), batch)  # a sparse matrix is taken as given
    monkeypatch.setattr(v, "CHECK_GRAPHS", False)
    v.check_inputs(torch.randn(6, 2), 2, across, batch)
