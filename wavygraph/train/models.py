"""The models that ``model.arch`` names, built for one data set.

Every model is called as ``model(x, adj)`` by the training loop, with ``adj``
the loop's sparse GCN propagation matrix :math:`\\hat{D}^{-1/2}(A + I)\\hat{D}^{-1/2}`
(:func:`wavygraph.nn.gcn_adjacency`, oriented ``adj[target, source]``, the
layout PyG calls ``adj_t``); a ``(2, E)`` ``edge_index`` is accepted too.

* ``wavy``: :class:`wavygraph.nn.WavyDIFFormer` with the ``model`` keys that
  are arguments of its constructor (read from its signature).
* ``gcn``: PyG's :class:`torch_geometric.nn.models.GCN` (Kipf & Welling,
  ICLR 2017) with ``normalize=False`` on ``adj``, which is exactly the
  normalisation ``GCNConv`` would compute.
* ``mlp``: PyG's :class:`torch_geometric.nn.models.MLP` without
  normalisation layers (``norm=None``, as the GCN has none); ignores the graph.
* ``gcnii``: :class:`GCNII`, ``GCN2Conv`` layers (Chen et al., ICML 2020)
  laid out as PyG's ``examples/gcn2_cora.py``.
* ``sgformer``: PyG's :class:`torch_geometric.nn.models.SGFormer` (Wu et
  al., NeurIPS 2023): ``model.sgformer_trans_layers`` attention layers over
  all nodes of the (sub)graph plus a GCN branch of ``model.num_layers``
  ``GCNConv`` layers, which normalise the edges themselves (so it receives
  the edges of ``adj`` without self-loops).

:func:`param_groups` gives the optimiser the per-part weight decay of GCNII
(``model.gcnii_conv_weight_decay`` on the convolutions) and SGFormer
(``model.sgformer_trans_weight_decay`` on the attention branch).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor
from torch_geometric.nn import GCN2Conv, GCNConv
from torch_geometric.nn.models import GCN, MLP, SGFormer

from wavygraph.config import ConfigError, wavy_model_keys
from wavygraph.data import DatasetInfo
from wavygraph.nn import WavyDIFFormer
from wavygraph.nn.graph import as_adjacency, propagate


def _as_edge_index(adj: Tensor) -> Tensor:
    """``(2, E)`` source/target edges of a sparse ``adj[target, source]``
    without its diagonal (``GCNConv`` adds the self-loops back); an
    ``edge_index`` passes through."""
    if adj.layout == torch.strided:
        return adj
    coo = adj.to_sparse_coo().coalesce()
    target, source = coo.indices()
    keep = target != source
    return torch.stack([source[keep], target[keep]])


class GCNII(torch.nn.Module):
    r"""GCNII from PyG's :class:`~torch_geometric.nn.GCN2Conv`, in the layout
    of PyG's ``examples/gcn2_cora.py``: dropout, ``Linear`` + ReLU (the
    initial state :math:`x_0`), then per layer :math:`l = 1..L` dropout,
    ``GCN2Conv(alpha, theta, layer=l)`` and ReLU, then dropout and the output
    ``Linear``. The convolutions get the already normalised ``adj``
    (``normalize=False``)."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int,
                 alpha: float = 0.1, theta: float = 0.5, shared_weights: bool = True, dropout: float = 0.6):
        super().__init__()
        self.lins = torch.nn.ModuleList([torch.nn.Linear(in_channels, hidden_channels),
                                         torch.nn.Linear(hidden_channels, out_channels)])
        self.convs = torch.nn.ModuleList(
            GCN2Conv(hidden_channels, alpha, theta, layer + 1, shared_weights, normalize=False)
            for layer in range(num_layers)
        )
        self.dropout = dropout
        self.conv_weight_decay: float | None = None

    def forward(self, x: Tensor, adj: Tensor) -> Tensor:
        adj = as_adjacency(adj, x.shape[0], x.dtype)
        x = F.dropout(x, self.dropout, self.training)
        x = x0 = self.lins[0](x).relu()
        for conv in self.convs:
            x = conv(F.dropout(x, self.dropout, self.training), x0, adj).relu()
        return self.lins[1](F.dropout(x, self.dropout, self.training))

    def weight_decay_groups(self, weight_decay: float) -> list[dict]:
        conv_wd = weight_decay if self.conv_weight_decay is None else self.conv_weight_decay
        return [{"params": list(self.convs.parameters()), "weight_decay": conv_wd},
                {"params": list(self.lins.parameters()), "weight_decay": weight_decay}]


