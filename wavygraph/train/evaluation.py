"""Loss, prediction and scores of a model on one node-prediction data set.

Evaluation covers every node. With a ``chunk_size`` (``train.eval_batch_size``,
default ``train.batch_size``) the nodes are taken in consecutive chunks and
each chunk is evaluated on its induced subgraph, which bounds the memory.
For the global attention this means attention *within each chunk* rather
than over the whole graph, as in DIFFormer's large-graph evaluation;
``train.eval_batch_size=0`` gives one exact full-graph pass.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from wavygraph.checks import out_of_range
from wavygraph.data import DatasetInfo, InvalidDataError, induced_subgraph, node_chunks
from wavygraph.nn import gcn_adjacency

#: ``(score key, mask attribute)`` of the three splits.
SPLITS = (("train", "train_mask"), ("val", "val_mask"), ("test", "test_mask"))


def graph_input(data: Data, device: torch.device) -> tuple[Tensor, Tensor]:
    """x and the GCN propagation matrix (built once) on ``device``."""
    x = data.x.to(device)
    adj = gcn_adjacency(data.edge_index.to(device), data.num_nodes, x.dtype)
    return x, adj


def check_targets(logits: Tensor, y: Tensor, task: str) -> None:
    """Targets must fit the loss: multi-class ``(n,)`` integer labels in
    ``[0, classes)``, multi-label ``(n, tasks)``; raises :class:`InvalidDataError`."""
    if task == "multilabel":
        if tuple(y.shape) != tuple(logits.shape):
            raise InvalidDataError(f"multi-label targets must have shape {tuple(logits.shape)}, got {tuple(y.shape)}")
        return
    if y.dim() != 1:
        raise InvalidDataError(
            f"multi-label targets of shape {tuple(y.shape)} given to the multi-class (cross-entropy) loss; "
            "multi-class labels are one integer per node, shape (n,)"
        )
    if y.dtype.is_floating_point or y.dtype == torch.bool:
        raise InvalidDataError(f"multi-class labels must be integers, got dtype {y.dtype}")
    outside = out_of_range(y, logits.shape[-1])
    if outside is not None:
        raise InvalidDataError(
            f"labels must lie in [0, {logits.shape[-1]}) for {logits.shape[-1]} classes, got {outside[0]}..{outside[1]}"
        )


def loss_fn(logits: Tensor, y: Tensor, task: str) -> Tensor:
    """Binary cross-entropy per task for ``multilabel``, else cross-entropy
    (targets checked by :func:`check_targets`)."""
    check_targets(logits, y, task)
    if task == "multilabel":
        return F.binary_cross_entropy_with_logits(logits, y.float())
    return F.cross_entropy(logits, y)


@torch.no_grad()
def predict(model: torch.nn.Module, data: Data, chunk_size: int | None = None, device=None) -> Tensor:
    """Outputs ``(N, out)`` for every node, on the CPU: one full-graph pass,
    or consecutive node chunks of ``chunk_size`` on their induced subgraphs."""
    device = device or next(model.parameters()).device
    model.eval()
    outs = []
    for nodes in node_chunks(data.num_nodes, chunk_size):
        part = data if nodes.numel() == data.num_nodes else induced_subgraph(data, nodes)
        x, adj = graph_input(part, device)
        outs.append(model(x, adj).float().cpu())
    return torch.cat(outs, 0)


def evaluate(
    model: torch.nn.Module, data: Data, info: DatasetInfo, chunk_size: int | None = None, device=None
) -> dict[str, float]:
    """``{"train", "val", "test"}`` scores (``info.metric``) and ``"val_loss"``
    (the loss on the validation nodes); see :func:`predict` for ``chunk_size``."""
    logits = predict(model, data, chunk_size, device)
    y = data.y.cpu()
    scores = {key: info.score(y[data[mask].cpu()], logits[data[mask].cpu()]) for key, mask in SPLITS}
    val = data.val_mask.cpu()
    scores["val_loss"] = loss_fn(logits[val], y[val], info.task).item()
    return scores
