"""DIFFormer's random-partition mini-batches and chunked evaluation."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import subgraph


def random_partition(num_nodes: int, batch_size: int, generator: torch.Generator | None = None) -> list[Tensor]:
    """A random permutation of the nodes split into chunks of ``batch_size``
    (the last one may be smaller): one epoch of DIFFormer's mini-batches."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    return list(torch.randperm(num_nodes, generator=generator).split(batch_size))


def node_chunks(num_nodes: int, chunk_size: int | None) -> list[Tensor]:
    """Consecutive node chunks ``[0, c), [c, 2c), ...`` (one chunk of all
    nodes when ``chunk_size`` is ``None`` or 0)."""
    if not chunk_size or chunk_size >= num_nodes:
        return [torch.arange(num_nodes)]
    return list(torch.arange(num_nodes).split(chunk_size))


def induced_subgraph(data: Data, nodes: Tensor) -> Data:
    """The subgraph induced by ``nodes``, relabelled ``0..len(nodes)-1`` in
    the order of ``nodes``; every node-level tensor (x, y, masks) is indexed
    the same way. ``sub.n_id`` holds the original node ids."""
    edge_index, _ = subgraph(nodes, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes)
    sub = Data(edge_index=edge_index, num_nodes=nodes.numel(), n_id=nodes)
    for key, value in data.items():
        if key in ("edge_index", "num_nodes") or not isinstance(value, Tensor):
            continue
        if value.dim() > 0 and value.shape[0] == data.num_nodes:
            sub[key] = value[nodes]
    return sub
