r"""The checkpointed memory mode: a model's layers run under gradient
checkpointing.

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

import contextlib
import math
from typing import Sequence

from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .joint_norm import frozen_stats
from .layer import LayerContext
from .sequential import Hook, Total, run_layers
from .steppers import StepState

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


class _Segment:
    """Layers ``start .. stop-1`` as a function of ``(x, v)`` for
    :func:`~torch.utils.checkpoint.checkpoint`; the hook and the list of
    hidden states are served in the first call only (the forward pass), not
    in the recomputation, which leaves BatchNorm's running statistics alone
    (:func:`~wavygraph.nn.joint_norm.frozen_stats`). With ``summed`` the
    segment's sum of its output states is a third output (an output of the
    checkpoint, so that its gradient reaches the recomputed layers)."""

    def __init__(self, layers: Sequence[nn.Module], start: int, ctx: LayerContext, hook: Hook, hidden: list | None,
                 summed: bool = False):
        self.layers, self.start, self.ctx, self.hook, self.hidden = layers, start, ctx, hook, hidden
        self.summed, self.calls = summed, 0

    def __call__(self, x: Tensor, v: Tensor | None):
        (hook, hidden), self.hook, self.hidden = (self.hook, self.hidden), None, None
        self.calls += 1
        part = Total() if self.summed else None
        with frozen_stats() if self.calls > 1 else contextlib.nullcontext():
            state = run_layers(self.layers, StepState(x, v), self.ctx, hook, hidden, self.start, part)
        return (state.x, state.v) if part is None else (state.x, state.v, part.value)


def run_checkpointed(layers: Sequence[nn.Module], state: StepState, ctx: LayerContext, segments: int | None = None,
                     hook: Hook = None, hidden: list | None = None, total: Total | None = None) -> StepState:
    """All ``layers`` from ``state``, each segment but the last checkpointed
    (see the module); ``hook``, ``hidden`` and ``total`` as in
    :func:`~wavygraph.nn.sequential.run_layers`."""
    num_layers = len(layers)
    segments = default_segments(num_layers) if segments is None else segments
    *checkpointed, (start, stop) = segment_bounds(num_layers, segments)
    for first, last in checkpointed:
        segment = _Segment(layers[first:last], first, ctx, hook, hidden, total is not None)
        x, v, *part = checkpoint(segment, state.x, state.v, use_reentrant=False, preserve_rng_state=True)
        if part:
            total.add(part[0])
        state = StepState(x, v)
    return run_layers(layers[start:stop], state, ctx, hook, hidden, start, total)
