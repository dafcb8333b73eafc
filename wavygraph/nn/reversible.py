r"""The reversible memory mode: backpropagation through a sequence of
invertible layers (:class:`~wavygraph.nn.layer.PreNormLayer` of an
invertible kind) without any stored layer state, the gradients of
``WavyDIFFormer(..., reversible=True)``. It uses the layers' call,
``inverse``, ``field``, ``step`` and ``parameters()`` only.

The forward pass runs the ``L`` steps without recording them and keeps only
the last state :math:`(X_L, Y_L)`. The backward pass walks the layers from
the last to the first: it rebuilds each layer's input from its output with
the layer's :meth:`inverse` (for ``leapfrog``
:math:`X = X' - \tau Y',\ Y = Y' - \tau F(X)`, one evaluation of the force,
with autograd on), backpropagates through that one layer and frees it, as
RevNet (`Gomez et al., 2017 <https://arxiv.org/abs/1707.04585>`_) and RevGNN
(`Li et al., 2021 <https://arxiv.org/abs/2106.07476>`_, PyG's
``InvertibleModule``) do. One autograd function spans the whole stack and
saves three tensors (:math:`X_L, Y_L` and the source :math:`X_0`), whatever
the depth; PyG's ``InvertibleFunction`` would free each layer's input by
resizing its storage, which the layer hook's tensors must survive.

Memory: one layer's autograd graph at a time in backward; compute: one
extra force evaluation per layer. The rebuilt inputs differ from the true
ones by float rounding that grows with the depth (docs/fidelity.md gives it
at 64 to 1,000 layers); the dropout masks inside the force come from a seed
per forward pass (:func:`~wavygraph.nn.layer.seeded_dropout`), so the
backward pass draws the same ones.

Hidden states (``return_hidden=True``): the states :math:`X_1 .. X_{L-1}`
come back as outputs of the autograd function, and a gradient that reaches
one of them is added to the gradient of that layer's output as the
backward pass walks past it, so a loss on the hidden states has the
gradients of the plain mode. The list holds those ``L`` states, as asked.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .joint_norm import frozen_stats
from .layer import LayerContext, seeded_dropout  # noqa: F401  (seeded_dropout: re-exported)
from .sequential import Hook, Total, run_layers
from .steppers import STEPPERS, StepState


def _autocast_state(device: str) -> tuple:
    """``(device, enabled, dtype)`` of autocast now, to recompute under the same."""
    try:
        return device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    except (TypeError, AttributeError):  # torch < 2.4: no device argument
        cuda = device == "cuda"
        enabled = torch.is_autocast_enabled() if cuda else torch.is_autocast_cpu_enabled()
        return device, enabled, torch.get_autocast_gpu_dtype() if cuda else torch.get_autocast_cpu_dtype()


def _grad_params(layer: nn.Module) -> list:
    return [p for p in layer.parameters() if p.requires_grad]


class _ReversibleFn(torch.autograd.Function):
    """``(x_L, v_L, x_1 .. x_{L-1})`` from ``(x, v, x0)``; the hidden states
    are outputs only with ``keep``, and their gradients join the backward
    pass at their layer."""

    @staticmethod
    def forward(ctx, layers, lctx: LayerContext, hook: Hook, keep: bool, summed: bool, params: list, x: Tensor,
                v: Tensor, x0: Tensor | None, *flat_params):
        hidden, total = ([] if keep else None), (Total() if summed else None)
        with torch.no_grad():
            state = run_layers(layers, StepState(x, v), lctx._replace(x0=x0), hook, hidden, total=total)
        ctx.layers, ctx.lctx, ctx.params, ctx.summed = layers, lctx, params, summed
        ctx.autocast = _autocast_state(x.device.type)
        ctx.save_for_backward(state.x, state.v, x0)
        # x_1 .. x_{L-1} as outputs (x_L is the first output already)
        return (state.x, state.v, *([total.value] if summed else []), *(hidden[:-1] if keep else []))

    @staticmethod
    @once_differentiable
    def backward(ctx, gx: Tensor | None, gv: Tensor | None, *g_rest):
        # the sum's gradient reaches every layer's output alike (d sum / d x_i = 1)
        g_sum, g_hidden = (g_rest[0], g_rest[1:]) if ctx.summed else (None, g_rest)
        x, v, x0 = ctx.saved_tensors
        gx = torch.zeros_like(x) if gx is None else gx
        gv = torch.zeros_like(v) if gv is None else gv
        index = {id(p): k for k, p in enumerate(ctx.params)}
        grads: list[Tensor | None] = [None] * len(ctx.params)
        x0_leaf = None if x0 is None else x0.detach().requires_grad_(ctx.needs_input_grad[8])
        lctx = ctx.lctx._replace(x0=x0_leaf)
        with frozen_stats():  # the forces recomputed here leave BatchNorm's running statistics alone
            gx, gv, g_x0 = _backward_layers(ctx, x, v, gx, gv, g_sum, g_hidden, lctx, index, grads)
        return (None, None, None, None, None, None, gx, gv, g_x0, *grads)


def _backward_layers(ctx, x: Tensor, v: Tensor, gx: Tensor, gv: Tensor, g_sum: Tensor | None, g_hidden: tuple,
                     lctx: LayerContext, index: dict, grads: list):
    """The layers of :class:`_ReversibleFn` undone from the last: the
    gradients of the input ``(x, v)`` and of ``x0``; the parameters'
    gradients summed into ``grads``."""
    g_x0 = None
    for i in reversed(range(len(ctx.layers))):
        if i < len(g_hidden) and g_hidden[i] is not None:  # the gradient of x_{i+1}, an output
            gx = gx + g_hidden[i]
        if g_sum is not None:  # x_{i+1} is a term of the sum
            gx = gx + g_sum
        layer = ctx.layers[i]
        held = [x, v, gx, gv]  # handed over: the layer's backward drops each as soon as it is spent
        del x, v, gx, gv
        x, v, gx, gv, g_layer = _layer_backward(layer, lctx, held, ctx.autocast)
        for p, g in zip(_grad_params(layer), g_layer[:-1]):
            k = index[id(p)]
            if g is not None:
                grads[k] = g if grads[k] is None else grads[k] + g
        if g_layer[-1] is not None:
            g_x0 = g_layer[-1] if g_x0 is None else g_x0 + g_layer[-1]
    return gx, gv, g_x0


def _layer_backward(layer: nn.Module, ctx: LayerContext, held: list, autocast: tuple):
    """The layer undone and backpropagated: its input ``(x, v)``, the
    gradients of that input and the gradients of the layer's parameters
    (then of ``ctx.x0``) from the output ``(x', v')`` and its gradients,
    handed over in ``held = [x', v', g_x', g_v']``, which it empties: the
    output state is dropped once inverted and its gradients once spent, so
    that at most two ``(x, v)`` pairs of ``N x C`` tensors live at once. The
    force is recomputed under the forward pass's ``autocast`` state."""
    taken = {}
    device, enabled, dtype = autocast

    def field(x_in: Tensor) -> Tensor:  # F(x) with autograd on, kept for the backward of this layer
        taken["x"] = leaf = x_in.detach().requires_grad_(True)
        with torch.enable_grad(), torch.autocast(device, dtype=dtype, enabled=enabled):
            taken["f"] = layer.field(leaf, ctx)
        return taken["f"].detach()

    with torch.no_grad():
        x_in, v_in = layer.inverse(StepState(held[0], held[1]), ctx, field)
    held[:2] = []  # the output state: its input is rebuilt, so it is not needed any more
    x0 = ctx.x0
    with torch.enable_grad():  # the step itself, given the force: (x', v') from (x, v, F)
        xl, vl, fl = (t.detach().requires_grad_(True) for t in (x_in, v_in, taken["f"]))
        x_out, v_out = layer.step(StepState(xl, vl), fl)
        g_out = (held.pop(0), held.pop(0))
        g_x, g_v, g_f = torch.autograd.grad((x_out, v_out), (xl, vl, fl), g_out, allow_unused=True)
        del x_out, v_out, g_out
        params = _grad_params(layer)
        inputs = [taken["x"], *params] + ([x0] if x0 is not None and x0.requires_grad else [])
        g_in = torch.autograd.grad(taken["f"], inputs, g_f, allow_unused=True)
    g_x = g_in[0] if g_x is None else (g_x if g_in[0] is None else g_x + g_in[0])
    g_layer = list(g_in[1:1 + len(params)]) + [g_in[-1] if len(inputs) > 1 + len(params) else None]
    return x_in, v_in, g_x, (torch.zeros_like(v_in) if g_v is None else g_v), g_layer


