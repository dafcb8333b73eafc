r"""Over-smoothing diagnostics, per layer (definitions in the table below).

Every measure is a plain function of one layer's hidden states ``H``
(``(N, d)``) and is usable on its own; :func:`layer_diagnostics` evaluates all
of them on the hidden states of a :class:`~wavygraph.nn.WavyDIFFormer`
(``return_hidden=True``). All values are computed in float64 and returned as
Python floats.

========================= ===================================================
measure                   definition
========================= ===================================================
``dirichlet_energy``      :math:`\frac1N\sum_{(i,j)\in E}\lVert h_i/\sqrt{1+d_i}
                          - h_j/\sqrt{1+d_j}\rVert^2`
``feature_variance``      mean over channels of the variance across nodes
``inter_class_variance``  trace of the covariance of the class-mean vectors
``cosine_similarity``     mean of :math:`\cos(h_i, h_j)` over pairs
                          :math:`i \ne j`, in :math:`O(Nd)`
``spectral_gap``          :math:`1 - |\lambda_2(A)|` of a layer's (global,
                          ``simple`` kernel) attention matrix, exactly from a
                          :math:`(d+1)\times(d+1)` matrix
========================= ===================================================

Over-smoothing shows as energy, variances and spectral gap that fall with
depth (the gap: a large gap means the attention mixes fast, i.e. smooths
hard) and a cosine similarity that rises to 1.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import degree

from .nn.conv import DIFFormerConv
from .nn.functional import normalize_qk

#: Names of the per-layer measures in the order :func:`layer_diagnostics`
#: returns them.
MEASURES = (
    "dirichlet_energy",
    "feature_variance",
    "inter_class_variance",
    "cosine_similarity",
    "spectral_gap",
)


def _check_h(h: Tensor) -> Tensor:
    if not isinstance(h, Tensor) or h.dim() != 2:
        shape = tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__
        raise ValueError(f"hidden states must have shape (N, d), got {shape}")
    return h.detach().double()


def dirichlet_energy(h: Tensor, edge_index: Tensor) -> float:
    r"""Dirichlet energy of ``h`` on the graph, symmetric normalisation.

    .. math::
        E = \frac{1}{N}\sum_{(i,j)\in\mathcal{E}}
            \Big\lVert \frac{h_i}{\sqrt{1+d_i}} - \frac{h_j}{\sqrt{1+d_j}}\Big\rVert^2

    Every column ``(i, j)`` of ``edge_index`` is one term, so an undirected
    graph stored with both directions (PyG's convention) counts each edge
    twice. :math:`d_i` is the number of columns with source ``i`` (the degree,
    for such a graph), computed with :func:`torch_geometric.utils.degree`.

    Args:
        h (torch.Tensor): hidden states ``(N, d)``.
        edge_index (torch.Tensor): edges ``(2, E)``.

    Returns:
        float: the energy (0 for a graph without edges or nodes).
    """
    h = _check_h(h)
    n = h.shape[0]
    if n == 0 or edge_index.numel() == 0:
        return 0.0
    src, dst = edge_index[0].long(), edge_index[1].long()
    deg = degree(src, n, dtype=h.dtype)  # (N,)
    hn = h / (1.0 + deg).sqrt().unsqueeze(-1)  # (N, d)
    diff = hn[src] - hn[dst]  # (E, d)
    return float(diff.pow(2).sum() / n)


def feature_variance(h: Tensor) -> float:
    r"""Node feature variance: the (population, ``1/N``) variance of every
    channel across the nodes, averaged over the channels.

    .. math:: \frac{1}{d}\sum_c \frac{1}{N}\sum_i (h_{ic} - \bar h_c)^2

    Args:
        h (torch.Tensor): hidden states ``(N, d)``.
    """
    h = _check_h(h)
    if h.shape[0] == 0:
        return float("nan")
    return float(h.var(dim=0, unbiased=False).mean())


def inter_class_variance(h: Tensor, y: Tensor) -> float:
    r"""Inter-class variance: the trace of the (population) covariance of the
    class-mean vectors :math:`\mu_c = \mathrm{mean}\{h_i : y_i = c\}`, one
    per class present in ``y`` (every class weighted equally).

    .. math:: \sum_{\text{channels}} \frac{1}{C}\sum_c (\mu_c - \bar\mu)^2

    Args:
        h (torch.Tensor): hidden states ``(N, d)``.
        y (torch.Tensor): class of every node ``(N,)`` (or ``(N, 1)``);
            negative labels (unlabelled nodes) are left out.
    """
    h = _check_h(h)
    if y.dim() == 2 and y.shape[1] == 1:
        y = y.view(-1)
    if y.dim() != 1 or y.numel() != h.shape[0] or y.dtype.is_floating_point:
        raise ValueError(f"y must hold one integer class per node ({h.shape[0]}), got shape {tuple(y.shape)}, dtype {y.dtype}")
    keep = y >= 0
    h, y = h[keep], y[keep].long()
    if y.numel() == 0:
        return float("nan")
    classes, inverse = torch.unique(y, return_inverse=True)
    counts = torch.bincount(inverse, minlength=classes.numel()).to(h.dtype)  # (C,)
    sums = torch.zeros(classes.numel(), h.shape[1], dtype=h.dtype).index_add_(0, inverse, h)
    means = sums / counts.unsqueeze(-1)  # (C, d)
    return float(means.var(dim=0, unbiased=False).sum())


def cosine_similarity(h: Tensor) -> float:
    r"""Mean pairwise cosine similarity over ordered pairs :math:`i \ne j`,
    in :math:`O(Nd)` time and memory:

    .. math::
        \frac{\lVert\sum_i \hat h_i\rVert^2 - \sum_i \lVert\hat h_i\rVert^2}{N(N-1)}

    with :math:`\hat h_i = h_i/\lVert h_i\rVert` (for non-zero rows
    :math:`\lVert\hat h_i\rVert^2 = 1`, so the numerator is the usual
    :math:`\lVert\sum_i\hat h_i\rVert^2 - N`; a zero row has similarity 0 to
    every other row).

    Args:
        h (torch.Tensor): hidden states ``(N, d)``.

    Returns:
        float: a value in ``[-1, 1]``; NaN for fewer than two nodes.
    """
    h = _check_h(h)
    n = h.shape[0]
    if n < 2:
        return float("nan")
    unit = torch.nn.functional.normalize(h, dim=-1)  # (N, d)
    total = unit.sum(0)  # (d,)
    return float((total.dot(total) - unit.pow(2).sum()) / (n * (n - 1)))


def attention_qk(conv: DIFFormerConv, x: Tensor) -> tuple[Tensor, Tensor]:
    r"""The normalised queries and keys :math:`\tilde Q, \tilde K` that
    ``conv`` uses on input ``x`` (one graph), recomputed from its projection
    with the layer's ``qk_norm`` (the global Frobenius norm runs over all
    nodes and heads, as in the layer).

    Shapes:
        - **input:** x ``(N, channels)``
        - **output:** q~, k~ of shape ``(N, H, D)`` each
    """
    q, k, _ = conv.project(x)  # (N, H, D)
    return normalize_qk(q, k, conv.qk_norm)


def simple_attention_matrix(q: Tensor, k: Tensor) -> Tensor:
    r"""The dense ``simple``-kernel attention matrix of one head,
    :math:`A_{ij} = (1 + \tilde q_i\cdot\tilde k_j) / \sum_l (1 + \tilde q_i\cdot\tilde k_l)`.

    ``O(N^2)`` memory: a reference for small graphs (tests, plots), never
    used by :func:`spectral_gap`.

    Shapes:
        - **input:** q~, k~ ``(N, D)`` (already normalised)
        - **output:** ``(N, N)``
    """
    w = 1.0 + q @ k.T  # (N, N)
    return w / w.sum(dim=1, keepdim=True)


def spectral_gap(q: Tensor, k: Tensor) -> float:
    r"""Spectral gap :math:`1 - |\lambda_2(A)|` of the ``simple``-kernel
    attention matrix :math:`A = D^{-1}[\mathbf 1, \tilde Q][\mathbf 1, \tilde K]^\top`
    of one head, exactly and without the ``N x N`` matrix.

    :math:`A = UV^\top` with :math:`U = D^{-1}[\mathbf 1, \tilde Q]`,
    :math:`V = [\mathbf 1, \tilde K]` (both ``N x (d+1)``) has rank at most
    :math:`d+1`; :math:`UV^\top` and :math:`V^\top U` have the same non-zero
    eigenvalues, and the remaining ones are zeros on either side. So the
    eigenvalues of the ``(d+1) x (d+1)`` matrix :math:`M = V^\top U`, sorted
    by modulus, agree with those of :math:`A` up to zeros, and for
    :math:`N \ge 2` the second-largest modulus of :math:`M` is
    :math:`|\lambda_2(A)|` whether :math:`N` is larger or smaller than
    :math:`d+1`. :math:`A` is row-stochastic, so :math:`|\lambda_1| = 1`.
    Cost :math:`O(Nd^2 + d^3)`, float64.

    Args:
        q (torch.Tensor): normalised queries :math:`\tilde Q` ``(N, D)``.
        k (torch.Tensor): normalised keys :math:`\tilde K` ``(N, D)``.

    Returns:
        float: the gap, in ``[0, 1]`` up to rounding; NaN for ``N < 2``.
    """
    if q.dim() != 2 or q.shape != k.shape:
        raise ValueError(f"q and k must both have shape (N, D), got {tuple(q.shape)} and {tuple(k.shape)}")
    n = q.shape[0]
    if n < 2:
        return float("nan")
    q = q.detach().double()
    k = k.detach().double()
    ones = q.new_ones(n, 1)
    qa = torch.cat([ones, q], dim=1)  # (N, D+1)
    ka = torch.cat([ones, k], dim=1)  # (N, D+1)
    row_sum = qa @ ka.sum(0)  # (N,) = N + q~_i . sum_j k~_j
    m = ka.T @ (qa / row_sum.unsqueeze(-1))  # (D+1, D+1)
    moduli = torch.linalg.eigvals(m).abs().sort(descending=True).values
    second = float(moduli[1]) if moduli.numel() > 1 else 0.0
    return 1.0 - second


def layer_spectral_gap(conv: DIFFormerConv, x: Tensor) -> float:
    """Spectral gap of ``conv``'s global attention on input ``x`` (one
    graph), the mean of :func:`spectral_gap` over the heads. NaN for a
    layer whose kernel is not ``simple``."""
    if conv.kernel != "simple":
        return float("nan")
    q, k = attention_qk(conv, x)  # (N, H, D)
    return sum(spectral_gap(q[:, h], k[:, h]) for h in range(conv.heads)) / conv.heads


@torch.no_grad()
def layer_diagnostics(model, data) -> dict[str, list[float]]:
    r"""Every measure, per layer, of a :class:`~wavygraph.nn.WavyDIFFormer`
    on one graph, in eval mode (the model's mode is restored afterwards).

    Args:
        model (WavyDIFFormer): the model.
        data (torch_geometric.data.Data): ``x``, ``edge_index`` and ``y``, on
            the model's device. ``y`` of shape ``(N,)`` (or ``(N, 1)``) of
            classes gives ``inter_class_variance``; multi-label ``(N, T)``
            targets leave it out.

    Returns:
        dict[str, list[float]]: ``dirichlet_energy``, ``feature_variance``,
        ``inter_class_variance`` (classes only) and ``cosine_similarity``
        with ``num_layers + 1`` values each (index 0 is the input embedding,
        index ``l`` the output of layer ``l``); ``spectral_gap`` with
        ``num_layers`` values (entry ``l - 1`` is the attention of layer
        ``l``, which acts on the states at index ``l - 1``), the mean over
        heads, global branch only.
    """
    was_training = model.training
    model.eval()
    try:
        _, hidden = model(data.x, data.edge_index, return_hidden=True)
        edge_index = data.edge_index
        y = getattr(data, "y", None)
        if y is not None and y.dim() == 2 and y.shape[1] == 1 and not y.dtype.is_floating_point:
            y = y.view(-1)
        classes = y is not None and y.dim() == 1 and not y.dtype.is_floating_point
        out: dict[str, list[float]] = {
            "dirichlet_energy": [dirichlet_energy(h, edge_index) for h in hidden],
            "feature_variance": [feature_variance(h) for h in hidden],
        }
        if classes:
            out["inter_class_variance"] = [inter_class_variance(h, y) for h in hidden]
        out["cosine_similarity"] = [cosine_similarity(h) for h in hidden]
        out["spectral_gap"] = [layer_spectral_gap(conv, h) for conv, h in zip(model.convs, hidden)]
    finally:
        model.train(was_training)
    return out
