r"""Contextual stochastic block models (CSBM), generated on the fly.

Multi-class (:func:`make_csbm`; presets ``small`` and ``arxiv``). Labels
are balanced at random over ``num_classes`` classes. Features:

.. math::
    x_i = \mathrm{snr}\cdot\mu_{y_i} + \varepsilon_i,\qquad
    \mu_c \sim \mathcal{N}(0, I_F),\ \varepsilon_i \sim \mathcal{N}(0, I_F),

so ``snr`` is the ratio of the class-mean scale to the noise scale per
feature. Edges: ``num_nodes * avg_degree / 2`` draws of a uniform source
node and a target drawn uniformly from the source's class with probability
``homophily``, else uniformly from one of the other classes; self-loops and
duplicates are dropped and the graph is made undirected, so the average
degree is close to ``avg_degree`` and the edge homophily close to
``homophily``.

Multi-label (:func:`make_multilabel_csbm`; preset ``proteins``, the shape of
ogbn-proteins). Nodes fall into ``num_communities`` hidden communities with
embeddings :math:`m_k \sim \mathcal{N}(0, I_D)`, ``D = num_edge_features``;
edges are drawn as above with communities in place of classes (extra rounds
of draws replace dropped duplicates, so dense graphs keep ``avg_degree``).
Every undirected edge carries :math:`e_{ij} = \mathrm{snr}\,(m_{k_i} +
m_{k_j})/2 + \varepsilon_{ij}`; a node's features are the mean of its
incident edges' features (as the ogbn-proteins loader does). Task ``t`` of
node ``i`` is :math:`1[w_t^\top m_{k_i} + b_t + \mathrm{label\_noise}\cdot
\eta_{it} > 0]` with :math:`w_t \sim \mathcal{N}(0, I_D / D)` and offsets
:math:`b_t \sim \mathcal{N}(-0.5, 0.5^2)` (positive rates vary by task), so
``label_noise`` bounds the attainable ROC-AUC.

Split: random, seeded by ``data.split``; 60/20/20, or for the ``arxiv`` and
``proteins`` presets the official split's sizes, scaled to ``num_nodes``.
Those two presets are scored by OGB's ``Evaluator`` of the matching data set.
Every draw comes from one ``torch.Generator`` seeded by ``seed``.
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from .errors import WavygraphDataError
from .info import DatasetInfo
from .splits import random_split

#: named parameter sets; ``arxiv`` and ``proteins`` have the OGB sets' shapes.
CSBM_PRESETS: dict[str, dict] = {
    "arxiv": dict(num_nodes=169_343, num_classes=40, num_features=128, avg_degree=13.77, homophily=0.26, snr=0.21),
    "small": dict(num_nodes=2_000, num_classes=5, num_features=32, avg_degree=8.0, homophily=0.7, snr=0.3),
    "proteins": dict(
        num_nodes=132_534, num_tasks=112, num_edge_features=8, num_communities=20,
        avg_degree=298.5, homophily=0.5, snr=1.0, label_noise=1.6,
    ),
}

#: per preset: official split sizes (train, valid, test) and the OGB set scored.
PRESET_OGB: dict[str, tuple[tuple[int, int, int], str]] = {
    "arxiv": ((90_941, 29_799, 48_603), "ogbn-arxiv"),
    "proteins": ((86_619, 21_236, 24_679), "ogbn-proteins"),
}


def _draw_edges(group: torch.Tensor, num_groups: int, m: int, homophily: float, g) -> torch.Tensor:
    """``m`` directed draws: uniform source, target in the source's group with
    probability ``homophily``, else in a uniformly chosen other group."""
    n = group.numel()
    order = torch.argsort(group, stable=True)  # nodes grouped
    counts = torch.bincount(group, minlength=num_groups)
    starts = torch.cumsum(counts, 0) - counts
    src = torch.randint(0, n, (m,), generator=g)
    same = torch.rand(m, generator=g) < homophily
    shift = torch.randint(1, num_groups, (m,), generator=g)  # another group
    grp = torch.where(same, group[src], (group[src] + shift) % num_groups)
    offset = (torch.rand(m, generator=g) * counts[grp]).long().clamp_max(counts[grp] - 1)
    return torch.stack([src, order[starts[grp] + offset]])


def _check(num_nodes: int, num_groups: int, avg_degree: float, homophily: float, snr: float) -> None:
    if num_nodes < 2 or num_groups < 2:
        raise WavygraphDataError("csbm needs num_nodes >= 2 and num_classes (num_communities) >= 2")
    if num_groups > num_nodes:
        raise WavygraphDataError("csbm needs num_classes (num_communities) <= num_nodes")
    if not 0.0 <= homophily <= 1.0 or avg_degree <= 0 or snr < 0:
        raise WavygraphDataError("csbm needs homophily in [0, 1], avg_degree > 0, snr >= 0")


def make_csbm(
    num_nodes: int,
    num_classes: int,
    num_features: int,
    avg_degree: float,
    homophily: float,
    snr: float,
    seed: int = 0,
) -> Data:
    """One multi-class CSBM graph as a PyG :class:`Data` with ``x``, ``edge_index``, ``y``."""
    _check(num_nodes, num_classes, avg_degree, homophily, snr)
    if num_features < 1:
        raise WavygraphDataError("csbm needs num_features >= 1")
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(num_nodes) % num_classes
    y = y[torch.randperm(num_nodes, generator=g)]  # balanced, random order
    means = torch.randn(num_classes, num_features, generator=g)
    x = snr * means[y] + torch.randn(num_nodes, num_features, generator=g)  # (N, F)
    m = int(round(num_nodes * avg_degree / 2))
    edge_index, _ = remove_self_loops(_draw_edges(y, num_classes, m, homophily, g))
    edge_index = to_undirected(coalesce(edge_index, num_nodes=num_nodes), num_nodes=num_nodes)
    return Data(x=x, edge_index=edge_index, y=y, num_nodes=num_nodes)


def _pairs(group, num_groups: int, avg_degree: float, homophily: float, g, rounds: int = 4) -> torch.Tensor:
    """Unique undirected pairs ``(u < v)``, about ``N * avg_degree / 2`` of them."""
    n = group.numel()
    target = int(round(n * min(avg_degree, n - 1) / 2))
    pairs = torch.empty(2, 0, dtype=torch.long)
    for _ in range(rounds):  # later rounds replace the self-loops and duplicates dropped
        need = target - pairs.shape[1]
        if need <= 0.005 * target:
            break
        new, _ = remove_self_loops(_draw_edges(group, num_groups, need, homophily, g))
        new = torch.stack([new.min(0).values, new.max(0).values])
        pairs = coalesce(torch.cat([pairs, new], 1), num_nodes=n)
    return pairs


def make_multilabel_csbm(
    num_nodes: int,
    num_tasks: int,
    num_edge_features: int,
    num_communities: int,
    avg_degree: float,
    homophily: float,
    snr: float,
    label_noise: float,
    seed: int = 0,
    keep_edge_attr: bool = False,
) -> Data:
    """One multi-label CSBM graph (see the module docstring): ``x`` the mean of
    the incident edges' features, ``y`` ``(N, num_tasks)`` float 0/1; with
    ``keep_edge_attr`` also ``edge_attr`` ``(E, num_edge_features)`` and the
    hidden ``community`` of every node."""
    _check(num_nodes, num_communities, avg_degree, homophily, snr)
    if num_tasks < 1 or num_edge_features < 1 or label_noise < 0:
        raise WavygraphDataError("csbm needs num_tasks >= 1, num_edge_features >= 1, label_noise >= 0")
    g = torch.Generator().manual_seed(seed)
    d = num_edge_features
    comm = torch.randint(0, num_communities, (num_nodes,), generator=g)
    emb = torch.randn(num_communities, d, generator=g)
    w = torch.randn(d, num_tasks, generator=g) / d**0.5
    b = -0.5 + 0.5 * torch.randn(num_tasks, generator=g)
    logits = emb[comm] @ w + b + label_noise * torch.randn(num_nodes, num_tasks, generator=g)
    y = (logits > 0).float()
    pairs = _pairs(comm, num_communities, avg_degree, homophily, g)
    total, feats = torch.zeros(num_nodes, d), []
    for chunk in pairs.split(1 << 22, dim=1):  # bounded memory on dense graphs
        u, v = chunk
        feat = snr * (emb[comm[u]] + emb[comm[v]]) / 2 + torch.randn(u.numel(), d, generator=g)
        total.index_add_(0, u, feat).index_add_(0, v, feat)
        feats += [feat] if keep_edge_attr else []
    deg = torch.bincount(pairs.view(-1), minlength=num_nodes)
    x = total / deg.clamp_min(1).unsqueeze(1)
    if keep_edge_attr:
        edge_index, edge_attr = to_undirected(pairs, torch.cat(feats), num_nodes=num_nodes)
        return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, y=y, community=comm, num_nodes=num_nodes)
    return Data(x=x, edge_index=to_undirected(pairs, num_nodes=num_nodes), y=y, num_nodes=num_nodes)


def load_csbm(split: int = 0, preset: str = "arxiv", seed: int = 0, **params) -> tuple[Data, DatasetInfo]:
    """A CSBM graph from ``preset`` with ``params`` (``None`` values keep the
    preset's) and a random split seeded by ``split``."""
    if preset not in CSBM_PRESETS:
        raise WavygraphDataError(f"unknown csbm preset {preset!r}; choose one of {', '.join(map(repr, CSBM_PRESETS))}")
    opts = dict(CSBM_PRESETS[preset])
    for key, value in params.items():
        if value is None:
            continue
        if key not in opts:
            raise WavygraphDataError(f"unknown csbm option {key!r} for preset {preset!r}; choose from {', '.join(opts)}")
        opts[key] = value
    sizes, ogb_name = PRESET_OGB.get(preset, ((0.6, 0.2, 0.2), None))
    total = sum(sizes)
    if "num_tasks" in opts:
        data = make_multilabel_csbm(**opts, seed=seed)
        info = DatasetInfo("csbm", "multilabel", "rocauc", opts["num_edge_features"], opts["num_tasks"], num_splits=0)
    else:
        data = make_csbm(**opts, seed=seed)
        info = DatasetInfo("csbm", "multiclass", "acc", opts["num_features"], opts["num_classes"], num_splits=0)
    if ogb_name == "ogbn-proteins" and opts["num_tasks"] != 112:
        ogb_name = None  # OGB's Evaluator of ogbn-proteins checks for its 112 tasks
    info.ogb_name, info.extra = ogb_name, opts
    train, val = sizes[0] / total, sizes[1] / total
    data.train_mask, data.val_mask, data.test_mask = random_split(data.y, split, train, val)
    return data, info