def run_reversible(layers: Sequence[nn.Module], state: StepState, ctx: LayerContext, hook: Hook = None,
                   hidden: list | None = None, total: Total | None = None) -> StepState:
    """Run invertible ``layers`` from ``state`` and return the last state,
    differentiable with respect to ``state``, ``ctx.x0`` and every layer's
    parameters by inversion. ``hook(i, x_i)`` is called during the forward
    pass; ``hidden`` (when given) receives ``x_1 .. x_L`` as differentiable
    outputs, whose gradients enter the backward pass at their layer (their
    tensors are then kept, as the caller asked for them). ``total`` (when
    given) receives the sum of ``x_1 .. x_L``, one more output, whose
    gradient enters the backward pass at every layer; no state is kept for it."""
    seen, params = set(), []
    for layer in layers:
        for p in _grad_params(layer):
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    keep, summed = hidden is not None, total is not None
    x, v, *xs = _ReversibleFn.apply(layers, ctx, hook, keep, summed, params, state.x, state.v, ctx.x0, *params)
    if summed:
        total.add(xs.pop(0))
    if keep:
        hidden.extend([*xs, x])
    return StepState(x, v)


@torch.no_grad()
def rebuild(layers: Sequence[nn.Module], state: StepState, ctx: LayerContext) -> StepState:
    """The input state rebuilt from the last state by the layers' inverses
    (what the backward pass does), to measure the float rounding of the inversion."""
    for layer in reversed(layers):
        state = layer.inverse(state, ctx)
    return state


@torch.no_grad()
def reconstruction_error(model: nn.Module, x: Tensor, edge_index: Tensor | None = None,
                         batch: Tensor | None = None) -> float:
    """``max |X_0 rebuilt - X_0| / max |X_0|`` of a
    :class:`~wavygraph.nn.WavyDIFFormer` of an invertible kind in
    evaluation mode: the forward pass to ``(X_L, Y_L)``, then every step
    undone, in the model's dtype."""
    was_training = model.training
    model.eval()
    try:
        h, ctx = model.embed(x, edge_index, batch)
        start = model.layers[0].stepper.init(h)
        state = start
        for layer in model.layers:
            state = layer(state, ctx)
        back = rebuild(model.layers, state, ctx)
    finally:
        model.train(was_training)
    return ((back.x - h).abs().max() / h.abs().max()).item()


def invertible_kinds() -> list[str]:
    """The registered kinds whose stepper has an inverse (``invertible = True``)."""
    return [name for name, cls in STEPPERS.items() if cls.invertible]
