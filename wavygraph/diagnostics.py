r"""Over-smoothing diagnostics, per layer (definitions in the table below).

Every measure is a plain function of one layer's hidden states ``H``
(``(N, d)``) and is usable on its own; :func:`layer_diagnostics` evaluates all
of them on every layer of a :class:`~wavygraph.nn.WavyDIFFormer` as the
states pass (:class:`LayerStream`), keeping scalars only. All values are
computed in float64 and returned as Python floats; the float64 arithmetic runs
on blocks of channels or nodes (about :data:`BLOCK` numbers each), so
the working memory is that of ``H`` itself plus a few blocks, never an
``E x d`` tensor or a float64 copy of ``H``.

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

import warnings
from contextlib import contextmanager

import torch
from torch import Tensor
from torch_geometric.utils import to_torch_csr_tensor

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


#: Numbers per float64 block (32 MiB): channels or nodes are taken in blocks
#: of about this many entries.
BLOCK = 2**22


def _check_h(h: Tensor) -> Tensor:
    """``h`` detached, in its own dtype (blocks are cast to float64 later)."""
    if not isinstance(h, Tensor) or h.dim() != 2:
        shape = tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__
        raise ValueError(f"hidden states must have shape (N, d), got {shape}")
    return h.detach()


def _spans(total: int, per_row: int):
    """``(start, stop)`` of consecutive blocks of rows, ``per_row`` numbers
    each row, about :data:`BLOCK` numbers a block."""
    step = max(1, BLOCK // max(per_row, 1))
    return ((i, min(i + step, total)) for i in range(0, total, step))


def _channel_blocks(h: Tensor):
    """``h``'s columns in float64 blocks ``(N, b)`` of about :data:`BLOCK`
    numbers, each a copy (free to change in place)."""
    for c0, c1 in _spans(h.shape[1], h.shape[0]):
        yield h[:, c0:c1].to(torch.float64, copy=True)


class DirichletForm:
    r"""The Dirichlet energy of :func:`dirichlet_energy` on one graph as a
    quadratic form, built once and evaluated on any number of states.

    With :math:`\hat h_i = h_i/\sqrt{1+d_i}` and :math:`A_{ij}` the number of
    columns ``(i, j)`` of ``edge_index``,

    .. math::
        N E = \sum_i (d^{out}_i + d^{in}_i)\lVert\hat h_i\rVert^2
              - 2\sum_i \hat h_i \cdot (A\hat h)_i ,

    one sparse product per block of channels, in float64. The differences are
    unchanged by a shift of every :math:`\hat h_i` by the same vector, so
    :math:`\hat h` is centred (its mean over the nodes subtracted) first:
    states that differ little from node to node lose no digits to the
    cancellation.

    Args:
        edge_index (torch.Tensor): edges ``(2, E)``.
        num_nodes (int): number of nodes ``N``.

    Shapes:
        - **input:** h ``(N, d)``
        - **output:** a float, the energy
    """

    def __init__(self, edge_index: Tensor, num_nodes: int):
        self.num_nodes = num_nodes
        self.empty = num_nodes == 0 or edge_index.numel() == 0
        if self.empty:
            return
        src, dst = edge_index[0].long(), edge_index[1].long()
        out_deg = torch.bincount(src, minlength=num_nodes).double()  # (N,)
        self.scale = (1.0 + out_deg).sqrt().unsqueeze(-1)  # (N, 1)
        self.weight = (out_deg + torch.bincount(dst, minlength=num_nodes).double()).unsqueeze(-1)  # (N, 1)
        ones = torch.ones(src.numel(), dtype=torch.float64, device=src.device)
        with warnings.catch_warnings():  # torch's "sparse CSR is beta" notice
            warnings.simplefilter("ignore", UserWarning)
            self.adj = to_torch_csr_tensor(torch.stack([src, dst]), ones, size=(num_nodes, num_nodes))

    def __call__(self, h: Tensor) -> float:
        h = _check_h(h)
        if h.shape[0] != self.num_nodes:
            raise ValueError(f"hidden states have {h.shape[0]} rows for a graph of {self.num_nodes} nodes")
        if self.empty:
            return 0.0
        total = 0.0
        for block in _channel_blocks(h):  # (N, b) float64
            block = block.div_(self.scale)
            block -= block.mean(0)
            total += float((block * block * self.weight).sum() - 2.0 * (block * (self.adj @ block)).sum())
        return max(total, 0.0) / self.num_nodes


def dirichlet_energy(h: Tensor, edge_index: Tensor) -> float:
    r"""Dirichlet energy of ``h`` on the graph, symmetric normalisation.

    .. math::
        E = \frac{1}{N}\sum_{(i,j)\in\mathcal{E}}
            \Big\lVert \frac{h_i}{\sqrt{1+d_i}} - \frac{h_j}{\sqrt{1+d_j}}\Big\rVert^2

    Every column ``(i, j)`` of ``edge_index`` is one term, so an undirected
    graph stored with both directions (PyG's convention) counts each edge
    twice. :math:`d_i` is the number of columns with source ``i`` (the degree,
    for such a graph). Computed as a quadratic form (:class:`DirichletForm`):
    one sparse product, no ``E x d`` tensor of differences.

    Args:
        h (torch.Tensor): hidden states ``(N, d)``.
        edge_index (torch.Tensor): edges ``(2, E)``.

    Returns:
        float: the energy (0 for a graph without edges or nodes).
    """
    return DirichletForm(edge_index, _check_h(h).shape[0])(h)


def feature_variance(h: Tensor) -> float:
    r"""Node feature variance: the (population, ``1/N``) variance of every
    channel across the nodes, averaged over the channels.

    .. math:: \frac{1}{d}\sum_c \frac{1}{N}\sum_i (h_{ic} - \bar h_c)^2

    Args:
        h (torch.Tensor): hidden states ``(N, d)``.
    """
    h = _check_h(h)
    if h.shape[0] == 0 or h.shape[1] == 0:
        return float("nan")
    total = sum(float(b.var(dim=0, unbiased=False).sum()) for b in _channel_blocks(h))
    return total / h.shape[1]


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
    y = y.long()
    keep = y >= 0
    if not bool(keep.any()):
        return float("nan")
    classes = torch.unique(y[keep])  # (C,)
    # class of every node as 0..C-1, unlabelled nodes into an extra bucket C that is dropped
    slot = torch.where(keep, torch.searchsorted(classes, y.clamp_min(0)), classes.numel())  # (N,)
    counts = torch.bincount(slot, minlength=classes.numel() + 1)[:-1].double().unsqueeze(-1)  # (C, 1)
    total = 0.0
    for block in _channel_blocks(h):  # (N, b)
        sums = block.new_zeros(classes.numel() + 1, block.shape[1]).index_add_(0, slot, block)[:-1]
        total += float((sums / counts).var(dim=0, unbiased=False).sum())  # class means (C, b)
    return total


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
    sq = sum(b.pow(2).sum(1) for b in _channel_blocks(h))  # (N,) squared row norms
    if not isinstance(sq, Tensor):  # no channels
        return 0.0
    denom = sq.sqrt().clamp_min(1e-12).unsqueeze(-1)  # (N, 1), F.normalize's eps
    total = torch.cat([(b / denom).sum(0) for b in _channel_blocks(h)])  # (d,) = sum_i h^_i
    return float((total.dot(total) - (sq / denom.squeeze(-1).pow(2)).sum()) / (n * (n - 1)))


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
    Cost :math:`O(Nd^2 + d^3)`, float64 on blocks of nodes (:math:`M` is a
    sum over the nodes), so no float64 copy of ``q`` or ``k``.

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
    q, k = q.detach(), k.detach()

    def augmented(t: Tensor, i0: int, i1: int) -> Tensor:  # [1, t] rows i0..i1 in float64, (b, D+1)
        block = t[i0:i1].double()
        return torch.cat([block.new_ones(i1 - i0, 1), block], dim=1)

    spans = list(_spans(n, q.shape[1] + 1))
    k_sum = sum(augmented(k, i0, i1).sum(0) for i0, i1 in spans)  # (D+1,) = [N, sum_j k~_j]
    m = q.new_zeros(q.shape[1] + 1, q.shape[1] + 1, dtype=torch.float64)  # (D+1, D+1)
    for i0, i1 in spans:
        qa = augmented(q, i0, i1)
        row_sum = qa @ k_sum  # (b,) = N + q~_i . sum_j k~_j
        m += augmented(k, i0, i1).T @ (qa / row_sum.unsqueeze(-1))
    moduli = torch.linalg.eigvals(m).abs().sort(descending=True).values
    second = float(moduli[1]) if moduli.numel() > 1 else 0.0
    return 1.0 - second


def graph_spectral_gaps(conv: DIFFormerConv, x: Tensor, batch: Tensor | None = None) -> list[float]:
    """Spectral gap of ``conv``'s global attention on input ``x``, one per
    graph of ``batch`` (``B`` floats in graph index order, one without
    ``batch``): each graph's own attention matrix, q and k normalised over
    that graph's nodes as in the layer, the mean of :func:`spectral_gap` over
    the heads. NaN for a graph of fewer than 2 nodes and for a layer whose
    kernel is not ``simple``."""
    groups = [None]
    if batch is not None:
        counts = torch.bincount(batch, minlength=int(batch.max()) + 1 if batch.numel() else 0)
        groups = torch.argsort(batch, stable=True).split(counts.tolist())
    if conv.kernel != "simple":
        return [float("nan")] * len(groups)
    q_all, k_all, _ = conv.project(x)  # (N, H, D)
    gaps = []
    for idx in groups:
        q, k = normalize_qk(*((q_all, k_all) if idx is None else (q_all[idx], k_all[idx])), conv.qk_norm)
        gaps.append(sum(spectral_gap(q[:, h], k[:, h]) for h in range(conv.heads)) / conv.heads)
    return gaps


def layer_spectral_gap(conv: DIFFormerConv, x: Tensor, batch: Tensor | None = None) -> float:
    """Spectral gap of ``conv``'s global attention on input ``x``: the mean
    over the heads of :func:`spectral_gap`; on a batch the mean of
    :func:`graph_spectral_gaps` over the graphs of 2 nodes or more (the layer
    forms no matrix across graphs). NaN where no graph has 2 nodes or the
    kernel is not ``simple``."""
    gaps = [g for g in graph_spectral_gaps(conv, x, batch) if g == g]  # NaN != NaN
    return sum(gaps) / len(gaps) if gaps else float("nan")


def _class_labels(y: Tensor | None) -> Tensor | None:
    """``y`` as one class per node ``(N,)``, or ``None`` for multi-label or
    float targets (no inter-class variance then)."""
    if y is not None and y.dim() == 2 and y.shape[1] == 1 and not y.dtype.is_floating_point:
        y = y.view(-1)
    return y if y is not None and y.dim() == 1 and not y.dtype.is_floating_point else None


class LayerStream:
    r"""Every measure of :func:`layer_diagnostics`, accumulated as a forward
    pass runs, keeping scalars only.

    Call it with ``(i, h_i)`` for ``i = 0, 1, ..., L`` in order (the input
    embedding, then every layer's output): it is the ``layer_hook`` of
    :class:`~wavygraph.nn.WavyDIFFormer`, and each call appends one value of
    every state measure. Inside :meth:`watch`, every call of an attention
    layer of ``model`` appends the spectral gap of that layer on the input it
    really receives (the state, or its norm for a pre-norm kind such as
    ``leapfrog``). On a batch of graphs (the layer's ``batch``) that gap is
    the mean of the graphs' own gaps (:func:`layer_spectral_gap`), while the
    state measures run over all nodes of the batch. No state is kept: the memory is that of the forward pass
    and the blocks of the measures.

    Args:
        model (WavyDIFFormer): the model whose ``convs`` give the spectral gaps.
        edge_index (torch.Tensor): edges ``(2, E)`` for the Dirichlet energy.
        y (torch.Tensor, optional): classes ``(N,)`` or ``(N, 1)`` for the
            inter-class variance; other targets leave it out. (default: :obj:`None`)

    Shapes:
        - **input:** i ``int``, h_i ``(N, C)``
    """

    def __init__(self, model, edge_index: Tensor, y: Tensor | None = None):
        self.model = model
        self.edge_index = edge_index
        self.dirichlet: DirichletForm | None = None  # built at the first state (its N)
        self.y = _class_labels(y)
        self.values: dict[str, list[float]] = {name: [] for name in MEASURES}
        if self.y is None:
            del self.values["inter_class_variance"]

    @torch.no_grad()
    def __call__(self, i: int, h: Tensor) -> None:
        v = self.values
        if i != len(v["feature_variance"]):
            raise ValueError(f"states must come in order 0, 1, ...: expected state {len(v['feature_variance'])}, got {i}")
        if self.dirichlet is None:
            self.dirichlet = DirichletForm(self.edge_index, h.shape[0])
        v["dirichlet_energy"].append(self.dirichlet(h))
        v["feature_variance"].append(feature_variance(h))
        if self.y is not None:
            v["inter_class_variance"].append(inter_class_variance(h, self.y))
        v["cosine_similarity"].append(cosine_similarity(h))

    @torch.no_grad()
    def _attention_hook(self, conv: DIFFormerConv, args: tuple, kwargs: dict | None = None) -> None:
        batch = args[2] if len(args) > 2 else (kwargs or {}).get("batch")
        self.values["spectral_gap"].append(layer_spectral_gap(conv, args[0].detach(), batch))

    @contextmanager
    def watch(self):
        """Measure the spectral gap of every attention call of the model
        while inside (forward pre-hooks on its distinct ``convs``)."""
        handles = [conv.register_forward_pre_hook(self._attention_hook, with_kwargs=True)
                   for conv in dict.fromkeys(self.model.convs)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()


@torch.no_grad()
def layer_diagnostics(model, data) -> dict[str, list[float]]:
    r"""Every measure, per layer, of a :class:`~wavygraph.nn.WavyDIFFormer`
    on one graph or a batch, in eval mode (its mode restored afterwards).

    The measures are taken as the states pass (:class:`LayerStream` as the
    model's ``layer_hook``): the working memory is that of one evaluation
    forward, whatever the depth.

    Args:
        model (WavyDIFFormer): the model.
        data (torch_geometric.data.Data): ``x``, ``edge_index`` and ``y``, on
            the model's device. ``y`` of shape ``(N,)`` (or ``(N, 1)``) of
            classes gives ``inter_class_variance``; multi-label ``(N, T)``
            targets leave it out. A ``batch`` vector (a PyG ``Batch``) is
            passed to the model; the spectral gap is then the mean of the
            graphs' own gaps (:func:`layer_spectral_gap`).

    Returns:
        dict[str, list[float]]: ``dirichlet_energy``, ``feature_variance``,
        ``inter_class_variance`` (classes only) and ``cosine_similarity``
        with ``num_layers + 1`` values each (index 0 is the input embedding,
        index ``l`` the output of layer ``l``); ``spectral_gap`` with
        ``num_layers`` values (entry ``l - 1`` is the attention of layer
        ``l``, which acts on the states at index ``l - 1``, or on their norm
        for a pre-norm kind), the mean over heads, global branch only.
    """
    was_training = model.training
    model.eval()
    stream = LayerStream(model, data.edge_index, getattr(data, "y", None))
    try:
        with stream.watch():
            model(data.x, data.edge_index, getattr(data, "batch", None), layer_hook=stream)
    finally:
        model.train(was_training)
    return stream.values
