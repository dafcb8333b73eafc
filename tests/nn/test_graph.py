"""wavygraph.nn.graph: the GCN propagation matrix and ``propagate``,
against a dense float64 reference built here from the edge list."""
import pytest
import torch

from wavygraph.nn.graph import as_adjacency, gcn_adjacency, propagate


def dense_gcn(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """D^-1/2 (A + I) D^-1/2 with A[target, source] counting every edge
    (duplicates with their multiplicity) and D the row sums (in-degrees + 1)."""
    a = torch.zeros(n, n, dtype=torch.float64)
    for s, t in edge_index.t().tolist():
        if s != t:
            a[t, s] += 1.0
    a += torch.eye(n, dtype=torch.float64)
    d = a.sum(1).pow(-0.5)
    return d[:, None] * a * d[None, :]


def random_edges(n: int, m: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (m,), generator=g)
    dst = (src + torch.randint(1, n, (m,), generator=g)) % n  # directed, no self-loops
    return torch.stack([src, dst])


def test_matches_the_dense_normalisation():
    edges = random_edges(9, 30, seed=0)
    edges = torch.cat([edges, edges[:, :3]], 1)  # three duplicate edges count twice
    adj = gcn_adjacency(edges, 9, torch.float64)
    assert adj.layout == torch.sparse_csr and adj.shape == (9, 9) and adj.dtype == torch.float64
    torch.testing.assert_close(adj.to_dense(), dense_gcn(edges, 9), rtol=1e-12, atol=1e-12)


def test_messages_go_from_source_to_target():
    adj = gcn_adjacency(torch.tensor([[0], [1]]), 3, torch.float64)  # one directed edge 0 -> 1
    x = torch.tensor([[1.0], [10.0], [100.0]], dtype=torch.float64)
    out = propagate(adj, x)
    # node 1 has in-degree 1 (+ self-loop): 10/2 + 1/sqrt(2*1); node 0 hears only itself
    torch.testing.assert_close(out[:, 0], torch.tensor([1.0, 5.0 + 2**-0.5, 100.0], dtype=torch.float64))


def test_isolated_node_keeps_its_value_and_existing_self_loop_counts_once():
    edges = torch.tensor([[0, 1, 2], [1, 0, 2]])  # 2 has a self-loop of its own
    adj = gcn_adjacency(edges, 4, torch.float64).to_dense()
    assert adj[3, 3].item() == 1.0 and adj[3].abs().sum().item() == 1.0  # isolated: its own value
    assert adj[2, 2].item() == 1.0  # not 2 (loop + added loop), normalised by degree 1


@pytest.mark.parametrize("shape", [(7, 5), (7, 3, 4)])
def test_propagate_and_its_gradient_match_dense(shape):
    edges = random_edges(7, 20, seed=1)  # directed: the backward needs the transpose
    adj = gcn_adjacency(edges, 7, torch.float64)
    ref = dense_gcn(edges, 7)
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    out = propagate(adj, x)
    torch.testing.assert_close(out, (ref @ x.detach().reshape(7, -1)).view(shape), rtol=1e-12, atol=1e-12)
    g = torch.randn(*shape, dtype=torch.float64)
    (gx,) = torch.autograd.grad(out, x, g)
    torch.testing.assert_close(gx, (ref.t() @ g.reshape(7, -1)).view(shape), rtol=1e-12, atol=1e-12)
    (again,) = torch.autograd.grad(propagate(adj, x), x, g)  # second call: the cached transpose
    torch.testing.assert_close(again, gx, rtol=0, atol=0)


def test_gradcheck_through_propagate():
    adj = gcn_adjacency(random_edges(5, 9, seed=2), 5, torch.float64)
    x = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: propagate(adj, t), (x,))


def test_empty_graph_and_no_edges():
    adj = gcn_adjacency(torch.empty(2, 0, dtype=torch.long), 0)
    assert propagate(adj, torch.empty(0, 2, 3)).shape == (0, 2, 3)
    x = torch.randn(4, 3)
    torch.testing.assert_close(propagate(gcn_adjacency(torch.empty(2, 0, dtype=torch.long), 4), x), x)


def test_half_precision_input_is_summed_in_float32():
    edges = random_edges(16, 60, seed=3)
    assert gcn_adjacency(edges, 16, torch.bfloat16).dtype == torch.float32  # stored in float32
    adj = gcn_adjacency(edges, 16)
    x = torch.randn(16, 8).to(torch.bfloat16)
    out = propagate(adj, x)
    assert out.dtype == torch.bfloat16
    ref = dense_gcn(edges, 16) @ x.double()
    # one bf16 rounding of a float32 sum, not 16 bf16 additions
    torch.testing.assert_close(out.double(), ref, rtol=2**-8, atol=1e-6)


def test_as_adjacency_builds_from_edges_and_passes_a_matrix_through():
    edges = random_edges(6, 12, seed=3)
    adj = as_adjacency(edges, 6, torch.float64)
    torch.testing.assert_close(adj.to_dense(), dense_gcn(edges, 6), rtol=0, atol=1e-12)
    assert as_adjacency(adj, 6) is adj  # built once, not normalised again
