"""Checks of the tensors given to the public layers and the model.

Each check raises :class:`InputError` (a :class:`ValueError`) with a one-line
message that names the argument, what was wrong and how to fix it, before
torch can fail deep inside with an ``IndexError`` or quietly produce NaN.

What is accepted, and how it is handled:

* ``x``: a floating tensor ``(N, C)``. ``N = 0`` (an empty graph) and
  ``N = 1`` are valid and give finite outputs (the attention's denominators
  are floored, see :mod:`wavygraph.nn.functional`). NaN or Inf entries are an
  error while :data:`CHECK_FINITE` is true (the default): one NaN feature would
  spread to every node through the global attention. Clean the features first
  (e.g. ``torch.nan_to_num``), or set ``wavygraph.nn.validate.CHECK_FINITE =
  False`` to skip the check (it costs one reduction over ``x`` per forward).
* ``edge_index``: an integer tensor ``(2, E)`` with entries in ``[0, N)``, or
  a sparse ``(N, N)`` matrix from :func:`~wavygraph.nn.gcn_adjacency`.
  Edges are taken as given: a directed edge ``(i, j)`` sends a message from
  ``i`` to ``j`` only (add both directions, e.g. ``to_undirected``, for an
  undirected graph); duplicate edges count with their multiplicity in the
  weights and degrees (``coalesce`` them to count once); self-loops are added
  once by the GCN normalisation; isolated nodes keep their own value through
  the self-loop and still take part in the global attention.
* ``batch``: an integer tensor ``(N,)`` of graph indices ``>= 0`` (any
  order; unused indices are empty graphs). An edge between nodes of two
  graphs is an error while :data:`CHECK_GRAPHS` is true (the default): the
  layers keep graphs apart, so such an edge is a mistake in the batch (one
  gather over the ``E`` edges per forward; a sparse matrix is taken as
  given).
* ``x``, ``edge_index`` and ``batch`` on the device of the layer's or the
  model's parameters, ``x`` in their dtype (outside autocast, which casts
  on its own).

``heads`` never has to divide the channels: :class:`DIFFormerConv` gives each
head its own ``head_channels``-sized q, k and v (``channels`` by default, as
DIFFormer does) and averages the heads, so any positive ``heads`` works with
any ``channels``; ``head_channels`` itself must be a positive integer.
"""
from __future__ import annotations

import torch
from torch import Tensor

from wavygraph.checks import is_int, out_of_range

#: Refuse NaN/Inf node features (see the module docstring).
CHECK_FINITE = True
#: Refuse edges between nodes of different graphs of ``batch`` (see the module docstring).
CHECK_GRAPHS = True


class InputError(ValueError):
    """A tensor or option given to a wavygraph layer or model is invalid."""


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, Tensor) else type(t).__name__


def check_choice(name: str, value, choices) -> None:
    """``value`` must be one of ``choices`` (the message lists them)."""
    if value not in choices:
        raise InputError(f"unknown {name} {value!r}; choose one of {', '.join(map(repr, choices))}")


def check_x(x, channels: int, name: str = "x", finite: bool = True) -> int:
    """``x`` must be a floating ``(N, channels)`` tensor (finite, see
    :data:`CHECK_FINITE`); returns ``N``."""
    if not isinstance(x, Tensor) or x.dim() != 2 or x.shape[1] != channels:
        raise InputError(f"{name} must have shape (N, {channels}), got {_shape(x)}")
    if not x.dtype.is_floating_point:
        raise InputError(f"{name} must be a floating tensor, got dtype {x.dtype}; convert it with {name}.float()")
    if finite:
        check_finite(x, name)
    return x.shape[0]


def check_finite(x: Tensor, name: str = "x") -> None:
    """No NaN/Inf entry in ``x`` (while :data:`CHECK_FINITE`)."""
    if CHECK_FINITE and x.numel() and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise InputError(
            f"{name} holds {bad} NaN/Inf entries; clean the features (e.g. torch.nan_to_num) "
            "or set wavygraph.nn.validate.CHECK_FINITE = False"
        )


