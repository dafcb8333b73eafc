"""DIFFormer's attention layer: all-pair attention plus a local GCN branch."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from wavygraph.checks import check_positive_int

from .folded import folded_simple_attention
from .functional import all_pair_attention, resolve_qk_norm
from .graph import as_adjacency, neighbour_mean, propagate
from .validate import InputError, check_choice, check_inputs

#: The local branch's kinds (the ``local`` argument of :class:`DIFFormerConv`).
LOCALS = ("gcn", "sep")


class DIFFormerConv(nn.Module):
    r"""The all-pair attention layer of DIFFormer, `"DIFFormer: Scalable
    (Graph) Transformers Induced by Energy Constrained Diffusion"
    <https://arxiv.org/abs/2301.09474>`_ (ICLR 2023).

    Per head :math:`h`, with :math:`Q^h = XW_Q^h + b_Q^h`, :math:`K^h` alike
    and :math:`V^h = XW_V^h + b_V^h` (or :math:`V^h = X` without value
    projection, shared by every head):

    .. math::
        \mathbf{x}'_i = \frac{1}{H}\sum_h \Big(\mathrm{Attn}(Q^h, K^h, V^h)
        + \hat{A}_{\mathrm{GCN}} V^h\Big)_i

    where :math:`\mathrm{Attn}` is
    :func:`~wavygraph.nn.functional.all_pair_attention` and
    :math:`\hat{A}_{\mathrm{GCN}}` the symmetric GCN normalisation with
    self-loops of the given edges (the local branch). With
    ``graph_weight=w`` the two terms are blended,
    :math:`(1-w)\,\mathrm{Attn} + w\,\hat{A}V`.

    With ``local="sep"`` the local branch keeps a node's own value apart
    from its neighbours' (the ego / neighbour separation that helps on
    heterophilous graphs, Platonov et al., ICLR 2023):
    :math:`\bar{V} W_{\mathrm{ego}}^\top + M \bar{V} W_{\mathrm{nbr}}^\top`
    instead of :math:`\hat{A}_{\mathrm{GCN}} \bar{V}`, where :math:`\bar{V}`
    is the head mean of the values (so one pair of weights serves every
    head), :math:`M` the mean over each node's in-neighbours without itself
    (:func:`~wavygraph.nn.graph.neighbour_mean`: a node without
    in-neighbours gets 0 from it) and :math:`W_{\mathrm{ego}}`,
    :math:`W_{\mathrm{nbr}}` learnable ``(Dv, Dv)`` matrices of this layer
    (``Dv`` the value size). Both start at :math:`I/2`: the branch starts as
    an average whose weights sum to 1 at every node with neighbours, as
    GCN's do, so the force ``conv(x) - x`` starts as a diffusion. Without
    value projection :math:`\bar{V} = X` and these two matrices are the
    branch's only weights; with ``shared_attention`` in
    :class:`~wavygraph.nn.WavyDIFFormer` every layer uses the same pair.
    Edges stay within the graphs of a batch, so the neighbour mean needs no
    batch vector. The blend and the attention are unchanged. The force of a residual
    stepper is ``conv(x) - x``. The ``simple`` kernel with the global q/k norm
    runs the folded fast path
    :func:`~wavygraph.nn.folded.folded_simple_attention` (same result, the
    projection folded into the kernel); every other setting projects q, k, v
    and calls :func:`~wavygraph.nn.functional.all_pair_attention`.

    Args:
        channels (int): input and output size of every node.
        heads (int, optional): number of attention heads, averaged at the
            end. (default: :obj:`1`)
        kernel (str, optional): ``"simple"`` (DIFFormer-s, linear in N) or
            ``"sigmoid"`` (DIFFormer-a, quadratic, small graphs).
            (default: ``"simple"``)
        qk_norm (str, optional): ``"global"``, ``"row"`` or ``"none"``, see
            :func:`~wavygraph.nn.functional.all_pair_attention`; :obj:`None`
            takes the kernel's own (``"global"`` for ``simple``, ``"none"``
            for ``sigmoid``). (default: :obj:`None`)
        use_graph (bool, optional): add the local GCN branch on the values.
            (default: :obj:`True`)
        graph_weight (float, optional): blend weight ``w`` in ``[0, 1]`` of
            the local branch; :obj:`None` adds it. (default: :obj:`None`)
        head_channels (int, optional): size of each head's q and k (and v,
            with value projection); :obj:`None` uses ``channels`` as DIFFormer
            does. (default: :obj:`None`)
        bias (bool, optional): bias of the q/k/v projection.
            (default: :obj:`True`)
        value_proj (bool, optional): project the values; :obj:`False` takes
            ``V = X`` for every head and the local branch (DIFFormer's
            ``--use_weight`` off). (default: :obj:`True`)
        local (str, optional): the local branch, ``"gcn"`` (GCN propagation
            of the values) or ``"sep"`` (separate ego and neighbour weights,
            see above; needs ``use_graph``). (default: ``"gcn"``)

    Shapes:
        - **input:** node features ``(N, channels)``, edge indices ``(2, E)``
          or a sparse ``(N, N)`` matrix from
          :func:`~wavygraph.nn.graph.gcn_adjacency` (optional),
          batch vector ``(N,)`` (optional)
        - **output:** node features ``(N, channels)``, dtype of the input
    """

    def __init__(
        self,
        channels: int,
        heads: int = 1,
        kernel: str = "simple",
        qk_norm: str | None = None,
        use_graph: bool = True,
        graph_weight: float | None = None,
        head_channels: int | None = None,
        bias: bool = True,
        value_proj: bool = True,
        local: str = "gcn",
    ):
        super().__init__()
        self.qk_norm = resolve_qk_norm(kernel, qk_norm)
        check_positive_int("channels", channels)
        check_positive_int("heads", heads)
        if head_channels is not None:
            check_positive_int("head_channels", head_channels)
        if graph_weight is not None and not 0.0 <= float(graph_weight) <= 1.0:
            raise ValueError(f"graph_weight must lie in [0, 1] or be None, got {graph_weight!r}")
        check_choice("local", local, LOCALS)
        if local == "sep" and not use_graph:
            raise InputError("local='sep' needs use_graph=True (it is a kind of local branch)")
        self.channels = channels
        self.heads = heads
        self.kernel = kernel
        self.use_graph = use_graph
        self.graph_weight = graph_weight
        self.value_proj = bool(value_proj)
        self.local = local
        self.head_channels = channels if head_channels is None else head_channels
        dv = self.head_channels if self.value_proj else channels
        # the ego and neighbour weights of local="sep" (none with "gcn": its state_dict is unchanged)
        self.ego = nn.Parameter(torch.empty(dv, dv)) if local == "sep" else None
        self.nbr = nn.Parameter(torch.empty(dv, dv)) if local == "sep" else None
        self.qkv = nn.Linear(channels, (3 if self.value_proj else 2) * heads * self.head_channels, bias=bias)
        # projected values of another size are mapped back to channels
        self.out = (
            nn.Linear(self.head_channels, channels, bias=False)
            if self.value_proj and self.head_channels != channels
            else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.qkv.reset_parameters()
        if self.out is not None:
            self.out.reset_parameters()
        if self.ego is not None:
            with torch.no_grad():  # I / 2 each: the branch starts as an average (see the class docstring)
                for weight in (self.ego, self.nbr):
                    weight.copy_(torch.eye(weight.shape[0], dtype=weight.dtype, device=weight.device) / 2)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k ``(N, H, D)`` and v ``(N, H, Dv)`` of ``x``; without value
        projection v is ``x`` as ``(N, 1, C)``, shared by every head."""
        qkv = self.qkv(x).unflatten(1, (-1, self.heads, self.head_channels))  # (N, 2 or 3, H, D)
        v = qkv[:, 2] if self.value_proj else x.unsqueeze(1)
        return qkv[:, 0], qkv[:, 1], v

    def _mean_value(self, x: Tensor) -> Tensor:
        """Head mean of the values ``(N, Dv)``: one propagation serves every
        head of the (linear) local branch."""
        if not self.value_proj:
            return x
        hc = self.heads * self.head_channels
        wv = self.qkv.weight[2 * hc :].view(self.heads, self.head_channels, -1).mean(0)
        bv = None if self.qkv.bias is None else self.qkv.bias[2 * hc :].view(self.heads, -1).mean(0)
        return F.linear(x, wv, bv)

    def forward(self, x: Tensor, edge_index: Tensor | None = None, batch: Tensor | None = None) -> Tensor:
        n = check_inputs(x, self.channels, edge_index, batch, self.use_graph, finite=False, like=self.qkv.weight)
        w = self.graph_weight
        if not self.use_graph:
            out = self._global(x, batch, n)
        else:
            local = self._local(as_adjacency(edge_index, n, x.dtype), self._mean_value(x))  # (N, Dv)
            if w is None:
                out = self._global(x, batch, n) + local
            elif w == 1.0:  # the global branch has weight 0: not computed
                out = local
            else:
                out = (1.0 - w) * self._global(x, batch, n) + w * local
        out = out.to(x.dtype)
        return out if self.out is None else self.out(out)

    def _local(self, adj: Tensor, v: Tensor) -> Tensor:
        """The local branch of the head-mean values ``v (N, Dv)``, ``(N, Dv)``."""
        if self.local == "gcn":
            return propagate(adj, v)
        return F.linear(v, self.ego) + F.linear(propagate(neighbour_mean(adj), v), self.nbr)

    def _global(self, x: Tensor, batch: Tensor | None, n: int) -> Tensor:
        """The all-pair attention branch, heads averaged, ``(N, Dv)``."""
        if self.kernel == "simple" and self.qk_norm == "global" and n > 0:
            return folded_simple_attention(x, self.qkv.weight, self.qkv.bias, self.heads, batch, self.value_proj)
        q, k, v = self.project(x)
        return all_pair_attention(q, k, v, batch, self.kernel, self.qk_norm).mean(1)  # (N, Dv)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
            f"kernel={self.kernel!r}, qk_norm={self.qk_norm!r}, use_graph={self.use_graph}, "
            f"graph_weight={self.graph_weight}, value_proj={self.value_proj}, local={self.local!r})"
        )
