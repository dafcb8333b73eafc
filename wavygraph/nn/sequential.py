"""The plain memory mode: a model's layers run one after the other, every
layer's tensors kept for the backward pass by autograd."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from torch import Tensor, nn

from .layer import LayerContext
from .steppers import StepState

#: ``hook(i, x_i)``: called with every layer's output state.
Hook = Optional[Callable[[int, Tensor], None]]


class Total:
    """The running sum of the layers' output states ``x`` (the model's
    ``readout="mean"``): a sum keeps no state for backward, so it costs one
    ``(N, C)`` tensor whatever the depth, in every memory mode."""

    def __init__(self):
        self.value: Tensor | None = None

    def add(self, x: Tensor) -> None:
        self.value = x if self.value is None else self.value + x


def run_layers(layers: Sequence[nn.Module], state: StepState, ctx: LayerContext, hook: Hook = None,
               hidden: list | None = None, start: int = 0, total: Total | None = None) -> StepState:
    """``layers`` in order from ``state``; after the ``k``-th of them
    (depth ``i = start + k``) its output ``x`` is appended to ``hidden``
    and added to ``total`` (when given) and ``hook(i + 1, x)`` is called."""
    for i, layer in enumerate(layers, start):
        state = layer(state, ctx)
        if hidden is not None:
            hidden.append(state.x)
        if total is not None:
            total.add(state.x)
        if hook is not None:
            hook(i + 1, state.x)
    return state
