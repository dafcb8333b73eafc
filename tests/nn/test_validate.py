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
