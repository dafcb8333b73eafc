r"""Contextual stochastic block model (CSBM), generated on the fly.

Labels are balanced at random over ``num_classes`` classes. Features:

.. math::
    x_i = \mathrm{snr}\cdot\mu_{y_i} + \varepsilon_i,\qquad
    \mu_c \sim \mathcal{N}(0, I_F),\ \varepsilon_i \sim \mathcal{N}(0, I_F),

so ``snr`` is the ratio of the class-mean scale to the noise scale per
feature. Edges: ``num_nodes * avg_degree / 2`` draws of a uniform source
node and a target drawn uniformly from the source's class with probability
``homophily``, else uniformly from one of the other classes; self-loops and
duplicates are dropped and the graph is made undirected, so the average
degree is close to ``avg_degree`` and the edge homophily close to
``homophily``. Split: random 60/20/20 (seeded by ``data.split``).
"""
from __future__ import annotations

import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from .errors import WavygraphDataError
from .info import DatasetInfo
from .pyg import random_split_masks

#: named parameter sets; ``arxiv`` matches ogbn-arxiv's size.
CSBM_PRESETS: dict[str, dict] = {
    "arxiv": dict(num_nodes=169_343, num_classes=40, num_features=128, avg_degree=13.7, homophily=0.65, snr=0.3),
    "small": dict(num_nodes=2_000, num_classes=5, num_features=32, avg_degree=8.0, homophily=0.7, snr=0.3),
}


def make_csbm(
    num_nodes: int,
    num_classes: int,
    num_features: int,
    avg_degree: float,
    homophily: float,
    snr: float,
    seed: int = 0,
) -> Data:
    """One CSBM graph as a PyG :class:`Data` with ``x``, ``edge_index``, ``y``."""
    if num_nodes < 2 or num_classes < 2 or num_features < 1:
        raise WavygraphDataError("csbm needs num_nodes >= 2, num_classes >= 2, num_features >= 1")
    if num_classes > num_nodes:
        raise WavygraphDataError("csbm needs num_classes <= num_nodes")
    if not 0.0 <= homophily <= 1.0 or avg_degree <= 0 or snr < 0:
        raise WavygraphDataError("csbm needs homophily in [0, 1], avg_degree > 0, snr >= 0")
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(num_nodes) % num_classes
    y = y[torch.randperm(num_nodes, generator=g)]  # balanced, random order
    means = torch.randn(num_classes, num_features, generator=g)
    x = snr * means[y] + torch.randn(num_nodes, num_features, generator=g)  # (N, F)

    order = torch.argsort(y, stable=True)  # nodes grouped by class
    counts = torch.bincount(y, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    m = int(round(num_nodes * avg_degree / 2))
    src = torch.randint(0, num_nodes, (m,), generator=g)
    same = torch.rand(m, generator=g) < homophily
    shift = torch.randint(1, num_classes, (m,), generator=g)  # another class
    cls = torch.where(same, y[src], (y[src] + shift) % num_classes)
    dst = order[starts[cls] + (torch.rand(m, generator=g) * counts[cls]).long().clamp_max(counts[cls] - 1)]
    edge_index, _ = remove_self_loops(torch.stack([src, dst]))
    edge_index = to_undirected(coalesce(edge_index, num_nodes=num_nodes), num_nodes=num_nodes)
    return Data(x=x, edge_index=edge_index, y=y, num_nodes=num_nodes)


def load_csbm(split: int = 0, preset: str = "arxiv", seed: int = 0, **params) -> tuple[Data, DatasetInfo]:
    """A CSBM graph from ``preset`` with ``params`` (``None`` values keep the
    preset's) and a random 60/20/20 split seeded by ``split``."""
    if preset not in CSBM_PRESETS:
        raise WavygraphDataError(f"unknown csbm preset {preset!r}; choose one of {', '.join(map(repr, CSBM_PRESETS))}")
    opts = dict(CSBM_PRESETS[preset])
    for key, value in params.items():
        if key not in opts:
            raise WavygraphDataError(f"unknown csbm option {key!r}; choose from {', '.join(opts)}")
        if value is not None:
            opts[key] = value
    data = make_csbm(**opts, seed=seed)
    data.train_mask, data.val_mask, data.test_mask = random_split_masks(data.y, split)
    info = DatasetInfo("csbm", "multiclass", "acc", opts["num_features"], opts["num_classes"], num_splits=0, extra=opts)
    return data, info