def check_edge_index(edge_index, num_nodes: int, name: str = "edge_index") -> None:
    """``edge_index`` must be an integer ``(2, E)`` tensor with entries in
    ``[0, num_nodes)``, or a sparse ``(num_nodes, num_nodes)`` matrix."""
    if not isinstance(edge_index, Tensor):
        raise InputError(f"{name} must be a tensor of shape (2, E), got {type(edge_index).__name__}")
    if edge_index.layout != torch.strided:
        if tuple(edge_index.shape) != (num_nodes, num_nodes):
            raise InputError(
                f"{name} is a sparse matrix of shape {tuple(edge_index.shape)}, expected ({num_nodes}, {num_nodes}) "
                "for the N nodes of x"
            )
        return
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise InputError(f"{name} must have shape (2, E), got {tuple(edge_index.shape)}; transpose an (E, 2) list with .t()")
    if not is_int(edge_index):
        raise InputError(f"{name} must hold integer node indices, got dtype {edge_index.dtype}; use {name}.long()")
    outside = out_of_range(edge_index, num_nodes)
    if outside is not None:
        lo, hi = outside
        if lo < 0:
            raise InputError(f"{name} holds a negative node index ({lo}); node indices run from 0 to N-1")
        raise InputError(
            f"{name} refers to node {hi} but x has only {num_nodes} nodes; indices must lie in [0, {num_nodes})"
        )


def check_batch(batch, num_nodes: int, name: str = "batch") -> None:
    """``batch`` (optional) must be an integer ``(N,)`` tensor of graph
    indices ``>= 0``."""
    if batch is None:
        return
    if not isinstance(batch, Tensor) or batch.dim() != 1 or batch.shape[0] != num_nodes:
        raise InputError(f"{name} must have shape ({num_nodes},), one graph index per node of x, got {_shape(batch)}")
    if not is_int(batch):
        raise InputError(f"{name} must hold integer graph indices, got dtype {batch.dtype}; use {name}.long()")
    negative = out_of_range(batch)
    if negative is not None:
        raise InputError(f"{name} holds a negative graph index ({negative[0]}); graph indices start at 0")


def check_like(x: Tensor, like: Tensor, name: str = "x") -> None:
    """``x`` must be on the device of ``like`` (a parameter of the layer or
    model) and, outside autocast, in its dtype."""
    if x.device != like.device:
        raise InputError(
            f"{name} is on {x.device} but the model's parameters are on {like.device}; "
            f"move it with {name}.to('{like.device}') (or the model with model.to('{x.device}'))"
        )
    if x.dtype != like.dtype and not torch.is_autocast_enabled(x.device.type):
        raise InputError(
            f"{name} has dtype {x.dtype} but the model's parameters are {like.dtype}; "
            f"convert it with {name}.to({like.dtype}) (or the model with model.to({x.dtype}))"
        )


def check_same_graph(edge_index: Tensor, batch: Tensor) -> None:
    """Every edge of ``edge_index`` ``(2, E)`` joins two nodes of the same
    graph of ``batch`` (while :data:`CHECK_GRAPHS`); O(E)."""
    if not CHECK_GRAPHS or edge_index.layout != torch.strided or not edge_index.numel():
        return
    ends = batch[edge_index]  # (2, E) graph of either end
    cross = ends[0] != ends[1]
    if bool(cross.any()):
        e = int(cross.nonzero()[0, 0])
        raise InputError(
            f"edge_index joins nodes of different graphs of batch ({int(cross.sum())} edges, the first "
            f"{int(edge_index[0, e])} -> {int(edge_index[1, e])} between graphs {int(ends[0, e])} and "
            f"{int(ends[1, e])}); relabel each graph's edges by its node offset (PyG's Batch.from_data_list does)"
        )


def check_inputs(x, channels: int, edge_index=None, batch=None, need_edges: bool = False, finite: bool = True,
                 like: Tensor | None = None) -> int:
    """All forward inputs of a layer/model at once; returns ``N``. The
    model checks finiteness once on its input; its layers skip it
    (``finite=False``), as a NaN there can only come from the input.
    ``like``: a parameter whose device (and dtype) the inputs must share."""
    n = check_x(x, channels, finite=False)
    if like is not None:
        check_like(x, like)
    for name, t in (("edge_index", edge_index), ("batch", batch)):
        if isinstance(t, Tensor) and t.device != x.device:
            raise InputError(f"{name} is on {t.device} but x is on {x.device}; move it with {name}.to('{x.device}')")
    if finite:
        check_finite(x)
    if edge_index is None:
        if need_edges:
            raise InputError("use_graph=True needs edge_index; pass the edges or set use_graph=False")
    else:
        check_edge_index(edge_index, n)
    check_batch(batch, n)
    if edge_index is not None and batch is not None:
        check_same_graph(edge_index, batch)
    return n
