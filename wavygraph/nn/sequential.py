"""The plain memory mode: a model's layers run one after the other, every
layer's tensors kept for the backward pass by autograd."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from torch import Tensor, nn

from .layer import LayerContext
from .steppers import StepState

#: ``hook(i, x_i)``: called with every layer's output state.
Hook = Optional[Callable[[int, Tensor], None]]


def run_layers(layers: Sequence[nn.Module], state: StepState, ctx: LayerContext, hook: Hook = None,
               hidden: list | None = None, start: int = 0) -> StepState:
    """``layers`` in order from ``state``; after the ``k``-th of them
    (depth ``i = start + k``) its output ``x`` is appended to ``hidden``
    (when given) and ``hook(i + 1, x)`` is called."""
    for i, layer in enumerate(layers, start):
        state = layer(state, ctx)
        if hidden is not None:
            hidden.append(state.x)
        if hook is not None:
            hook(i + 1, state.x)
    return state
