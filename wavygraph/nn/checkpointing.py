r"""The layer loop of :class:`~wavygraph.nn.WavyDIFFormer` and its
gradient checkpointing.

With ``gradient_checkpointing=True`` the stack is cut into segments of
consecutive layers; each segment runs under
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False,
preserve_rng_state=True)``, which keeps only the segment's input state
(the stepper's :class:`~wavygraph.nn.steppers.StepState`, ``x`` and ``v``)
and recomputes the segment in the backward pass. The random generator's
state is restored for the recomputation, so the dropout masks repeat and
the gradients, and therefore the scores, are those without checkpointing.

The last segment runs without a checkpoint: the backward pass needs its
tensors first, so recomputing them would cost time and save nothing (the
peak is one segment's tensors either way). Memory: the ``L / k`` segment
inputs plus one segment's saved tensors (``k`` layers), instead of every
layer's; compute: one more forward pass of all but the last segment.
``segments`` is the number of segments (as in
``torch.utils.checkpoint.checkpoint_sequential``); :obj:`None` takes
:func:`default_segments`.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

from torch import Tensor
from torch.utils.checkpoint import checkpoint

from .steppers import StepState

#: ``layer(i, state) -> state``: layer ``i`` of the stack.
LayerFn = Callable[[int, StepState], StepState]
#: ``hook(i, x_i)``: called with every layer's output state.
Hook = Optional[Callable[[int, Tensor], None]]


def default_segments(num_layers: int) -> int:
    """``ceil(sqrt(L))`` segments of about ``sqrt(L)`` layers each: the
    stored boundary states and one segment's recomputed tensors are then
    both about ``sqrt(L)`` layers' worth."""
    return max(1, math.ceil(math.sqrt(num_layers)))


def segment_bounds(num_layers: int, segments: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]``: ``min(segments, L)`` runs of consecutive
    layers, as equal as possible, covering ``0 .. L-1``."""
    segments = max(1, min(segments, num_layers))
    size, extra = divmod(num_layers, segments)
    bounds, start = [], 0
    for s in range(segments):
        stop = start + size + (1 if s < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def run_layers(layer: LayerFn, state: StepState, start: int, stop: int, hook: Hook = None) -> StepState:
    """Layers ``start .. stop-1`` in order; ``hook(i + 1, x)`` after layer ``i``."""
    for i in range(start, stop):
        state = layer(i, state)
        if hook is not None:
            hook(i + 1, state.x)
    return state


class _Segment:
    """Layers ``start .. stop-1`` as a function of ``(x, v)`` for
    :func:`~torch.utils.checkpoint.checkpoint`; the hook runs in the first
    call only (the forward pass), not in the recomputation."""

    def __init__(self, layer: LayerFn, start: int, stop: int, hook: Hook):
        self.layer, self.start, self.stop, self.hook = layer, start, stop, hook

    def __call__(self, x: Tensor, v: Tensor | None):
        hook, self.hook = self.hook, None
        state = run_layers(self.layer, StepState(x, v), self.start, self.stop, hook)
        return state.x, state.v


def run_checkpointed(layer: LayerFn, state: StepState, num_layers: int, segments: int | None = None,
                     hook: Hook = None) -> StepState:
    """All ``num_layers`` layers, each segment but the last checkpointed (see the module)."""
    segments = default_segments(num_layers) if segments is None else segments
    *checkpointed, (start, stop) = segment_bounds(num_layers, segments)
    for first, last in checkpointed:
        x, v = checkpoint(_Segment(layer, first, last, hook), state.x, state.v,
                          use_reentrant=False, preserve_rng_state=True)
        state = StepState(x, v)
    return run_layers(layer, state, start, stop, hook)


def with_hidden(hook, hidden: list | None):
    """``hook``, extended to append every state to ``hidden`` (a list) when given."""
    if hidden is None:
        return hook

    def both(i: int, x: Tensor) -> None:
        hidden.append(x)
        if hook is not None:
            hook(i, x)

    return both
