r"""Reversible backpropagation through a stack of invertible steps: the
gradients of ``WavyDIFFormer(..., reversible=True)`` without any stored
layer state.

The forward pass runs the ``L`` steps without recording them and keeps only
the last state :math:`(X_L, Y_L)`. The backward pass walks the layers from
the last to the first: it rebuilds each layer's input from its output with
the stepper's :meth:`inverse` (for ``leapfrog``
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
per forward pass (:func:`seeded_dropout`), so the backward pass draws the
same ones.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .steppers import STEPPERS
from .validate import InputError

#: ``force(i, x, x0) -> F_i(x)`` of layer ``i`` (``x0`` the source or None).
ForceFn = Callable[[int, Tensor, Optional[Tensor]], Tensor]


class ReversibleStack(NamedTuple):
    """What the reversible pass needs from a model: its ``steppers`` (each
    with ``update``, ``inverse`` and ``tau``), the ``force`` of each layer,
    the parameters each layer uses (``layer_params(i)``) and the optional
    ``hook(i, x_i)`` called after every layer of the forward pass."""

    steppers: Sequence[nn.Module]
    force: ForceFn
    layer_params: Callable[[int], list]
    hook: Optional[Callable[[int, Tensor], None]] = None


def seeded_dropout(t: Tensor, p: float, seed: int | None, site: int) -> Tensor:
    """Dropout with rate ``p`` whose mask is drawn from a generator seeded
    with ``seed`` and ``site`` (one site per place a layer drops): the same
    ``(seed, site)`` gives the same mask, so a recomputation repeats it.
    ``seed=None`` (evaluation) or ``p=0`` returns ``t``."""
    if seed is None or p == 0.0:
        return t
    gen = torch.Generator(device=t.device)
    gen.manual_seed((seed + 1_000_003 * site) % (2**63 - 1))
    keep = 1.0 - p
    mask = torch.empty_like(t).bernoulli_(keep, generator=gen)
    return t * mask.div_(keep)


def draw_seed() -> int:
    """A seed for :func:`seeded_dropout`, from torch's global generator (so
    that ``torch.manual_seed`` fixes a run's masks)."""
    return int(torch.randint(0, 2**62, (1,)).item())


def _autocast_state(device: str) -> tuple:
    """``(device, enabled, dtype)`` of autocast now, to recompute under the same."""
    try:
        return device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    except (TypeError, AttributeError):  # torch < 2.4: no device argument
        cuda = device == "cuda"
        enabled = torch.is_autocast_enabled() if cuda else torch.is_autocast_cpu_enabled()
        return device, enabled, torch.get_autocast_gpu_dtype() if cuda else torch.get_autocast_cpu_dtype()


def _unique(params) -> list:
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


class _ReversibleFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, stack: ReversibleStack, params: list, x: Tensor, v: Tensor, x0: Tensor | None, *flat_params):
        with torch.no_grad():
            for i, stepper in enumerate(stack.steppers):
                x, v = stepper.update(x, v, stack.force(i, x, x0), stepper.tau, None)
                if stack.hook is not None:
                    stack.hook(i + 1, x)
        ctx.stack, ctx.params = stack, params
        ctx.autocast = _autocast_state(x.device.type)
        ctx.save_for_backward(x, v, x0)
        return x, v

    @staticmethod
    @once_differentiable
    def backward(ctx, gx: Tensor | None, gv: Tensor | None):
        x, v, x0 = ctx.saved_tensors
        gx = torch.zeros_like(x) if gx is None else gx
        gv = torch.zeros_like(v) if gv is None else gv
        index = {id(p): k for k, p in enumerate(ctx.params)}
        grads: list[Tensor | None] = [None] * len(ctx.params)
        x0_leaf = None if x0 is None else x0.detach().requires_grad_(ctx.needs_input_grad[4])
        g_x0 = None
        for i in reversed(range(len(ctx.stack.steppers))):
            x, v, gx, gv, g_layer = _layer_backward(ctx.stack, i, x, v, x0_leaf, gx, gv, ctx.autocast)
            for p, g in zip(ctx.stack.layer_params(i), g_layer[:-1]):
                k = index[id(p)]
                if g is not None:
                    grads[k] = g if grads[k] is None else grads[k] + g
            if g_layer[-1] is not None:
                g_x0 = g_layer[-1] if g_x0 is None else g_x0 + g_layer[-1]
        return (None, None, gx, gv, g_x0, *grads)