class _AdjGCNConv(GCNConv):
    """``GCNConv`` whose sparse aggregation ``adj_t @ x`` is
    :func:`wavygraph.nn.graph.propagate`: the same product, but its backward
    reuses one cached transpose of ``adj_t`` instead of transposing (sorting
    every edge) in each layer of each epoch (at arxiv size, hidden 256, one
    CPU thread: backward 4.0 -> 2.0 s, docs/ogb.md)."""

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor) -> Tensor:
        return propagate(adj_t, x)


class _AdjGCNNet(GCN):
    def init_conv(self, in_channels: int, out_channels: int, **kwargs) -> GCNConv:
        return _AdjGCNConv(in_channels, out_channels, **kwargs)


class AdjGCN(torch.nn.Module):
    """PyG's ``GCN`` called on the loop's normalised ``adj`` (``normalize=False``),
    its convolutions aggregating with :func:`~wavygraph.nn.graph.propagate`."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int, dropout: float):
        super().__init__()
        self.net = _AdjGCNNet(in_channels, hidden_channels, num_layers, out_channels, dropout=dropout,
                              normalize=False)

    def forward(self, x: Tensor, adj: Tensor) -> Tensor:
        return self.net(x, as_adjacency(adj, x.shape[0], x.dtype))


class GraphFreeMLP(torch.nn.Module):
    """PyG's ``MLP`` (no normalisation layers); the graph argument is ignored."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int, dropout: float):
        super().__init__()
        self.net = MLP(in_channels=in_channels, hidden_channels=hidden_channels, out_channels=out_channels,
                       num_layers=num_layers, dropout=dropout, norm=None)

    def forward(self, x: Tensor, adj: Tensor | None = None) -> Tensor:
        return self.net(x)


class EdgeSGFormer(torch.nn.Module):
    """PyG's ``SGFormer`` on the edges of ``adj``, all nodes in one attention
    batch. Its output is log-probabilities (``log_softmax``)."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, m: DictConfig):
        super().__init__()
        self.net = SGFormer(in_channels, hidden_channels, out_channels, trans_num_layers=m.sgformer_trans_layers,
                            trans_num_heads=m.heads, trans_dropout=m.sgformer_trans_dropout,
                            gnn_num_layers=m.num_layers, gnn_dropout=m.dropout,
                            graph_weight=m.sgformer_graph_weight)
        self.trans_weight_decay = m.sgformer_trans_weight_decay

    def forward(self, x: Tensor, adj: Tensor) -> Tensor:
        batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        return self.net(x, _as_edge_index(adj), batch)

    def weight_decay_groups(self, weight_decay: float) -> list[dict]:
        trans_wd = weight_decay if self.trans_weight_decay is None else self.trans_weight_decay
        trans = list(self.net.trans_conv.parameters())
        ids = {id(p) for p in trans}
        return [{"params": trans, "weight_decay": trans_wd},
                {"params": [p for p in self.parameters() if id(p) not in ids], "weight_decay": weight_decay}]


def build_model(cfg: DictConfig, data_info: DatasetInfo) -> torch.nn.Module:
    """The model of ``cfg.model`` (``cfg.model.arch``) sized for ``data_info``."""
    m = cfg.model
    arch = m.get("arch", "wavy")
    dims = (data_info.num_features, m.hidden_channels, data_info.num_outputs)
    if arch == "wavy":
        opts = {key: m[key] for key in wavy_model_keys()}
        return WavyDIFFormer(data_info.num_features, out_channels=data_info.num_outputs, **opts)
    if arch == "gcn":
        return AdjGCN(*dims, m.num_layers, m.dropout)
    if arch == "mlp":
        return GraphFreeMLP(*dims, m.num_layers, m.dropout)
    if arch == "gcnii":
        model = GCNII(*dims, m.num_layers, m.gcnii_alpha, m.gcnii_theta, m.gcnii_shared_weights, m.dropout)
        model.conv_weight_decay = m.gcnii_conv_weight_decay
        return model
    if arch == "sgformer":
        if data_info.task == "multilabel":
            raise ConfigError(f"model.arch=sgformer outputs class log-probabilities and cannot fit the multi-label "
                              f"data set {data_info.name}; use another model.arch")
        return EdgeSGFormer(*dims, m)
    raise ConfigError(f"model.arch={arch!r} is not one of 'wavy', 'gcn', 'mlp', 'gcnii', 'sgformer'")


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """The optimiser's parameter groups: the model's own split of weight
    decay (``weight_decay_groups``), else one group with ``weight_decay``."""
    groups = getattr(model, "weight_decay_groups", None)
    if groups is None:
        return [{"params": list(model.parameters()), "weight_decay": weight_decay}]
    return groups(weight_decay)
