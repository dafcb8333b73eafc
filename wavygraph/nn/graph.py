"""The local branch's propagation matrices: GCN normalisation with self-loops,
and the mean over the in-neighbours derived from it."""
from __future__ import annotations

import warnings

import torch
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import to_torch_csr_tensor


def gcn_adjacency(edge_index: Tensor, num_nodes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""Sparse ``(N, N)`` matrix :math:`\hat{D}^{-1/2}(A + I)\hat{D}^{-1/2}`
    from PyG's :func:`gcn_norm`, oriented so that ``adj @ x`` sends messages
    from source ``edge_index[0]`` to target ``edge_index[1]``.

    Build it once per graph and pass it to every layer instead of
    ``edge_index`` (as PyG convs accept ``adj_t``).

    Args:
        edge_index (torch.Tensor): edges ``(2, E)``.
        num_nodes (int): number of nodes ``N``.
        dtype (torch.dtype, optional): dtype of the weights; half precision
            (``float16``, ``bfloat16``) is stored as ``float32``, the
            precision :func:`propagate` sums those in.
            (default: ``torch.float32``)

    Shapes:
        - **input:** edge_index ``(2, E)``
        - **output:** sparse CSR ``(N, N)``
    """
    dtype = torch.promote_types(dtype, torch.float32)
    ei, w = gcn_norm(edge_index, None, num_nodes, add_self_loops=True, dtype=dtype)
    with warnings.catch_warnings():  # torch's "sparse CSR is beta" notice
        warnings.simplefilter("ignore", UserWarning)
        return to_torch_csr_tensor(ei.flip(0), w, size=(num_nodes, num_nodes))


def as_adjacency(edge_index: Tensor, num_nodes: int, dtype: torch.dtype = torch.float32) -> Tensor:
    r"""The propagation matrix of the graph that a layer or model was given:
    a sparse ``(N, N)`` matrix (built once by :func:`gcn_adjacency`) as it
    is, an ``edge_index`` built into :func:`gcn_adjacency`'s matrix with
    ``num_nodes`` and ``dtype``.

    Shapes:
        - **input:** edge_index ``(2, E)`` or sparse ``(N, N)``
        - **output:** sparse ``(N, N)``
    """
    return edge_index if edge_index.layout != torch.strided else gcn_adjacency(edge_index, num_nodes, dtype)


def neighbour_mean(adj: Tensor) -> Tensor:
    r"""The mean over each node's in-neighbours without itself, as a sparse
    ``(N, N)`` matrix :math:`M` with :math:`(M x)_i = \frac{1}{|N(i)|}
    \sum_{j \in N(i)} x_j`, derived from :func:`gcn_adjacency`'s matrix
    ``adj`` and cached on it (one build per graph, however many layers read it).

    ``adj`` holds :math:`m_{ij} / \sqrt{d_i d_j}` for the :math:`m_{ij}` edges
    from :math:`j` to :math:`i \ne j` and :math:`1 / d_i` on its diagonal,
    with :math:`d_i = 1 + \sum_j m_{ij}`; so :math:`M_{ij} = m_{ij} / (d_i - 1)
    = \mathrm{adj}_{ij} \sqrt{d_i d_j} / (d_i - 1)`. As in PyG's ``mean``
    aggregation and the GCN weights, a duplicate edge counts with its
    multiplicity; self-loops are left out; a node without in-neighbours has
    an empty row (its mean is 0).

    Shapes:
        - **input:** adj sparse ``(N, N)`` from :func:`gcn_adjacency`
        - **output:** sparse CSR ``(N, N)``, ``adj``'s dtype
    """
    mean = getattr(adj, "_wavygraph_neighbour_mean", None)
    if mean is None:
        coo = adj.to_sparse_coo().coalesce()
        (row, col), w = coo.indices(), coo.values()
        n = adj.shape[0]
        loop = row == col
        deg = torch.ones(n, dtype=w.dtype, device=w.device)
        deg[row[loop]] = 1.0 / w[loop]  # d_i from the self-loop's weight 1 / d_i
        row, col, w = row[~loop], col[~loop], w[~loop]
        w = w * (deg[row] * deg[col]).sqrt() / (deg[row] - 1.0)
        with warnings.catch_warnings():  # torch's "sparse CSR is beta" notice
            warnings.simplefilter("ignore", UserWarning)
            mean = to_torch_csr_tensor(torch.stack([row, col]), w, size=(n, n), is_coalesced=True)
        adj._wavygraph_neighbour_mean = mean
    return mean


def propagate(adj: Tensor, x: Tensor) -> Tensor:
    """``adj @ x`` for a sparse ``adj`` and dense ``x`` of shape ``(N, ...)``,
    returned in ``x``'s dtype.

    The product runs in the wider of the two dtypes and at least float32:
    the sparse kernels lack half precision on CPU (``bfloat16``, ``float16``
    ``x``, from a cast model or autocast, is summed in float32 and cast back).

    Shapes:
        - **input:** adj sparse ``(N, N)``, x ``(N, *)``
        - **output:** ``(N, *)``
    """
    wide = torch.promote_types(torch.promote_types(adj.dtype, x.dtype), torch.float32)
    with torch.autocast(device_type=x.device.type, enabled=False):
        x2 = x.flatten(1).to(wide)  # not reshape(n, -1): also valid for n = 0
        if adj.dtype != wide:
            adj = adj.to(wide)
        if adj.requires_grad or not x2.requires_grad:
            out = torch.sparse.mm(adj, x2)
        else:
            out = _SparseMM.apply(adj, x2)
    return out.view(x.shape).to(x.dtype)


def _transposed(adj: Tensor) -> Tensor:
    """``adj^T`` in ``adj``'s layout, built once per matrix and cached on it
    (the backward of ``adj @ x`` needs it in every layer; building it sorts
    all E entries)."""
    at = getattr(adj, "_wavygraph_transposed", None)
    if at is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            if adj.layout == torch.sparse_csr:
                at = adj.to_sparse_coo().t().coalesce().to_sparse_csr()
            else:
                at = adj.t().coalesce()
        adj._wavygraph_transposed = at
    return at


class _SparseMM(torch.autograd.Function):
    """``adj @ x`` whose backward ``adj^T @ g`` reuses a cached ``adj^T``
    instead of transposing (and sorting) the sparse matrix on every call."""

    @staticmethod
    def forward(ctx, adj: Tensor, x: Tensor) -> Tensor:
        ctx.adj = adj
        return torch.sparse.mm(adj, x)

    @staticmethod
    def backward(ctx, g: Tensor):
        return None, torch.sparse.mm(_transposed(ctx.adj), g)