def _layer_backward(stack: ReversibleStack, i: int, x: Tensor, v: Tensor, x0: Tensor | None, gx: Tensor,
                    gv: Tensor, autocast: tuple):
    """Layer ``i`` undone and backpropagated: its input ``(x, v)``, the
    gradients of that input and the gradients of the layer's parameters
    (then of ``x0``) from the output ``(x', v')`` and its gradients. The
    force is recomputed under the forward pass's ``autocast`` state."""
    stepper = stack.steppers[i]
    taken = {}
    device, enabled, dtype = autocast

    def force_fn(x_in: Tensor) -> Tensor:  # F(x) with autograd on, kept for the backward of this layer
        taken["x"] = leaf = x_in.detach().requires_grad_(True)
        with torch.enable_grad(), torch.autocast(device, dtype=dtype, enabled=enabled):
            taken["f"] = stack.force(i, leaf, x0)
        return taken["f"].detach()

    with torch.no_grad():
        x_in, v_in = stepper.inverse(x, v, force_fn, stepper.tau)
    with torch.enable_grad():  # the step itself, given the force: (x', v') from (x, v, F)
        xl, vl, fl = (t.detach().requires_grad_(True) for t in (x_in, v_in, taken["f"]))
        x_out, v_out = stepper.update(xl, vl, fl, stepper.tau, None)
        g_x, g_v, g_f = torch.autograd.grad((x_out, v_out), (xl, vl, fl), (gx, gv), allow_unused=True)
        params = list(stack.layer_params(i))
        inputs = [taken["x"], *params] + ([x0] if x0 is not None and x0.requires_grad else [])
        g_in = torch.autograd.grad(taken["f"], inputs, g_f, allow_unused=True)
    g_x = g_in[0] if g_x is None else (g_x if g_in[0] is None else g_x + g_in[0])
    g_layer = list(g_in[1:1 + len(params)]) + [g_in[-1] if len(inputs) > 1 + len(params) else None]
    return x_in, v_in, g_x, (torch.zeros_like(v_in) if g_v is None else g_v), g_layer


def reversible_stack(stack: ReversibleStack, x: Tensor, v: Tensor, x0: Tensor | None) -> tuple[Tensor, Tensor]:
    """Run the stack from ``(x, v)`` (``x0`` the source or :obj:`None`) and
    return the last state ``(x_L, v_L)``, differentiable with respect to
    ``x``, ``v``, ``x0`` and every layer's parameters by inversion."""
    params = _unique(p for i in range(len(stack.steppers)) for p in stack.layer_params(i) if p.requires_grad)
    stack = stack._replace(layer_params=_only_grad(stack.layer_params))
    return _ReversibleFn.apply(stack, params, x, v, x0, *params)


def _only_grad(layer_params: Callable[[int], list]) -> Callable[[int], list]:
    return lambda i: [p for p in layer_params(i) if p.requires_grad]


@torch.no_grad()
def rebuild(stack: ReversibleStack, x: Tensor, v: Tensor, x0: Tensor | None) -> tuple[Tensor, Tensor]:
    """The input state ``(x_0, v_0)`` rebuilt from the last state
    ``(x_L, v_L)`` by the steppers' inverses (what the backward pass does),
    to measure the float rounding of the inversion."""
    for i in reversed(range(len(stack.steppers))):
        stepper = stack.steppers[i]
        x, v = stepper.inverse(x, v, lambda z: stack.force(i, z, x0), stepper.tau)
    return x, v


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
        h, inputs = model._embed(x, edge_index, batch)
        stack = model._reversible_stack(inputs, None)
        xl, vl = h, torch.zeros_like(h)
        for i, stepper in enumerate(stack.steppers):
            xl, vl = stepper.update(xl, vl, stack.force(i, xl, inputs.x0), stepper.tau, None)
        x_back, _ = rebuild(stack, xl, vl, inputs.x0)
    finally:
        model.train(was_training)
    return ((x_back - h).abs().max() / h.abs().max()).item()


def invertible_kinds() -> list[str]:
    """The registered kinds whose stepper has an inverse (``invertible = True``)."""
    return [name for name, cls in STEPPERS.items() if cls.invertible]


def check_memory_args(residual: str, gradient_checkpointing, checkpoint_segments, reversible) -> None:
    """One-line errors for the memory options (after ``residual`` is known)."""
    for name, value in (("gradient_checkpointing", gradient_checkpointing), ("reversible", reversible)):
        if not isinstance(value, bool):
            raise InputError(f"{name} must be True or False, got {value!r}")
    if checkpoint_segments is not None and (isinstance(checkpoint_segments, bool)
                                            or not isinstance(checkpoint_segments, int) or checkpoint_segments < 1):
        raise InputError(f"checkpoint_segments must be a positive integer or None, got {checkpoint_segments!r}")
    if checkpoint_segments is not None and not gradient_checkpointing:
        raise InputError(f"checkpoint_segments={checkpoint_segments!r} needs gradient_checkpointing=True")
    if reversible and not STEPPERS[residual].invertible:
        raise InputError(f"reversible=True needs a residual kind with an inverse "
                         f"({', '.join(map(repr, invertible_kinds()))}), got {residual!r}")
    if reversible and gradient_checkpointing:
        raise InputError("reversible=True already stores no layer state; set gradient_checkpointing=False")
