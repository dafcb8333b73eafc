"""DIFFormer's attention layer: all-pair attention plus a local GCN branch."""
from __future__ import annotations

import torch
from torch import Tensor, nn

from .functional import KERNELS, QK_NORMS, _check_choice, all_pair_attention
from .graph import gcn_adjacency, propagate


class DIFFormerConv(nn.Module):
    r"""The all-pair attention layer of DIFFormer, `"DIFFormer: Scalable
    (Graph) Transformers Induced by Energy Constrained Diffusion"
    <https://arxiv.org/abs/2301.09474>`_ (ICLR 2023).

    Per head :math:`h`, with :math:`Q = XW_Q^h`, :math:`K = XW_K^h`,
    :math:`V = XW_V^h` (one fused projection for all three and all heads):

    .. math::
        \mathbf{o}^h = \mathrm{Attn}(Q, K, V) + \hat{A}_{\mathrm{GCN}} V,
        \qquad \mathbf{x}'_i = \frac{1}{H}\sum_h \mathbf{o}^h_i

    where :math:`\mathrm{Attn}` is :func:`~wavygraph.nn.functional.all_pair_attention`
    and :math:`\hat{A}_{\mathrm{GCN}}` the symmetric GCN normalisation with
    self-loops of the given edges. With ``graph_weight=w`` the two terms are
    blended, :math:`(1-w)\,\mathrm{Attn} + w\,\hat{A}V`. The output is a row
    of a (row-stochastic, for the global term) attention applied to the values;
    the force of a residual stepper is ``conv(x) - x``.

    Args:
        channels (int): input and output size of every node.
        heads (int, optional): number of attention heads, averaged at the
            end. (default: :obj:`1`)
        kernel (str, optional): ``"simple"`` (linear in N) or ``"sigmoid"``
            (quadratic, small graphs). (default: ``"simple"``)
        qk_norm (str, optional): ``"global"``, ``"row"`` or ``"none"``, see
            :func:`~wavygraph.nn.functional.all_pair_attention`.
            (default: ``"global"``)
        use_graph (bool, optional): add the local GCN branch on the values.
            (default: :obj:`True`)
        graph_weight (float, optional): blend weight ``w`` in ``[0, 1]`` of
            the local branch; :obj:`None` adds it. (default: :obj:`None`)
        head_channels (int, optional): size of each head's q, k, v;
            :obj:`None` uses ``channels`` as DIFFormer does.
            (default: :obj:`None`)
        bias (bool, optional): bias of the q/k/v projection.
            (default: :obj:`True`)

    Shapes:
        - **input:** node features ``(N, channels)``, edge indices ``(2, E)``
          or a sparse ``(N, N)`` matrix from
          :func:`~wavygraph.nn.graph.gcn_adjacency` (optional),
          batch vector ``(N,)`` (optional)
        - **output:** node features ``(N, channels)``
    """

    def __init__(
        self,
        channels: int,
        heads: int = 1,
        kernel: str = "simple",
        qk_norm: str = "global",
        use_graph: bool = True,
        graph_weight: float | None = None,
        head_channels: int | None = None,
        bias: bool = True,
    ):
        super().__init__()
        _check_choice("kernel", kernel, KERNELS)
        _check_choice("qk_norm", qk_norm, QK_NORMS)
        if kernel == "simple" and qk_norm == "none":
            raise ValueError("kernel='simple' needs qk_norm='global' or 'row'")
        for name, value in (("channels", channels), ("heads", heads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if head_channels is not None and head_channels != channels and not isinstance(head_channels, int):
            raise ValueError(f"head_channels must be a positive integer, got {head_channels!r}")
        if graph_weight is not None and not 0.0 <= float(graph_weight) <= 1.0:
            raise ValueError(f"graph_weight must lie in [0, 1] or be None, got {graph_weight!r}")
        self.channels = channels
        self.heads = heads
        self.kernel = kernel
        self.qk_norm = qk_norm
        self.use_graph = use_graph
        self.graph_weight = graph_weight
        self.head_channels = channels if head_channels is None else head_channels
        self.qkv = nn.Linear(channels, 3 * heads * self.head_channels, bias=bias)
        # with head_channels != channels the averaged values are projected back
        self.out = (
            nn.Linear(self.head_channels, channels, bias=False)
            if self.head_channels != channels
            else None
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.qkv.reset_parameters()
        if self.out is not None:
            self.out.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor | None = None, batch: Tensor | None = None) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != self.channels:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (N, {self.channels}), got {shape}")
        n = x.shape[0]
        q, k, v = self.qkv(x).view(n, 3, self.heads, self.head_channels).unbind(1)  # (N, H, C) each
        out = all_pair_attention(q, k, v, batch, self.kernel, self.qk_norm)  # (N, H, C)
        if self.use_graph:
            if edge_index is None:
                raise ValueError(
                    "use_graph=True needs edge_index (or a gcn_adjacency matrix); "
                    "pass the edges or build the layer with use_graph=False"
                )
            adj = edge_index if edge_index.is_sparse or edge_index.layout == torch.sparse_csr else gcn_adjacency(edge_index, n, x.dtype)
            local = propagate(adj, v)  # (N, H, C)
            w = self.graph_weight
            out = out + local if w is None else (1.0 - w) * out + w * local
        out = out.mean(dim=1)  # (N, C)
        return out if self.out is None else self.out(out)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.channels}, heads={self.heads}, "
            f"kernel={self.kernel!r}, qk_norm={self.qk_norm!r}, "
            f"use_graph={self.use_graph}, graph_weight={self.graph_weight})"
        )
